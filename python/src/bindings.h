#pragma once
// The lingbot_map module is bound one part per file; module.cpp calls these in this order (a class is
// bound before the functions whose signatures name it).
#include <pybind11/pybind11.h>

namespace lingbot::python {

void bind_model(pybind11::module_& m);        // model.cpp: Model
void bind_result(pybind11::module_& m);       // result.cpp: Result
void bind_session(pybind11::module_& m);      // session.cpp: Session
void bind_reconstruct(pybind11::module_& m);  // reconstruct.cpp: Reconstruction, reconstruct()
void bind_exporter(pybind11::module_& m);     // exporter.cpp: Exporter, export_kinds(), default_exports()
void bind_functions(pybind11::module_& m);    // functions.cpp: load_image, preprocess, verify, ...
void bind_argument_errors(pybind11::module_& m);  // argument_errors.cpp: _ArgumentErrors (lingbot_map/__init__.py)

}  // namespace lingbot::python
