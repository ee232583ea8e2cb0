#pragma once
// The stages of `run` around the model (tools/cmd_run.cpp): a reader thread decodes and preprocesses
// the next frames and a writer thread writes the finished ones while the main thread runs the model,
// so the host's decoding and file writing overlap the model's compute (on a GPU the host is otherwise
// idle while the device works, and a frame's host work can take longer than its device work).
// Frames stay in order: one reader, one writer, FIFO queues of bounded depth (memory stays flat).
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace lingbot::cli {

// A FIFO of at most `capacity` items between two threads. close() wakes both sides: push then
// returns false (the item is dropped), pop returns what is left, then nullopt.
template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity ? capacity : 1) {}
  bool push(T item) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  std::optional<T> pop() {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }
  void close() {
    const std::lock_guard lock(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  size_t capacity_;
  bool closed_ = false;
};

// A thread running `body` once; an exception it throws is kept for rethrow() (after join()).
// Joins on destruction.
class StageThread {
 public:
  StageThread() = default;
  explicit StageThread(std::function<void()> body)
      : thread_([this, body = std::move(body)] {
          try {
            body();
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~StageThread() { join(); }
  StageThread(const StageThread&) = delete;
  StageThread& operator=(const StageThread&) = delete;
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  // After join(): the body's exception, if it threw.
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::thread thread_;  // last: started after error_ exists
};

}  // namespace lingbot::cli
