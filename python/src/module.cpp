// The lingbot_map Python module: Model, Session, reconstruct(), Exporter and the I/O helpers of
// `lingbot-map run`, over the engine's public API (include/lingbot/*.h, src/io/*.h). One file per
// part (bindings.h lists them); Ctrl-C and fork() handling in interrupts.h.
//
// Threads: every call into the engine (loading, decoding, preprocessing, inference, writing) runs
// with the GIL released. A Session / Reconstruction / Exporter serves one call at a time; a second
// thread calling the same object meanwhile gets lingbot_map.Error instead of racing (a Session's and
// an iterator's readers answer meanwhile from the figures of the call's start: Stream::Call).
#include <pybind11/pybind11.h>

#include <pthread.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "bindings.h"
#include "fs_text.h"
#include "core/error.h"
#include "interrupts.h"

namespace py = pybind11;

namespace {

// The engine's messages name paths, which are bytes on POSIX: they are decoded as UTF-8 with any
// other byte written \xNN (pybind11's own translators drop a message that is not UTF-8, raising an
// exception with no text). A FileNotFound also gets errno and filename as open()'s error has them
// (filename as os.fsdecode() gives it, so it names the file again).
void translate_engine_error(std::exception_ptr p) {
  const auto raise = [](const char* type_name, const lingbot::Error& e, const std::string& path) {
    const std::string_view what = e.what();
    PyObject* text = PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace");
    if (text == nullptr) return;  // MemoryError is set
    const py::object type = py::module_::import("lingbot_map._lingbot_map").attr(type_name);
    const py::object exc = type(py::reinterpret_steal<py::str>(text));
    if (!path.empty()) {
      exc.attr("errno") = ENOENT;
      exc.attr("strerror") = std::strerror(ENOENT);
      exc.attr("filename") = lingbot::python::fs_decode(path);
    }
    PyErr_SetObject(type.ptr(), exc.ptr());
  };
  try {
    std::rethrow_exception(p);
  } catch (const lingbot::FileNotFound& e) {
    raise("FileNotFound", e, e.path());
  } catch (const lingbot::Error& e) {
    raise("Error", e, {});
  }
}

}  // namespace

PYBIND11_MODULE(_lingbot_map, m) {
  using namespace lingbot::python;
  m.doc() = "lingbot_map: streaming 3D reconstruction (LingBot-Map) from NumPy, without PyTorch.";
  m.attr("__version__") = LINGBOT_VERSION;
  ::pthread_atfork(nullptr, nullptr, note_fork_child);  // once per process: the module is imported once
  py::module_::import("atexit").attr("register")(py::cpp_function(&finish_engine_calls_at_exit));
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
      "lingbot_map.Error and a FileNotFoundError. The message ends with '<what> not found: <path>'; errno is\n"
      "errno.ENOENT and filename the path, as for open().";
  m.attr("FileNotFound").attr("__module__") = "lingbot_map";
  // str(e) is the message, as for Error: OSError's own str would read "[Errno 2] ...: 'path'" once
  // filename is set.
  m.attr("FileNotFound").attr("__str__") = py::module_::import("builtins").attr("BaseException").attr("__str__");
  // Tried before the two translators above (the last registered goes first).
  py::register_exception_translator(translate_engine_error);
  bind_model(m);
  bind_result(m);
  bind_session(m);
  bind_reconstruct(m);
  bind_exporter(m);
  bind_functions(m);
  bind_argument_errors(m);
}
