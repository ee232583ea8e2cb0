#pragma once
// Argument types for the bindings that take what their Python annotation says and nothing else.
// pybind11's int caster takes True / False as 1 / 0 (bool is an int subclass in Python) and its bool
// caster (with conversion) takes None, 0 and 1, and its int caster truncates 2.5, Decimal("2.7") or
// np.float32(2.5): a flag and a count given in each other's place, or a fraction for a count, would
// run with a value nobody asked for. These refuse them (pybind11's TypeError naming the call and the
// arguments given), as keyframe_interval= does. Each converts to its C++ type implicitly.
#include <pybind11/pybind11.h>

#include <cstdint>

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
    if (!inner.load(src, /*convert=*/false)) return false;
    value.value = cast_op<T>(inner);
    return true;
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
