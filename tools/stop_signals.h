#pragma once
// Ctrl-C for long commands (run, bench kv/model/soak): while a StopSignalGuard lives, SIGINT, SIGTERM
// and SIGHUP (a closed terminal or ssh session; one ignored when the guard is made, as under nohup,
// stays ignored) set a flag the work checks, so the command ends early and keeps what it did
// (run: summary.json; a bench: its table and CSV of the frames measured). SIGPIPE is ignored
// meanwhile: an output that went away must not kill the command before its summary (the writes
// fail instead). A second signal 1 s or more after the first gets the default action at once,
// after one line on stderr naming `second_interrupt_loses`; one sooner is the same interrupt
// delivered twice (timeout(1) without --foreground signals the process, then its process group).
#include <atomic>

#include "core/scoped_signal_action.h"

namespace lingbot::cli {

class StopSignalGuard {
 public:
  // second_interrupt_loses: what a second interrupt loses, e.g. "no summary.json; the files written so
  // far stay valid" (a string literal: the handler reads it).
  explicit StopSignalGuard(const char* second_interrupt_loses);
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  // True once a stop signal arrived.
  bool requested() const;
  // The signal that asked to stop (SIGINT, SIGTERM or SIGHUP), 0 while none did.
  int signal() const;
  // The flag, for SessionOptions::stop and the benches' loops.
  const std::atomic<bool>* flag() const;

 private:
  [[maybe_unused]] bool cleared_;  // first member: the flags are cleared before any handler is installed
  ScopedSignalAction int_, term_, hup_, pipe_;
};

// summary.json's "signal" / the interrupted line: "SIGINT", "SIGTERM" or "SIGHUP".
const char* stop_signal_name(int sig);
// How a user says it: "Ctrl-C" for SIGINT, else the signal's name.
const char* stop_signal_words(int sig);
// A command stopped by `sig` exits 128 + sig, as a shell reports it (130 for Ctrl-C).
inline int exit_code_of_signal(int sig) { return 128 + sig; }

}  // namespace lingbot::cli
