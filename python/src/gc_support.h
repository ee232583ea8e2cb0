#pragma once
// Garbage-collector support for the classes whose engine holds a Python callable (Session and
// Reconstruction: the progress callback, options.h ProgressHolder). pybind11 objects are not tracked
// by the collector, so a callback that refers back to its Session or iterator (a bound method of an
// object holding it, a closure over it) made a cycle that was never freed, with its KV cache (a probe
// measured +56 MB per dropped reconstruct() iterator at 518 px). With collectable<T>() the type
// reports the callable to the collector (tp_traverse) and can drop its engine and the callable
// (tp_clear), as a Python object holding the callable would.
#include <pybind11/pybind11.h>

namespace lingbot::python {

// The instance's C++ value, or null when __init__ has not run (made by __new__) or it is destroyed.
// The collector may visit an instance before pybind11 has allocated its value/holder layout (the
// first instance of a Python subclass allocates its type cache between tp_alloc and the layout):
// then there is nothing to read.
template <class T>
T* constructed_value(PyObject* self) noexcept {
  auto* inst = reinterpret_cast<pybind11::detail::instance*>(self);
  if (!inst->simple_layout && inst->nonsimple.values_and_holders == nullptr) return nullptr;
  auto v_h = inst->get_value_and_holder();
  return v_h.holder_constructed() ? v_h.template value_ptr<T>() : nullptr;
}

// T: `const ProgressHolder& progress_holder() const` (the one reference to the callable the engine
// holds, or null) and `void clear_for_gc()` (frees the engine and the holder; the GIL is held).
template <class T>
pybind11::custom_type_setup collectable() {
  return pybind11::custom_type_setup([](PyHeapTypeObject* heap_type) {
    PyTypeObject* type = &heap_type->ht_type;
    type->tp_flags |= Py_TPFLAGS_HAVE_GC;
    type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) -> int {
      Py_VISIT(Py_TYPE(self));  // a heap type's instance holds a reference to its type
      if (T* t = constructed_value<T>(self))
        if (const auto& held = t->progress_holder()) Py_VISIT(held->ptr());
      return 0;
    };
    type->tp_clear = [](PyObject* self) -> int {
      if (T* t = constructed_value<T>(self)) t->clear_for_gc();
      return 0;
    };
    // pybind11 2.10 frees the C++ value while the object is still tracked: a collection started by
    // the destructor (a finalizer it runs) would traverse a value half destroyed.
    type->tp_dealloc = [](PyObject* self) {
      PyObject_GC_UnTrack(self);
      pybind11::detail::pybind11_object_dealloc(self);
    };
  });
}

}  // namespace lingbot::python
