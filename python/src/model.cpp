// lingbot_map.Model (model.h) and its binding: loading, the demo network, config overrides, pickling.
#include "model.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <limits>
#include <sstream>
#include <string_view>
#include <utility>

#include "arrays.h"
#include "interrupts.h"
#include "pipeline/demo_model.h"
#include "bindings.h"
#include "fs_text.h"
#include "checks.h"
#include "made_by_engine.h"
#include "core/error.h"
#include "io/file_util.h"
#include "lingbot/device.h"
#include "lingbot/model.h"
#include "pipeline/session_backend.h"

namespace lingbot::python {

using namespace py::literals;
namespace fs = std::filesystem;

namespace {

// A Python value -> the text ModelConfig::set() parses.
std::string config_value_text(const py::handle& v) {
  // NumPy scalars and 1-D arrays (np.int64(3), np.array([.5, .5, .5])) as the Python values they hold.
  if (py::isinstance<py::array>(v) && py::reinterpret_borrow<py::array>(v).ndim() > 1)
    throw py::value_error("config values must be numbers or a list of numbers, got an array of " +
                          std::to_string(py::reinterpret_borrow<py::array>(v).ndim()) + " dimensions");
  if (py::isinstance(v, py::module_::import("numpy").attr("generic")) || py::isinstance<py::array>(v))
    return config_value_text(v.attr("tolist")());
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) return py::repr(v).cast<std::string>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::string s;
    for (const auto& item : v) {
      if (!s.empty()) s += ",";
      s += config_value_text(item);
    }
    return s;
  }
  throw py::type_error("config values must be bool, int, float, str or a list of numbers, got " +
                       py::str(py::type::of(v).attr("__name__")).cast<std::string>());
}

// Whether `key` is a section of the configuration ("camera") or one of its settings ("camera.num_iterations").
bool config_section(const std::string& key) {
  for (const std::string& k : ModelConfig::settable_keys())
    if (k.size() > key.size() && k.starts_with(key) && k[key.size()] == '.') return true;
  return false;
}
bool config_setting(const std::string& key) {
  for (const std::string& k : ModelConfig::settable_keys())
    if (k == key) return true;
  return false;
}

// {"camera": {"num_iterations": 4}} or {"camera.num_iterations": 4} -> [("camera.num_iterations", "4")].
void flatten_config(const py::dict& d, const std::string& prefix, ConfigOverrides* out) {
  for (const auto& [k, v] : d) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("config keys must be str, got " + py::repr(k).cast<std::string>());
    const std::string key = prefix.empty() ? k.cast<std::string>() : prefix + "." + k.cast<std::string>();
    const std::string type = py::str(py::type::of(v).attr("__name__")).cast<std::string>();
    if (py::isinstance<py::dict>(v)) {
      if (config_setting(key))  // {"camera": {"num_iterations": {...}}}: a value, not a section
        throw py::type_error("config value " + key + " must be bool, int, float, str or a list of numbers, got dict");
      flatten_config(v.cast<py::dict>(), key, out);
      continue;
    }
    if (config_section(key))  // {"kv_cache": 5}: the section exists, its value is no dict of settings
      throw py::type_error("config section " + key + " must be a dict of its settings ({'" + key +
                           "': {'<setting>': value}}), got " + type);
    // {"camera.num_iterations": 2, "camera": {"num_iterations": 3}}: which one was meant?
    for (const auto& [seen, value] : *out)
      if (seen == key) throw py::value_error("config gives " + key + " twice (as a dotted key and nested)");
    out->emplace_back(key, config_value_text(v));
  }
}

// One value of ModelConfig::describe() ("true", "4", "1e-05", "0,1,2,3") as a Python object.
py::object config_value(const std::string& text) {
  if (text == "true") return py::bool_(true);
  if (text == "false") return py::bool_(false);
  if (text.find(',') != std::string::npos) {
    py::list items;
    std::stringstream ss(text);
    for (std::string part; std::getline(ss, part, ',');) items.append(config_value(part));
    return items;
  }
  size_t used = 0;
  try {
    const long long i = std::stoll(text, &used);
    if (used == text.size()) return py::int_(i);
    const double d = std::stod(text, &used);
    if (used == text.size()) return py::float_(d);
  } catch (const std::exception&) {
  }
  return py::str(text);
}

// ModelConfig as {"encoder": {"img_size": 518, ...}, ...}: the fields and names of describe() /
// ModelConfig::set() (the CLI's `inspect` listing and `--set` keys).
py::dict config_dict(const ModelConfig& cfg) {
  py::dict out;
  std::stringstream ss(cfg.describe());
  for (std::string line; std::getline(ss, line);) {
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    key.erase(0, key.find_first_not_of(' '));
    const size_t dot = key.find('.');
    if (dot == std::string::npos) continue;
    const py::str group(key.substr(0, dot));
    if (!out.contains(group)) out[group] = py::dict();
    out[group].cast<py::dict>()[py::str(key.substr(dot + 1))] = config_value(line.substr(eq + 3));
  }
  return out;
}

}  // namespace

