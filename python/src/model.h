#pragma once
// lingbot_map.Model: a loaded network shared by any number of Sessions.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "lingbot/model.h"
#include "strict_args.h"

namespace lingbot::python {

namespace py = pybind11;

struct PyModel {
  std::shared_ptr<const Model> model;
  std::string source;  // checkpoint path, or "demo"
  // How it was made, for pickling by reference (another process loads the same file again):
  std::filesystem::path path;  // absolute checkpoint path (empty for the demo model)
  ConfigOverrides overrides;   // config= as flattened key=value text
  uint64_t seed = 0;           // demo model

  // weights_dtype as run's --weights-dtype for `device` (run picks 'auto' for the device it runs on);
  // a notice of the choice is a UserWarning.
  static ModelLoadOptions load_options(const std::string& weights_dtype, const std::string& device);
  // Model.load(): `config` is None or a dict of overrides ({"camera": {"num_iterations": 4}}).
  static PyModel load(const std::filesystem::path& path, const py::object& config, const std::string& weights_dtype,
                      const std::string& device);
  // Model.demo(): the seeded random-weight demo network.
  static PyModel demo(StrictInt<uint64_t> seed, const std::string& weights_dtype, const std::string& device);

  // Pickled by reference (multiprocessing workers, joblib): the checkpoint path, the config overrides
  // and the weights dtype in use; unpickling loads the file again (the weights are not copied through
  // the pipe), so the file must be readable at that path in the receiving process.
  py::tuple getstate() const;
  static PyModel setstate(const py::tuple& t);
};

// A Model, or a checkpoint path loaded as run loads it (weights dtype 'auto' for `device`).
PyModel model_from_python(const py::handle& obj, const std::string& device);

}  // namespace lingbot::python
