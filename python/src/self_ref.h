#pragma once
// Methods of Session, Exporter and Reconstruction bound through constructed(): an instance made by
// Class.__new__(Class) without __init__ has no C++ value, and pybind11 2.10 then hands a method fresh
// uninitialised memory as `self` (type_caster_generic::load_value's lazy allocation): every field read
// is undefined (seen: a closed Session, a "busy" one, a crash). The wrapper checks that the instance's
// value was constructed and raises TypeError otherwise. (Model and Result refuse __new__ instead,
// made_by_engine.h; these classes cannot, __init__ needs it.)
#include <pybind11/pybind11.h>

#include <string>
#include <utility>

namespace lingbot::python {

namespace py = pybind11;

// The `self` argument of such a binding: any object (checked by constructed_self), shown in
// signatures as the class itself ("push(self: lingbot_map.Session, ...)").
template <class C>
struct Self {
  py::handle handle;
};

// `self` as a C whose __init__ ran; TypeError for anything else.
template <class C>
C& constructed_self(py::handle self) {
  const auto name = [] { return py::str(py::type::of<C>().attr("__name__")).cast<std::string>(); };
  if (!py::isinstance<C>(self))
    throw py::type_error("lingbot_map." + name() + " method called on " + py::repr(self).cast<std::string>());
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  if (!inst->get_value_and_holder().holder_constructed()) {
    const std::string n = name();
    throw py::type_error("this lingbot_map." + n + " was made by __new__ without __init__: make one with " +
                         (n == "Reconstruction" ? std::string("lingbot_map.reconstruct()") : "lingbot_map." + n + "(...)"));
  }
  return self.cast<C&>();
}

// A member function as a binding that checks `self` first (constructed_self).
template <class C, class R, class... A>
auto constructed(R (C::*f)(A...)) {
  return [f](Self<C> self, A... a) -> R { return (constructed_self<C>(self.handle).*f)(std::forward<A>(a)...); };
}
template <class C, class R, class... A>
auto constructed(R (C::*f)(A...) const) {
  return [f](Self<C> self, A... a) -> R { return (constructed_self<C>(self.handle).*f)(std::forward<A>(a)...); };
}

}  // namespace lingbot::python

namespace pybind11::detail {

template <class C>
struct type_caster<lingbot::python::Self<C>> {
  PYBIND11_TYPE_CASTER(lingbot::python::Self<C>, make_caster<C>::name);
  bool load(handle src, bool) {
    value.handle = src;
    return true;
  }
};

}  // namespace pybind11::detail