ModelLoadOptions PyModel::load_options(const std::string& weights_dtype, const std::string& device) {
  const Device asked = value_of([&] { return parse_device(device); });
  value_of([&] { parse_weights_dtype(weights_dtype, Device::Cpu); });  // the name alone (the CPU rule needs no device)
  // A missing device, or a CUDA error while asking it for its compute capability, is the engine's Error.
  const WeightsDtypeForDevice wd = parse_weights_dtype(weights_dtype, resolve_device(asked));
  // The CLI's "notice: " line prefix is the warning's category here.
  const std::string_view prefix = "notice: ";
  const std::string warning = wd.notice.starts_with(prefix) ? wd.notice.substr(prefix.size()) : wd.notice;
  if (!warning.empty() && PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 1) != 0) throw py::error_already_set();
  ModelLoadOptions lo;
  lo.weights_dtype = wd.dtype;
  return lo;
}

PyModel PyModel::load(const fs::path& path, const py::object& config, const std::string& weights_dtype,
                      const std::string& device) {
  ConfigOverrides overrides;
  if (!config.is_none()) {
    if (!py::isinstance<py::dict>(config)) throw py::type_error("config must be a dict, got " + describe_array(config));
    flatten_config(config.cast<py::dict>(), "", &overrides);
  }
  io::check_path_exists(path, "model file");  // before the options: a missing file is the first thing to fix
  const ModelLoadOptions lo = load_options(weights_dtype, device);
  PyModel m;
  {
    const ReleasedGil nogil;
    m.model = Model::load(path.string(), overrides, lo);
  }
  // As run's notice: the heads upstream's demo drops too (a checkpoint of its base model class).
  if (const std::string ignored = m.model->load_stats().ignored_description(); !ignored.empty())
    if (PyErr_WarnEx(PyExc_UserWarning, ignored.c_str(), 1) != 0) throw py::error_already_set();
  m.source = path.string();
  m.path = fs::absolute(path);
  m.overrides = std::move(overrides);
  return m;
}

PyModel PyModel::demo(StrictInt<uint64_t> seed, const std::string& weights_dtype, const std::string& device) {
  const ModelLoadOptions lo = load_options(weights_dtype, device);
  PyModel m;
  {
    const ReleasedGil nogil;
    m.model = make_demo_model(seed, lo);
  }
  m.source = "demo";
  m.seed = seed;
  return m;
}

py::tuple PyModel::getstate() const {
  py::list o;
  for (const auto& [k, v] : overrides) o.append(py::make_tuple(k, v));
  return py::make_tuple(1, path.empty() ? py::object(py::none()) : fs_decode(path.string()), o, seed,
                        std::string(dtype_name(model->weights_dtype())), fs_decode(source));
}

PyModel PyModel::setstate(const py::tuple& t) {
  if (t.size() != 6 || !py::isinstance<py::int_>(t[0]) || py::isinstance<py::bool_>(t[0]) ||
      PyObject_RichCompareBool(t[0].ptr(), py::int_(1).ptr(), Py_EQ) != 1)
    throw py::value_error("not a pickled lingbot_map.Model of this version");
  // A pickle can hold anything: each field must have the type getstate() writes.
  const auto refuse = [](const std::string& what) { throw py::value_error("not a pickled lingbot_map.Model: " + what); };
  const auto type_name = [](const py::handle& v) { return py::str(py::type::of(v).attr("__name__")).cast<std::string>(); };
  const auto str_field = [&](size_t i, const char* name) {
    if (!py::isinstance<py::str>(t[i])) refuse(std::string(name) + " is " + type_name(t[i]) + ", not str");
  };
  if (!t[1].is_none()) str_field(1, "the checkpoint path");
  if (!py::isinstance<py::list>(t[2])) refuse("the config overrides are " + type_name(t[2]) + ", not a list");
  for (const auto& kv : t[2].cast<py::list>())
    if (!py::isinstance<py::tuple>(kv) || py::len(kv) != 2 || !py::isinstance<py::str>(kv.cast<py::tuple>()[0]) ||
        !py::isinstance<py::str>(kv.cast<py::tuple>()[1]))
      refuse("a config override is not a (key, value) pair of str");
  if (!py::isinstance<py::int_>(t[3]) || py::isinstance<py::bool_>(t[3]))
    refuse("the seed is " + type_name(t[3]) + ", not int");
  str_field(4, "the weights dtype");
  str_field(5, "the source");
  DType dtype{};
  try {
    dtype = parse_dtype(t[4].cast<std::string>());
  } catch (const Error& e) {
    refuse(std::string("weights dtype: ") + e.what());
  }
  if (t[1].is_none()) {
    uint64_t seed = 0;
    try {
      seed = t[3].cast<uint64_t>();
    } catch (const py::cast_error&) {
      refuse("the seed " + std::string(py::str(t[3])) + " is not in 0.." +
             std::to_string(std::numeric_limits<uint64_t>::max()));
    }
    return demo({seed}, t[4].cast<std::string>(), "cpu");
  }
  const fs::path path = fs_encode(t[1].cast<py::str>());
  if (!fs::exists(path))
    throw FileNotFound("unpickling a Model loads its checkpoint again: model file not found: " + path.string(),
                       path.string());
  ConfigOverrides overrides;
  for (const auto& kv : t[2].cast<py::list>()) {
    const auto pair = kv.cast<py::tuple>();
    overrides.emplace_back(pair[0].cast<std::string>(), pair[1].cast<std::string>());
  }
  ModelLoadOptions lo;
  lo.weights_dtype = dtype;
  PyModel m;
  {
    const ReleasedGil nogil;
    m.model = Model::load(path.string(), overrides, lo);
  }
  m.source = fs_encode(t[5].cast<py::str>());
  m.path = path;
  m.overrides = std::move(overrides);
  return m;
}

