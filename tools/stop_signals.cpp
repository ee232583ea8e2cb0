#include "stop_signals.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lingbot::cli {

namespace {

// The state a signal handler may touch: lock-free globals. g_signal holds the signal number, stored
// before g_stop is released, so whoever sees the flag (acquire) sees the number. The handler may run
// on any thread (reader, writer, OpenMP workers).
std::atomic<int> g_signal{0};
std::atomic<bool> g_stop{false};
std::atomic<int64_t> g_first_signal_ns{0};  // CLOCK_MONOTONIC of the first stop signal; 0: none yet
std::atomic<const char*> g_second_interrupt_loses{""};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free &&
                  std::atomic<int64_t>::is_always_lock_free && std::atomic<const char*>::is_always_lock_free,
              "a signal handler reads and sets them");

constexpr int64_t kSameInterruptNs = 1'000'000'000;

void write_stderr(const char* s) { [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, s, std::strlen(s)); }

extern "C" void on_stop_signal(int sig) {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  const int64_t t = std::max<int64_t>(int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec, 1);
  int64_t first = 0;
  if (g_first_signal_ns.compare_exchange_strong(first, t)) {
    g_signal.store(sig, std::memory_order_relaxed);
    g_stop.store(true, std::memory_order_release);
    return;
  }
  if (t - first < kSameInterruptNs) return;
  // A second Ctrl-C: the signal's default action (the process ends at once), said first.
  write_stderr("\nlingbot-map: second interrupt: terminating at once (");
  write_stderr(g_second_interrupt_loses.load());
  write_stderr(")\n");
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // delivered when this handler returns (the signal is blocked while it runs)
}

bool clear_flags(const char* second_interrupt_loses) {
  g_signal.store(0);
  g_stop.store(false);
  g_first_signal_ns.store(0);
  g_second_interrupt_loses.store(second_interrupt_loses);
  return true;
}

// SIGHUP ignored when the command starts (`nohup lingbot-map run ...`) stays ignored.
bool ignored(int sig) {
  struct sigaction now{};
  return ::sigaction(sig, nullptr, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_IGN;
}

}  // namespace

StopSignalGuard::StopSignalGuard(const char* second_interrupt_loses)
    : cleared_(clear_flags(second_interrupt_loses)),
      int_(SIGINT, on_stop_signal),
      term_(SIGTERM, on_stop_signal),
      hup_(SIGHUP, ignored(SIGHUP) ? SIG_IGN : on_stop_signal),
      pipe_(SIGPIPE, SIG_IGN) {}

bool StopSignalGuard::requested() const { return g_stop.load(std::memory_order_acquire); }
int StopSignalGuard::signal() const { return requested() ? g_signal.load(std::memory_order_relaxed) : 0; }
const std::atomic<bool>* StopSignalGuard::flag() const { return &g_stop; }

const char* stop_signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "SIGINT"; }
const char* stop_signal_words(int sig) { return sig == SIGINT ? "Ctrl-C" : stop_signal_name(sig); }

}  // namespace lingbot::cli
