#pragma once
// Marks an object busy for the duration of one call. Sessions (and the Python module's objects)
// are not thread-safe: a second call while one runs, from another thread (the Python module
// releases the GIL during a step) or from a callback re-entering its own session, would race on the
// caches and corrupt them silently. The guarded calls refuse it with an Error instead; the cost is
// one atomic exchange per call.
#include <atomic>
#include <string_view>

#include "core/error.h"

namespace lingbot {

// The detail of Session's and WindowedSession's error: their calls can also come back from their
// own keyframe policy or window observer on the same thread.
inline constexpr std::string_view kOneCallAtATime =
    " (one thread at a time; a keyframe policy or window observer must not call back into its session)";

class BusyGuard {
 public:
  // The error reads "<what> is already running a call<detail>".
  BusyGuard(std::atomic<bool>& flag, std::string_view what,
            std::string_view detail = " in another thread (use one object per thread)")
      : flag_(flag) {
    LINGBOT_CHECK(!flag_.exchange(true, std::memory_order_acquire), what, " is already running a call", detail);
  }
  ~BusyGuard() { flag_.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& flag_;
};

}  // namespace lingbot
