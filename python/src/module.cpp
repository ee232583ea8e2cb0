// The lingbot_map Python module: Model, Session, reconstruct(), Exporter and the I/O helpers of
// `lingbot-map run`, over the engine's public API (include/lingbot/*.h, src/io/*.h). One file per
// part (bindings.h lists them); Ctrl-C and fork() handling in interrupts.h.
//
// Threads: every call into the engine (loading, decoding, preprocessing, inference, writing) runs
// with the GIL released. A Session / Reconstruction / Exporter serves one call at a time; a second
// thread calling the same object meanwhile gets lingbot_map.Error instead of racing.
#include <pybind11/pybind11.h>

#include <pthread.h>

#include "bindings.h"
#include "core/error.h"
#include "interrupts.h"

namespace py = pybind11;

PYBIND11_MODULE(_lingbot_map, m) {
  using namespace lingbot::python;
  m.doc() = "lingbot_map: streaming 3D reconstruction (LingBot-Map) from NumPy, without PyTorch.";
  m.attr("__version__") = LINGBOT_VERSION;
  ::pthread_atfork(nullptr, nullptr, note_fork_child);  // once per process: the module is imported once
  py::register_exception<lingbot::Error>(m, "Error", PyExc_RuntimeError);
  m.attr("Error").attr("__doc__") =
      "An engine error: an unreadable file or checkpoint, a frame the model cannot take, a missing device, "
      "a call out of order. The message is the engine's (the same text `lingbot-map` prints after "
      "'error: '). Argument values out of range or not among their choices raise ValueError.";
  m.attr("Error").attr("__module__") = "lingbot_map";  // tracebacks name the public module
  // Registered after Error, so its translator is tried first. Also a FileNotFoundError, so
  // `except FileNotFoundError` catches a missing model file, folder or video as Python's open() would.
  py::register_exception<lingbot::FileNotFound>(
      m, "FileNotFound", py::make_tuple(m.attr("Error"), py::handle(PyExc_FileNotFoundError)));
  m.attr("FileNotFound").attr("__doc__") =
      "A model file, image folder or file, video file, safetensors file or golden case folder that does not exist: both a "
      "lingbot_map.Error and a FileNotFoundError. The message ends with '<what> not found: <path>' (errno and\n"
      "filename are None).";
  m.attr("FileNotFound").attr("__module__") = "lingbot_map";
  bind_model(m);
  bind_result(m);
  bind_session(m);
  bind_reconstruct(m);
  bind_exporter(m);
  bind_functions(m);
  bind_argument_errors(m);
}
