// _lingbot_map._ArgumentErrors(native, describe): a callable that calls `native` (a pybind11 function)
// and, when it raises TypeError or ValueError, lets `describe(args, kwargs, error)` give a better error
// (lingbot_map/__init__.py names the argument of pybind11's "incompatible function arguments" and of an
// int out of its C++ type's range, strict_args.h). It adds no Python frame: a warning the native code
// raises (stacklevel 1) is still attributed to the caller's line, and tracebacks show no wrapper. Read
// as a class attribute it binds as a method (as a Python function does), so it can stand in for a
// method or a class's __init__; its __doc__, __name__, ... are the attributes it is given (__dict__).
// With init=True it stands in for __init__ and refuses a second call on an object already made, which
// pybind11 would ignore without a word (s.__init__(model, ...) leaving the old session as it was).
#include <pybind11/pybind11.h>
#include <structmember.h>

#include <cstddef>

#include "bindings.h"

namespace lingbot::python {

namespace py = pybind11;

namespace {

struct ArgumentErrors {
  PyObject_HEAD
  PyObject* native;
  PyObject* describe;
  PyObject* dict;
  int init;  // an __init__: refuse an object already initialized
};

ArgumentErrors* self_of(PyObject* o) { return reinterpret_cast<ArgumentErrors*>(o); }

PyObject* ae_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *native = nullptr, *describe = nullptr;
  int init = 0;
  static const char* names[] = {"native", "describe", "init", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$p:_ArgumentErrors", const_cast<char**>(names), &native, &describe,
                                   &init))
    return nullptr;
  if (!PyCallable_Check(native) || !PyCallable_Check(describe)) {
    PyErr_SetString(PyExc_TypeError, "_ArgumentErrors(native, describe) takes two callables");
    return nullptr;
  }
  auto* self = reinterpret_cast<ArgumentErrors*>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  Py_INCREF(native);
  Py_INCREF(describe);
  self->native = native;
  self->describe = describe;
  self->dict = nullptr;
  self->init = init;
  return reinterpret_cast<PyObject*>(self);
}

int ae_traverse(PyObject* o, visitproc visit, void* arg) {
  Py_VISIT(self_of(o)->native);
  Py_VISIT(self_of(o)->describe);
  Py_VISIT(self_of(o)->dict);
  Py_VISIT(Py_TYPE(o));  // a heap type
  return 0;
}

int ae_clear(PyObject* o) {
  Py_CLEAR(self_of(o)->native);
  Py_CLEAR(self_of(o)->describe);
  Py_CLEAR(self_of(o)->dict);
  return 0;
}

void ae_dealloc(PyObject* o) {
  PyTypeObject* type = Py_TYPE(o);
  PyObject_GC_UnTrack(o);
  ae_clear(o);
  type->tp_free(o);
  Py_DECREF(type);
}

// A pybind11 object whose value is made (pybind11's own test before it ignores a second __init__).
bool already_initialized(PyObject* obj) {
  if (py::detail::all_type_info(Py_TYPE(obj)).empty()) return false;
  return reinterpret_cast<py::detail::instance*>(obj)->get_value_and_holder().instance_registered();
}

PyObject* ae_call(PyObject* o, PyObject* args, PyObject* kwargs) {
  ArgumentErrors* self = self_of(o);
  if (self->init && PyTuple_GET_SIZE(args) >= 1 && already_initialized(PyTuple_GET_ITEM(args, 0))) {
    const char* name = _PyType_Name(Py_TYPE(PyTuple_GET_ITEM(args, 0)));
    PyErr_Format(PyExc_TypeError, "%s.__init__ was already called on this %s: make a new %s", name, name, name);
    return nullptr;
  }
  PyObject* result = PyObject_Call(self->native, args, kwargs);
  if (result || !(PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError))) return result;
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb) PyException_SetTraceback(value, tb);
  PyObject* better = PyObject_CallFunctionObjArgs(self->describe, args, kwargs ? kwargs : Py_None, value, nullptr);
  if (!better || better == Py_None || !PyExceptionInstance_Check(better)) {  // the error as it came
    if (!better) PyErr_Clear();
    Py_XDECREF(better);
    PyErr_Restore(type, value, tb);
    return nullptr;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(better)), better);
  Py_DECREF(better);
  return nullptr;
}

PyObject* ae_get(PyObject* o, PyObject* obj, PyObject*) {  // read on an instance: a bound method
  if (!obj) {
    Py_INCREF(o);
    return o;
  }
  return PyMethod_New(o, obj);
}

PyObject* ae_repr(PyObject* o) { return PyObject_Repr(self_of(o)->native); }

PyMemberDef ae_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(ArgumentErrors, dict), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyGetSetDef ae_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

void bind_argument_errors(py::module_& m) {
  PyType_Slot slots[] = {
      {Py_tp_new, reinterpret_cast<void*>(ae_new)},
      {Py_tp_dealloc, reinterpret_cast<void*>(ae_dealloc)},
      {Py_tp_traverse, reinterpret_cast<void*>(ae_traverse)},
      {Py_tp_clear, reinterpret_cast<void*>(ae_clear)},
      {Py_tp_call, reinterpret_cast<void*>(ae_call)},
      {Py_tp_descr_get, reinterpret_cast<void*>(ae_get)},
      {Py_tp_repr, reinterpret_cast<void*>(ae_repr)},
      {Py_tp_members, ae_members},
      {Py_tp_getset, ae_getset},
      {0, nullptr},
  };
  PyType_Spec spec = {"lingbot_map._lingbot_map._ArgumentErrors", sizeof(ArgumentErrors), 0,
                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (!type) throw py::error_already_set();
  m.add_object("_ArgumentErrors", py::reinterpret_steal<py::object>(type));
}

}  // namespace lingbot::python
