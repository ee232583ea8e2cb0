#pragma once
// Process-wide conditions an engine call meets from Python: Ctrl-C during a long step, fork(), and
// the interpreter's exit while another thread is in a call.
//
// Ctrl-C: CPython's SIGINT handler only sets a flag while the GIL is released; reconstruct()'s
// iterator checks it after every frame (PyErr_CheckSignals), so KeyboardInterrupt arrives at the
// next frame boundary with the engine state consistent. A scale phase is one step that can take
// minutes on a CPU, so during one, on the main thread, SIGINT also sets the session's stop flag
// (SessionOptions::stop: the step ends at its next block) before CPython's handler runs
// (CtrlCStopsTheStep); KeyboardInterrupt then comes at once, and the session needs reset() (the
// iteration of reconstruct() ends). Only with Python's default SIGINT handler: a program's own
// handler decides what Ctrl-C does, and the step runs to its end. Session.push / finish check for
// a pending Ctrl-C before returning, and keep their results for the next call if there is one.
#include <pybind11/pybind11.h>

#include <atomic>
#include <optional>

#include "core/scoped_signal_action.h"

namespace lingbot::python {

// For the lifetime of one engine call made with the GIL released, when `armed` (the call runs a scale
// phase): SIGINT sets `flag`, then runs the handler that was installed (CPython's, which records it
// for PyErr_CheckSignals). Only where Python's handler is signal.default_int_handler (Ctrl-C raises
// KeyboardInterrupt, so the step's work would be lost anyway): a program's own handler decides what
// Ctrl-C does, and the step runs to its end. Nothing happens off the main thread or when SIGINT is
// not handled by a function (ignored, or default: the process ends). Construct with the GIL held.
class CtrlCStopsTheStep {
 public:
  CtrlCStopsTheStep(std::atomic<bool>* flag, bool armed);
  ~CtrlCStopsTheStep();
  CtrlCStopsTheStep(const CtrlCStopsTheStep&) = delete;
  CtrlCStopsTheStep& operator=(const CtrlCStopsTheStep&) = delete;

 private:
  std::optional<ScopedSignalAction> hook_;  // set while ours is installed
};

// Interpreter exit while another thread is in an engine step with the GIL released (a daemon thread
// iterating reconstruct(), say): exit() destroyed oneDNN's and OpenMP's globals under the step, a
// segfault. Every call made without the GIL is a ReleasedGil. An atexit hook registered at import
// (finish_engine_calls_at_exit) sets the stop flag of the steps running (each ends at its next block)
// and waits for them, the GIL released, up to 30 s; other calls (a read, a load, a write) are neither
// stopped nor waited for. Then a thread whose call ends, or that starts one, is parked: it sleeps, the
// GIL not taken back, until the process ends, as CPython parks daemon threads that reach for the GIL
// then (no traceback from them). Exceptions: the exiting thread itself (another atexit hook, a
// finalizer) calls as usual, and a call nested in one of the same thread's (a progress callback's)
// raises Error, so that the outer step fails, ends and parks.
class ReleasedGil {
 public:
  // GIL held. stop: the call's SessionOptions::stop, for an engine step; null for other calls.
  explicit ReleasedGil(std::atomic<bool>* stop = nullptr);
  ~ReleasedGil();  // takes the GIL back
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  std::atomic<bool>* stop_;
  struct EngineCalls* registered_in_ = nullptr;  // the table the step counts in (a fork replaces it)
  PyThreadState* state_ = nullptr;               // PyEval_SaveThread's
};
// The atexit hook (registered at import; GIL held).
void finish_engine_calls_at_exit();

// fork: GNU OpenMP's thread pool does not survive fork(): a child forked after this process ran a step
// on several threads hangs in its first parallel region (multiprocessing's default start method on
// Linux is fork). The parent notes that it ran threads, the child (note_fork_child, registered with
// pthread_atfork when the module is imported) that it was forked after that, and the child's steps on
// more than one thread are refused with an Error instead of hanging.
void note_fork_child();
// A child also starts with no engine call of the parent's counted (their threads are not in it).
// Before a step on `threads` threads (0 = all cores): raises lingbot::Error in such a child.
void check_threads_after_fork(int threads);

}  // namespace lingbot::python
