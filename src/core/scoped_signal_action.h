#pragma once
// One signal's disposition for a scope: installs a handler and restores the one it replaced, so the
// front ends' handlers (run's stop flag, view's wait, the Python module's Ctrl-C hook) never outlive
// the work they are for. Dispositions are process-wide: create and destroy these on one thread, nested
// ones in reverse order of creation (as scopes and members do).
#include <signal.h>

namespace lingbot {

class ScopedSignalAction {
 public:
  using Handler = void (*)(int);
  using InfoHandler = void (*)(int, siginfo_t*, void*);

  // handler: a function, SIG_IGN or SIG_DFL; flags: sa_flags (SA_RESETHAND: a second signal gets the
  // default action). No signal is blocked while the handler runs besides `sig` itself.
  ScopedSignalAction(int sig, Handler handler, unsigned flags = 0) : sig_(sig) {
    struct sigaction action{};
    action.sa_handler = handler;
    install(action, flags);
  }
  // A handler that takes siginfo (SA_SIGINFO is added to flags), e.g. one that chains to the handler
  // it replaces (which its owner reads with sigaction before).
  ScopedSignalAction(int sig, InfoHandler handler, unsigned flags = 0) : sig_(sig) {
    struct sigaction action{};
    action.sa_sigaction = handler;
    install(action, flags | SA_SIGINFO);
  }
  ~ScopedSignalAction() {
    if (installed_) ::sigaction(sig_, &replaced_, nullptr);
  }
  ScopedSignalAction(const ScopedSignalAction&) = delete;
  ScopedSignalAction& operator=(const ScopedSignalAction&) = delete;

  // False when sigaction refused (an invalid signal number): nothing changed, nothing is restored.
  bool installed() const { return installed_; }

 private:
  // unsigned: SA_RESETHAND is 0x80000000, which sa_flags (an int) holds as its sign bit.
  void install(struct sigaction& action, unsigned flags) {
    action.sa_flags = static_cast<int>(flags);
    sigemptyset(&action.sa_mask);
    installed_ = ::sigaction(sig_, &action, &replaced_) == 0;
  }

  int sig_;
  struct sigaction replaced_{};
  bool installed_ = false;
};

}  // namespace lingbot
