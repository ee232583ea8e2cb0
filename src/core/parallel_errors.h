#pragma once
// Exceptions inside an OpenMP region: one that leaves the region ends the process (std::terminate,
// no message, a core dump) instead of reaching the caller as an error. A region's code that can
// throw (an allocation, a library call, a check) runs through run(): the first exception of any
// thread is kept and later run() calls of every thread return at once; after the region,
// rethrow() throws it on the calling thread.
//
//   ParallelErrors errors;
//   #pragma omp parallel for
//   for (...) errors.run([&] { ... });
//   errors.rethrow();
#include <atomic>
#include <exception>
#include <mutex>
#include <utility>

namespace lingbot {

class ParallelErrors {
 public:
  template <class Body>
  void run(Body&& body) noexcept {
    if (failed_.load(std::memory_order_acquire)) return;
    try {
      std::forward<Body>(body)();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
      failed_.store(true, std::memory_order_release);
    }
  }
  // After the region (every thread joined): throws the first exception caught, if any.
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
  std::atomic<bool> failed_{false};
};

}  // namespace lingbot
