#pragma once
// Process-wide conditions an engine call meets from Python: Ctrl-C during a long step, and fork().
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

// Interpreter exit while another thread is in an engine call with the GIL released (a daemon thread
// iterating reconstruct(), say): exit() destroyed oneDNN's and OpenMP's globals under the call, a
// segfault. Every engine call made without the GIL is a ReleasedGil. An atexit hook registered at
// import (finish_engine_calls_at_exit) sets the stop flag of the calls running (a step ends at its
// next block, a video read at its next poll) and waits for them, the GIL released, up to 30 s. A
// thread whose call ends after that, or that starts one, is parked: it sleeps, the GIL not taken
// back, until the process ends, as CPython parks daemon threads that reach for the GIL then (no
// traceback of an exit-time error from them). On the main thread (another atexit hook's call) a
// call after that raises Error instead.
class ReleasedGil {
 public:
  // GIL held. stop: the call's SessionOptions::stop, or null (the call runs to its end; exit waits).
  explicit ReleasedGil(std::atomic<bool>* stop = nullptr);
  ~ReleasedGil();  // takes the GIL back
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  std::atomic<bool>* stop_;
  PyThreadState* state_;  // PyEval_SaveThread's
};
// True once the interpreter has begun to exit: the interrupt of a video read made without the GIL.
bool interpreter_exiting();
// The atexit hook (registered at import; GIL held).
void finish_engine_calls_at_exit();

// fork: GNU OpenMP's thread pool does not survive fork(): a child forked after this process ran a step
// on several threads hangs in its first parallel region (multiprocessing's default start method on
// Linux is fork). The parent notes that it ran threads, the child (note_fork_child, registered with
// pthread_atfork when the module is imported) that it was forked after that, and the child's steps on
// more than one thread are refused with an Error instead of hanging.
void note_fork_child();
// Before a step on `threads` threads (0 = all cores): raises lingbot::Error in such a child.
void check_threads_after_fork(int threads);

}  // namespace lingbot::python