PyModel model_from_python(const py::handle& obj, const std::string& device) {
  if (py::isinstance<PyModel>(obj)) return obj.cast<PyModel>();
  if (py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__"))
    return PyModel::load(obj.cast<fs::path>(), py::none(), "auto", device);
  throw py::type_error("model must be a lingbot_map.Model or a checkpoint path, got " + describe_array(obj));
}

void bind_model(py::module_& m) {
  py::class_<PyModel> model(m, "Model",
                      "A loaded LingBot-Map network (immutable; share one between any number of Sessions).");
  model.def_static("load", &PyModel::load, "path"_a, "config"_a = py::none(), py::kw_only(), "weights_dtype"_a = "auto",
                  "device"_a = "cpu",
                  "Loads a checkpoint (upstream .pt / .pth, or .safetensors; the format is detected from the\n"
                  "content), infers the configuration from the tensor shapes and applies `config` overrides:\n"
                  "{'camera': {'num_iterations': 4}} or {'camera.num_iterations': 4} (the keys of `config`\n"
                  "and of `lingbot-map run --set`). `weights_dtype` ('auto' | 'f32' | 'f16' | 'bf16', as\n"
                  "`run --weights-dtype`): storage of the blocks' linear layers and the DPT convolutions; 'auto' = bf16 where the CPU\n"
                  "has a native bf16 GEMM, else f32 (device='cuda': bf16 on compute capability 8.0 and later,\n"
                  "else f32; give the device the Sessions will use, as run picks it for its --device); 'f32'\n"
                  "reproduces the reference. A dtype without a native GEMM here works with a UserWarning.\n"
                  "Raises lingbot_map.Error naming the file and the problem.")
      .def_static("demo", &PyModel::demo, "seed"_a = kDemoWeightSeed, py::kw_only(), "weights_dtype"_a = "auto",
                  "device"_a = "cpu",
                  "The built-in demo network (the `run --demo` model): seeded RANDOM weights, so the geometry it\n"
                  "produces is meaningless; for trying the API without a checkpoint. weights_dtype, device as Model.load\n"
                  "('auto' as run --demo).")
      .def_property_readonly("config", [](const PyModel& self) { return config_dict(self.model->config()); },
                             "The configuration as a dict of groups: {'encoder': {'img_size': 518, ...}, ...}.")
      .def_property_readonly("weights_dtype", [](const PyModel& self) { return std::string(dtype_name(self.model->weights_dtype())); },
                             "Storage dtype of the blocks' linear layers and the DPT convolutions: 'f32', 'f16' or 'bf16'.")
      .def_property_readonly("patch_size", [](const PyModel& self) { return self.model->patch_size(); },
                             "Pixels per patch side; frame sizes must be multiples of it.")
      .def_property_readonly("parameter_count", [](const PyModel& self) { return self.model->config().parameter_count(); },
                             "Number of weights (parameters) of the model's architecture.")
      .def_property_readonly("source", [](const PyModel& self) { return fs_decode(self.source); },
                             "The checkpoint path, or 'demo'.")
      .def("__repr__", [](const PyModel& self) {
        return fs_decode("<lingbot_map.Model " + self.source + ", " +
                         std::to_string(self.model->config().parameter_count()) + " parameters>");
      });
  bind_made_by_engine(model, m, "_model_from_state", "Model.load() and Model.demo()", &PyModel::getstate,
                      &PyModel::setstate);
}

}  // namespace lingbot::python
