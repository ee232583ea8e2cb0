#pragma once
// Classes whose instances only the module makes (Model by Model.load / Model.demo, Result by a Session):
// pybind11's default __new__ would give Python an instance without its C++ value (Class.__new__(Class),
// which pickle's default protocol calls before __setstate__), whose every field reads unallocated
// memory. So __new__ raises TypeError, and pickling goes through a function that makes the instance
// from its state: __reduce__ -> (lingbot_map.<factory>, (state,)). The native function is bound here
// as _lingbot_map.<factory>; lingbot_map/__init__.py wraps it in a Python function of the same name,
// because pickle can name a Python function but not a pybind11 one (whose __self__ is a capsule).
#include <pybind11/pybind11.h>

#include <string>

namespace lingbot::python {

namespace py = pybind11;

// `cls` is bound as py::class_<T>; `state` is a T -> py::tuple member, `from_state` py::tuple -> T.
template <typename T, typename State, typename FromState>
void bind_made_by_engine(py::class_<T>& cls, py::module_& m, const char* factory, const char* made_by, State state,
                         FromState from_state) {
  const std::string message = std::string("lingbot_map.") + py::str(cls.attr("__name__")).cast<std::string>() +
                              " objects are made by " + made_by + ", not constructed";
  cls.def_static("__new__", [message](const py::args&, const py::kwargs&) -> py::object { throw py::type_error(message); });
  m.def(factory, from_state, "Unpickles an object from its state (pickle calls it).");
  const std::string name = factory;
  cls.def("__reduce__", [name, state](const T& self) {
    return py::make_tuple(py::module_::import("lingbot_map").attr(name.c_str()), py::make_tuple((self.*state)()));
  });
}

}  // namespace lingbot::python
