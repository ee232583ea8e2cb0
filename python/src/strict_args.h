#pragma once
// Argument types for the bindings that take what their Python annotation says and nothing else.
// pybind11's int caster takes True / False as 1 / 0 (bool is an int subclass in Python) and its bool
// caster (with conversion) takes None, 0 and 1, and its int caster truncates 2.5, Decimal("2.7") or
// np.float32(2.5): a flag and a count given in each other's place, or a fraction for a count, would
// run with a value nobody asked for. These refuse them (pybind11's TypeError naming the call and the
// arguments given), as keyframe_interval= does; an int that T cannot hold (scale_frames=2**40) is a
// ValueError (raise_int_out_of_range). Each converts to its C++ type implicitly.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace lingbot::python {

template <typename T>
struct StrictInt {  // a Python int or an object with __index__ (NumPy integers); not a bool
  T value{};
  operator T() const { return value; }
};

struct StrictBool {  // True / False or numpy.bool_
  bool value = false;
  operator bool() const { return value; }
};

// The ValueError for an int argument outside the range of its C++ type T (pybind11 would raise its
// TypeError "incompatible function arguments", as for a value of the wrong type): "an int argument must
// fit in a 32-bit int (LO..HI), got V" (the type's range, not the argument's: its own check, which names
// that, runs on values the type holds). The caster does not know the argument's name: the exception
// carries the Python int as `_lingbot_int_arg` and lingbot_map/__init__.py, which knows the call, names
// the argument ("scale_frames must fit in a 32-bit int (LO..HI), got V").
template <typename T>
[[noreturn]] void raise_int_out_of_range(pybind11::handle src) {
  namespace py = pybind11;
  const auto value = py::reinterpret_steal<py::object>(PyNumber_Index(src.ptr()));
  if (!value) throw py::error_already_set();
  const std::string range = "a " + std::to_string(sizeof(T) * 8) + "-bit " +
                            (std::numeric_limits<T>::is_signed ? "" : "unsigned ") + "int (" +
                            std::to_string(std::numeric_limits<T>::min()) + ".." +
                            std::to_string(std::numeric_limits<T>::max()) + ")";
  const std::string message = "an int argument must fit in " + range + ", got " + std::string(py::str(value));
  py::object error = py::reinterpret_borrow<py::object>(PyExc_ValueError)(message);
  error.attr("_lingbot_int_arg") = value;
  error.attr("_lingbot_int_range") = range;
  PyErr_SetObject(PyExc_ValueError, error.ptr());
  throw py::error_already_set();
}

// The bindings' short names for them.
using Int = StrictInt<int>;
using Int64 = StrictInt<int64_t>;
using Bool = StrictBool;

}  // namespace lingbot::python

namespace pybind11::detail {

template <typename T>
struct type_caster<lingbot::python::StrictInt<T>> {
  PYBIND11_TYPE_CASTER(lingbot::python::StrictInt<T>, const_name("int"));
  bool load(handle src, bool) {
    if (PyBool_Check(src.ptr())) return false;
    make_caster<T> inner;
    // Without conversion: an int or __index__ only (with it, pybind11 would truncate 2.5, Decimal, ...).
    if (inner.load(src, /*convert=*/false)) {
      value.value = cast_op<T>(inner);
      return true;
    }
    if (PyFloat_Check(src.ptr()) || !PyIndex_Check(src.ptr())) return false;  // not an int: TypeError
    lingbot::python::raise_int_out_of_range<T>(src);  // an int that T cannot hold: ValueError
  }
  static handle cast(const lingbot::python::StrictInt<T>& v, return_value_policy policy, handle parent) {
    return make_caster<T>::cast(v.value, policy, parent);
  }
};

template <>
struct type_caster<lingbot::python::StrictBool> {
  PYBIND11_TYPE_CASTER(lingbot::python::StrictBool, const_name("bool"));
  bool load(handle src, bool) {
    const bool numpy_bool = std::string_view(Py_TYPE(src.ptr())->tp_name) == "numpy.bool_" ||
                            std::string_view(Py_TYPE(src.ptr())->tp_name) == "numpy.bool";
    if (!PyBool_Check(src.ptr()) && !numpy_bool) return false;
    const int truth = PyObject_IsTrue(src.ptr());
    if (truth < 0) {
      PyErr_Clear();
      return false;
    }
    value.value = truth == 1;
    return true;
  }
  static handle cast(const lingbot::python::StrictBool& v, return_value_policy policy, handle parent) {
    return make_caster<bool>::cast(v.value, policy, parent);
  }
};

}  // namespace pybind11::detail
