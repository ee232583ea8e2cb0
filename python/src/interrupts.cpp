// Ctrl-C during an engine step and fork() after threads (interrupts.h says what and why).
#include "interrupts.h"

#include <pybind11/pybind11.h>

#include <pthread.h>
#include <signal.h>

#include "core/error.h"

namespace lingbot::python {

namespace py = pybind11;

namespace {

// Signal dispositions are process-wide, so this state is too: the flag of the step running on the
// main thread (Python handles signals only there, one call at a time) and the handler it replaced.
std::atomic<std::atomic<bool>*> g_ctrl_c_target{nullptr};
struct sigaction g_replaced_sigint {};

extern "C" void ctrl_c_stops_the_step(int sig, siginfo_t* info, void* context) {
  if (std::atomic<bool>* target = g_ctrl_c_target.load()) target->store(true, std::memory_order_release);
  if (g_replaced_sigint.sa_flags & SA_SIGINFO) g_replaced_sigint.sa_sigaction(sig, info, context);
  else g_replaced_sigint.sa_handler(sig);
}

// Whether this process ran a step on several threads, and whether it is a child forked after that.
std::atomic<bool> g_ran_threads{false};
std::atomic<bool> g_forked_after_threads{false};

}  // namespace

CtrlCStopsTheStep::CtrlCStopsTheStep(std::atomic<bool>* flag, bool armed) {
  flag->store(false);
  if (!armed) return;
  static const unsigned long main_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  if (PyThread_get_thread_ident() != main_ident) return;
  const py::module_ signal_module = py::module_::import("signal");
  if (!signal_module.attr("getsignal")(SIGINT).is(signal_module.attr("default_int_handler"))) return;
  struct sigaction current {};
  if (::sigaction(SIGINT, nullptr, &current) != 0) return;
  const bool function = (current.sa_flags & SA_SIGINFO) ? current.sa_sigaction != nullptr
                                                        : current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
  if (!function) return;
  g_replaced_sigint = current;  // before ours is installed: the handler chains to it
  g_ctrl_c_target.store(flag);
  hook_.emplace(SIGINT, ctrl_c_stops_the_step, static_cast<unsigned>(current.sa_flags & SA_RESTART));
  if (!hook_->installed()) {
    hook_.reset();
    g_ctrl_c_target.store(nullptr);
  }
}

CtrlCStopsTheStep::~CtrlCStopsTheStep() {
  if (!hook_) return;
  hook_.reset();  // CPython's handler back first, then the target goes
  g_ctrl_c_target.store(nullptr);
}

void note_fork_child() {
  if (g_ran_threads.load()) g_forked_after_threads.store(true);
}
void check_threads_after_fork(int threads) {
  if (threads == 1) return;
  LINGBOT_CHECK(!g_forked_after_threads.load(),
                "this process was forked from one that had run lingbot_map on several threads, and OpenMP's "
                "threads would hang here: start worker processes with multiprocessing's 'spawn' or 'forkserver' "
                "method (multiprocessing.get_context('spawn')), or use threads=1 in this process");
  g_ran_threads.store(true);
}

}  // namespace lingbot::python
