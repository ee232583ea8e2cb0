#pragma once
// How the bindings report bad arguments and pending signals: an argument value out of range or not
// among its choices is a ValueError, as Python's own argument checks raise; lingbot_map.Error
// (lingbot::Error) is for what the engine meets (files, checkpoints, devices, streams).
#include <pybind11/pybind11.h>

#include <string>

#include "core/error.h"
#include "fs_text.h"

namespace lingbot::python {

namespace py = pybind11;

// Raises ValueError with the parts concatenated unless `ok`.
template <typename... Parts>
void check_value(bool ok, const Parts&... parts) {
  if (!ok) throw py::value_error(detail::concat(parts...));
}

// The engine's parsers and option checks (they throw lingbot::Error) for an argument: a ValueError.
template <typename F>
auto value_of(F&& parse) {
  try {
    return parse();
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
}

// A pending signal (Ctrl-C) as its Python exception (KeyboardInterrupt). Needs the GIL.
inline void check_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// Inside a catch of lingbot::Stopped (a step Ctrl-C stopped): KeyboardInterrupt (CPython has the
// signal recorded), else the exception being handled.
[[noreturn]] inline void rethrow_stopped() {
  check_signals();
  throw;
}

// A DeprecationWarning for an old spelling (docs/naming.md). stacklevel 1 from a native function is the
// Python line that called it (so the warning shows by default when that line is in __main__).
inline void warn_deprecated(const std::string& message) {
  if (PyErr_WarnEx(PyExc_DeprecationWarning, message.c_str(), 1) != 0) throw py::error_already_set();
}

// A warning whose text may quote file names, which need not be UTF-8 (fs_decode: the bytes that do
// not decode become lone surrogates, as os.fsdecode makes them). Same stack level as above.
inline void warn_quoting_files(PyObject* category, const std::string& message) {
  py::module_::import("warnings").attr("warn")(fs_decode(message), py::handle(category), 1);
}
inline void warn_user(const std::string& message) { warn_quoting_files(PyExc_UserWarning, message); }

// Whether a warning may be issued from a destructor or a garbage collection (GIL held): the
// interpreter is up and not finalizing (then the warnings machinery may be gone).
inline bool python_can_warn() {
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  return Py_IsInitialized() && !finalizing;
}

}  // namespace lingbot::python
