#pragma once
// Names that come from the file system (frame sources, checkpoint paths) are bytes on POSIX, not
// always UTF-8 (Latin-1 folders, camera cards). They cross into Python as os.fsdecode() makes them
// (the file-system encoding, undecodable bytes as lone surrogates) and back as os.fsencode(), so such
// a name round-trips (push(source=), pickles) instead of raising UnicodeDecodeError on access.
#include <pybind11/pybind11.h>

#include <string>

namespace lingbot::python {

namespace py = pybind11;

inline py::str fs_decode(const std::string& bytes) {
  PyObject* s = PyUnicode_DecodeFSDefaultAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size()));
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// `text` must be a str (callers check the type first).
inline std::string fs_encode(const py::handle& text) {
  PyObject* b = PyUnicode_EncodeFSDefault(text.ptr());
  if (!b) throw py::error_already_set();
  return py::reinterpret_steal<py::bytes>(b);
}

// A name argument: str (os.fsencode'd), bytes as they are, a path (os.PathLike) as os.fspath gives it,
// None as "". `what` names it in the error.
inline std::string fs_name(py::handle name, const char* what) {
  if (name.is_none()) return {};
  py::object path;
  if (py::hasattr(name, "__fspath__")) name = path = name.attr("__fspath__")();
  if (PyUnicode_Check(name.ptr())) return fs_encode(name);
  if (PyBytes_Check(name.ptr())) return py::reinterpret_borrow<py::bytes>(name);
  throw py::type_error(std::string(what) + " must be a str, got " + std::string(py::str(py::type::of(name).attr("__name__"))));
}

}  // namespace lingbot::python
