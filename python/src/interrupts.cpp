// Ctrl-C during an engine step, fork() after threads, and exit during a call (interrupts.h says what and why).
#include "interrupts.h"

#include <pybind11/pybind11.h>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

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

}  // namespace

// The engine steps running without the GIL, process-wide as the interpreter's exit is. Never
// destroyed: the hook and threads still running use it while the process exits; a forked child gets
// a new one (note_fork_child), as the parent's threads and its mutex's state are not the child's.
struct EngineCalls {
  std::mutex mutex;
  std::condition_variable ended;
  int steps = 0;
  std::vector<std::atomic<bool>*> stops;  // of the running steps
  bool exiting = false;
  unsigned long exit_thread = 0;  // the thread that runs the exit
};

namespace {

std::atomic<EngineCalls*> g_engine_calls{new EngineCalls};
thread_local int t_calls = 0;  // this thread's ReleasedGil calls in progress (a callback's nest in a step's)

bool on_main_thread() {  // GIL held
  static const unsigned long main_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  return PyThread_get_thread_ident() == main_ident;
}

// Whether this process ran a step on several threads, and whether it is a child forked after that.
std::atomic<bool> g_ran_threads{false};
std::atomic<bool> g_forked_after_threads{false};

}  // namespace

CtrlCStopsTheStep::CtrlCStopsTheStep(std::atomic<bool>* flag, bool armed) {
  flag->store(false);
  if (!armed) return;
  if (!on_main_thread()) return;
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

namespace {

// A thread that must not run on while the process exits: sleeps until it ends.
[[noreturn]] void park_until_exit() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace

ReleasedGil::ReleasedGil(std::atomic<bool>* stop) : stop_(stop) {
  EngineCalls& calls = *g_engine_calls.load();
  bool park = false;
  {
    const std::lock_guard<std::mutex> lock(calls.mutex);
    if (calls.exiting && calls.exit_thread != PyThread_get_thread_ident()) {
      LINGBOT_CHECK(t_calls == 0, "the Python interpreter is exiting: the call this one is nested in was stopped");
      park = true;
    } else if (stop_ && !calls.exiting) {
      ++calls.steps;
      calls.stops.push_back(stop_);
      registered_in_ = &calls;
    }
  }
  if (park) {
    PyEval_SaveThread();
    park_until_exit();
  }
  ++t_calls;
  state_ = PyEval_SaveThread();
}

ReleasedGil::~ReleasedGil() {
  EngineCalls& calls = *g_engine_calls.load();
  bool park = false;
  {
    const std::lock_guard<std::mutex> lock(calls.mutex);
    if (registered_in_ == &calls) {
      --calls.steps;
      calls.stops.erase(std::find(calls.stops.begin(), calls.stops.end(), stop_));
    }
    park = calls.exiting && calls.exit_thread != PyThread_get_thread_ident() && t_calls == 1;
  }
  calls.ended.notify_all();
  --t_calls;
  if (park) park_until_exit();  // an outer call of this thread (t_calls > 1) must end first
  PyEval_RestoreThread(state_);
}

void finish_engine_calls_at_exit() {
  EngineCalls& calls = *g_engine_calls.load();
  const unsigned long me = PyThread_get_thread_ident();
  const py::gil_scoped_release nogil;  // the steps may call back into Python (progress) as they end
  std::unique_lock<std::mutex> lock(calls.mutex);
  calls.exiting = true;
  calls.exit_thread = me;
  for (std::atomic<bool>* stop : calls.stops) stop->store(true, std::memory_order_release);
  if (!calls.ended.wait_for(lock, std::chrono::seconds(30), [&] { return calls.steps == 0; }))
    std::fprintf(stderr, "lingbot_map: %d step(s) in other threads still running 30 s after the interpreter began to "
                 "exit; exiting under them\n", calls.steps);
}

void note_fork_child() {
  if (g_ran_threads.load()) g_forked_after_threads.store(true);
  g_engine_calls.store(new EngineCalls);  // the parent's is left as it was (its mutex may be held)
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
