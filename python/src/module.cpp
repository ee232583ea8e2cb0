// The lingbot_map Python module: Model, Session, reconstruct(), Exporter and the I/O helpers of
// `lingbot-map run`, over the engine's public API (include/lingbot/*.h, src/io/*.h).
//
// Threads: every call into the engine (loading, decoding, preprocessing, inference, writing) runs
// with the GIL released. A Session / Reconstruction / Exporter serves one call at a time; a second
// thread calling the same object meanwhile gets lingbot_map.Error instead of racing.
// Ctrl-C: CPython's SIGINT handler only sets a flag while the GIL is released; reconstruct()'s
// iterator checks it after every frame (PyErr_CheckSignals), so KeyboardInterrupt arrives at the
// next frame boundary with the engine state consistent. A scale phase is one step that can take
// minutes on a CPU, so during one, on the main thread, SIGINT also sets the session's stop flag
// (SessionOptions::stop: the step ends at its next block) before CPython's handler runs
// (CtrlCStopsTheStep); KeyboardInterrupt then comes at once, and the session needs reset() (the
// iteration of reconstruct() ends). Only with Python's default SIGINT handler: a program's own
// handler decides what Ctrl-C does, and the step runs to its end. Session.push / finish check for
// a pending Ctrl-C before returning, and keep their results for the next call if there is one.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "strict_args.h"
#include "core/busy_guard.h"
#include "core/error.h"
#include "io/export.h"
#include "io/frame_source.h"
#include "io/image.h"
#include "io/preprocess.h"
#include "io/safetensors.h"
#include "io/video.h"
#include "io/writers.h"
#include "bench/harness/calibration.h"
#include "pipeline/session_backend.h"
#include "lingbot/model.h"
#include "lingbot/preprocess.h"
#include "lingbot/keyframe_policy.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"
#include "bench/harness/demo_model.h"
#include "bench/harness/verify.h"

namespace py = pybind11;
using namespace py::literals;

namespace lingbot::python {

namespace {

namespace fs = std::filesystem;
using Int = StrictInt<int>;
using Int64 = StrictInt<int64_t>;
using Bool = StrictBool;

// ---- small helpers ----------------------------------------------------------------------------

// An argument value out of range or not among its choices is a ValueError, as Python's own argument
// checks raise; lingbot_map.Error is for what the engine meets (files, checkpoints, devices, streams).
template <typename... Parts>
void check_value(bool ok, const Parts&... parts) {
  if (!ok) throw py::value_error(detail::concat(parts...));
}
// The engine's parsers and option checks (they throw lingbot::Error) for an argument: a ValueError.
template <typename F>
auto value_of(F&& parse) {
  try {
    return parse();
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
}

void check_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// ---- Ctrl-C during an engine step ----
// Signal dispositions are process-wide, so this state is too: the flag of the step running on the
// main thread (Python handles signals only there, one call at a time) and the handler it replaced.
std::atomic<std::atomic<bool>*> g_ctrl_c_target{nullptr};
struct sigaction g_replaced_sigint {};

extern "C" void ctrl_c_stops_the_step(int sig, siginfo_t* info, void* context) {
  if (std::atomic<bool>* target = g_ctrl_c_target.load()) target->store(true, std::memory_order_release);
  if (g_replaced_sigint.sa_flags & SA_SIGINFO) g_replaced_sigint.sa_sigaction(sig, info, context);
  else g_replaced_sigint.sa_handler(sig);
}

// For the lifetime of one engine call made with the GIL released, when `armed` (the call runs a scale
// phase): SIGINT sets `flag`, then runs the handler that was installed (CPython's, which records it
// for PyErr_CheckSignals). Only where Python's handler is signal.default_int_handler (Ctrl-C raises
// KeyboardInterrupt, so the step's work would be lost anyway): a program's own handler decides what
// Ctrl-C does, and the step runs to its end. Nothing happens off the main thread or when SIGINT is
// not handled by a function (ignored, or default: the process ends). Construct with the GIL held.
class CtrlCStopsTheStep {
 public:
  CtrlCStopsTheStep(std::atomic<bool>* flag, bool armed) {
    flag->store(false);
    if (!armed) return;
    static const unsigned long main_ident =
        py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
    if (PyThread_get_thread_ident() != main_ident) return;
    const py::module_ signal_module = py::module_::import("signal");
    if (!signal_module.attr("getsignal")(SIGINT).is(signal_module.attr("default_int_handler"))) return;
    struct sigaction current {};
    if (::sigaction(SIGINT, nullptr, &current) != 0) return;
    const bool function = (current.sa_flags & SA_SIGINFO) ? current.sa_sigaction != nullptr
                                                          : current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
    if (!function) return;
    g_replaced_sigint = current;
    g_ctrl_c_target.store(flag);
    struct sigaction ours {};
    ours.sa_sigaction = ctrl_c_stops_the_step;
    ours.sa_flags = SA_SIGINFO | (current.sa_flags & SA_RESTART);
    sigemptyset(&ours.sa_mask);
    installed_ = ::sigaction(SIGINT, &ours, nullptr) == 0;
    if (!installed_) g_ctrl_c_target.store(nullptr);
  }
  ~CtrlCStopsTheStep() {
    if (!installed_) return;
    ::sigaction(SIGINT, &g_replaced_sigint, nullptr);
    g_ctrl_c_target.store(nullptr);
  }
  CtrlCStopsTheStep(const CtrlCStopsTheStep&) = delete;
  CtrlCStopsTheStep& operator=(const CtrlCStopsTheStep&) = delete;

 private:
  bool installed_ = false;
};

// ---- fork ----
// GNU OpenMP's thread pool does not survive fork(): a child forked after this process ran a step on
// several threads hangs in its first parallel region (multiprocessing's default start method on
// Linux is fork). Process state, as the signal dispositions above: the parent notes that it ran
// threads, the child (pthread_atfork) that it was forked after that, and the child's steps on more
// than one thread are refused with an Error instead of hanging.
std::atomic<bool> g_ran_threads{false};
std::atomic<bool> g_forked_after_threads{false};
void note_fork_child() {
  if (g_ran_threads.load()) g_forked_after_threads.store(true);
}
void check_threads_after_fork(int threads) {
  if (threads == 1) return;
  LINGBOT_CHECK(!g_forked_after_threads.load(),
                "this process was forked from one that had run lingbot_map on several threads, and OpenMP's "
                "threads would hang here: start worker processes with multiprocessing's 'spawn' or 'forkserver' "
                "method (multiprocessing.get_context('spawn')), or use threads=1 in this process");
  g_ran_threads.store(true);
}

// A step that Ctrl-C stopped: KeyboardInterrupt (CPython has the signal recorded), else the error.
[[noreturn]] void rethrow_stopped() {
  check_signals();
  throw;
}

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

// {"camera": {"num_iterations": 4}} or {"camera.num_iterations": 4} -> [("camera.num_iterations", "4")].
void flatten_config(const py::dict& d, const std::string& prefix, ConfigOverrides* out) {
  for (const auto& [k, v] : d) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("config keys must be str, got " + py::repr(k).cast<std::string>());
    const std::string key = prefix.empty() ? k.cast<std::string>() : prefix + "." + k.cast<std::string>();
    if (py::isinstance<py::dict>(v)) {
      flatten_config(v.cast<py::dict>(), key, out);
      continue;
    }
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

nlohmann::json json_from_python(const py::handle& obj) {
  if (obj.is_none()) return nullptr;
  // allow_nan=False: NaN / Infinity are not JSON (json.dumps raises ValueError naming them).
  const std::string text = py::module_::import("json").attr("dumps")(obj, "allow_nan"_a = false).cast<std::string>();
  return nlohmann::json::parse(text);
}

// ---- Model ------------------------------------------------------------------------------------

struct PyModel {
  std::shared_ptr<const Model> model;
  std::string source;  // checkpoint path, or "demo"
  // How it was made, for pickling by reference (another process loads the same file again):
  fs::path path;                  // absolute checkpoint path (empty for the demo model)
  ConfigOverrides overrides;      // config= as flattened key=value text
  uint64_t seed = 0;              // demo model

  // weights_dtype as run's --weights-dtype for `device` (run picks 'auto' for the device it runs on).
  static ModelLoadOptions load_options(const std::string& weights_dtype, const std::string& device) {
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

  static PyModel load(const fs::path& path, const py::object& config, const std::string& weights_dtype,
                      const std::string& device) {
    ConfigOverrides overrides;
    if (!config.is_none()) {
      if (!py::isinstance<py::dict>(config)) throw py::type_error("config must be a dict, got " + describe_array(config));
      flatten_config(config.cast<py::dict>(), "", &overrides);
    }
    LINGBOT_CHECK(fs::exists(path), "model file not found: ", path.string());
    const ModelLoadOptions lo = load_options(weights_dtype, device);
    PyModel m;
    {
      py::gil_scoped_release nogil;
      m.model = Model::load(path.string(), overrides, lo);
    }
    m.source = path.string();
    m.path = fs::absolute(path);
    m.overrides = std::move(overrides);
    return m;
  }
  static PyModel demo(StrictInt<uint64_t> seed, const std::string& weights_dtype, const std::string& device) {
    const ModelLoadOptions lo = load_options(weights_dtype, device);
    PyModel m;
    {
      py::gil_scoped_release nogil;
      m.model = make_demo_model(seed, lo);
    }
    m.source = "demo";
    m.seed = seed;
    return m;
  }

  // Pickled by reference (multiprocessing workers, joblib): the checkpoint path, the config overrides
  // and the weights dtype in use; unpickling loads the file again (the weights are not copied through
  // the pipe), so the file must be readable at that path in the receiving process.
  py::tuple getstate() const {
    py::list o;
    for (const auto& [k, v] : overrides) o.append(py::make_tuple(k, v));
    return py::make_tuple(1, path.empty() ? py::object(py::none()) : py::str(path.string()), o, seed,
                          std::string(dtype_name(model->weights_dtype())), source);
  }
  static PyModel setstate(const py::tuple& t) {
    if (t.size() != 6 || t[0].cast<int>() != 1) throw py::value_error("not a pickled lingbot_map.Model of this version");
    if (t[1].is_none()) return demo({t[3].cast<uint64_t>()}, t[4].cast<std::string>(), "cpu");
    const fs::path path = t[1].cast<std::string>();
    LINGBOT_CHECK(fs::exists(path), "unpickling a Model loads its checkpoint again: model file not found: ", path.string());
    ConfigOverrides overrides;
    for (const auto& kv : t[2].cast<py::list>()) {
      const auto pair = kv.cast<py::tuple>();
      overrides.emplace_back(pair[0].cast<std::string>(), pair[1].cast<std::string>());
    }
    ModelLoadOptions lo;
    lo.weights_dtype = parse_dtype(t[4].cast<std::string>());
    PyModel m;
    {
      py::gil_scoped_release nogil;
      m.model = Model::load(path.string(), overrides, lo);
    }
    m.source = t[5].cast<std::string>();
    m.path = path;
    m.overrides = std::move(overrides);
    return m;
  }
};

// A checkpoint path is loaded as run loads it: weights dtype 'auto' for the session's device.
PyModel model_from_python(const py::handle& obj, const std::string& device) {
  if (py::isinstance<PyModel>(obj)) return obj.cast<PyModel>();
  if (py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__"))
    return PyModel::load(obj.cast<fs::path>(), py::none(), "auto", device);
  throw py::type_error("model must be a lingbot_map.Model or a checkpoint path, got " + describe_array(obj));
}

// ---- options ----------------------------------------------------------------------------------

// keyframe_interval= : "auto" -> 0 (decided by the caller), "flow" -> -1 (FlowKeyframes), an int >= 1 -> that
// interval (run's --keyframe-interval).
int parse_keyframe_interval(const py::handle& k) {
  if (py::isinstance<py::str>(k)) {
    const std::string s = k.cast<std::string>();
    if (s == "auto") return 0;
    if (s == "flow") return -1;
    throw py::value_error("keyframe_interval must be 'auto', 'flow' or an interval >= 1, got '" + s + "'");
  }
  if (!py::isinstance<py::bool_>(k) && PyIndex_Check(k.ptr())) {  // int, numpy integers
    const auto v = py::reinterpret_steal<py::object>(PyNumber_Index(k.ptr()));
    if (!v) throw py::error_already_set();
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0 || n < 0 || n > 1000000)  // run's --keyframe-interval range (0 = auto, as there)
      throw py::value_error("keyframe_interval must be in 1..1000000 (or 0 = 'auto'), got " + std::string(py::str(v)));
    return static_cast<int>(n);
  }
  throw py::type_error("keyframe_interval must be 'auto', 'flow' or an int >= 1, got " + describe_array(k));
}

// stacklevel 1 from a native function is the Python line that called it (so the warning shows by
// default when that line is in __main__).
void warn_deprecated(const std::string& message) {
  if (PyErr_WarnEx(PyExc_DeprecationWarning, message.c_str(), 1) != 0) throw py::error_already_set();
}

// keyframe_interval= and its old spelling keyframes= (docs/naming.md), as kv_backend_arg.
py::object keyframe_interval_arg(const py::object& keyframe_interval, const py::object& keyframes) {
  if (keyframes.is_none()) return keyframe_interval.is_none() ? py::str("auto") : keyframe_interval;
  if (!keyframe_interval.is_none()) throw py::value_error("give keyframe_interval or its old spelling keyframes, not both");
  warn_deprecated("keyframes= is deprecated, use keyframe_interval=");
  return keyframes;
}

// mode= (run's --mode: "streaming" | "windowed") and preprocess= (run's --preprocess: "crop" | "pad").
// mode="crop" | "pad" is the old spelling of preprocess= (as run's --mode crop | pad): it still works,
// with a DeprecationWarning, and means streaming mode.
struct ModeArgs {
  std::string mode = "streaming";
  std::string preprocess = "crop";
  bool preprocess_given = false;  // preprocess= (or the old mode="crop" | "pad") was passed
  std::optional<int> window_size, overlap_size, overlap_keyframes;  // windowed mode (run's defaults when None)
};

ModeArgs mode_args(const std::string& mode, const std::optional<std::string>& preprocess) {
  ModeArgs m;
  if (mode == "crop" || mode == "pad") {
    if (preprocess && *preprocess != mode)
      throw py::value_error("mode='" + mode + "' (the old spelling of preprocess=) contradicts preprocess='" +
                            *preprocess + "'");
    warn_deprecated("mode='" + mode + "' is deprecated, use preprocess='" + mode +
                    "' (mode= is now 'streaming' or 'windowed', as run's --mode)");
    m.preprocess = mode;
    m.preprocess_given = true;
    return m;
  }
  if (mode != "streaming" && mode != "windowed")
    throw py::value_error("mode must be 'streaming' or 'windowed', got '" + mode + "'");
  m.mode = mode;
  m.preprocess = preprocess.value_or("crop");
  m.preprocess_given = preprocess.has_value();
  return m;
}

// kv_backend= and its old spelling backend= (docs/naming.md): the old one works with a
// DeprecationWarning; both at once is an error.
std::string kv_backend_arg(const std::optional<std::string>& kv_backend, const std::optional<std::string>& backend) {
  if (!backend) return kv_backend.value_or("paged");
  if (kv_backend) throw py::value_error("give kv_backend or its old spelling backend, not both");
  warn_deprecated("backend= is deprecated, use kv_backend=");
  return *backend;
}

struct SessionArgs {
  // None: the model's configuration (kv_cache.scale_frames, kv_cache.sliding_window,
  // camera.num_iterations: 8, 64 and 4 as released, run's defaults), so Model.load(config=...) holds.
  std::optional<int> scale_frames;
  std::optional<int> kv_window;
  py::object keyframe_interval;  // "auto" | "flow" | int (keyframe_interval_arg)
  std::optional<int> camera_iterations;
  std::string kv_backend = "paged";
  std::string kv_dtype = "bf16";
  int threads = 0;
  bool features = false;
  bool patch_tokens = false;
  std::optional<double> flow_threshold;    // keyframe_interval="flow" only (None: run's default)
  std::optional<int> max_non_keyframe_gap;
  std::string device = "cpu";
  int64_t max_special_frames = 0;  // run's --max-special-frames: 0 keeps every stored frame's specials
};

// Fills the options left None from the model's configuration.
SessionArgs with_model_defaults(SessionArgs a, const ModelConfig& c) {
  if (!a.scale_frames) a.scale_frames = static_cast<int>(c.kv_cache.scale_frames);
  if (!a.kv_window) a.kv_window = static_cast<int>(c.kv_cache.sliding_window);
  if (!a.camera_iterations) a.camera_iterations = static_cast<int>(c.camera.num_iterations);
  return a;
}

// The SessionOptions `lingbot-map run` builds from the same values (tools/cmd_run.cpp).
SessionOptions session_options(const SessionArgs& a, int keyframe_interval) {
  SessionOptions so;
  so.device = value_of([&] { return parse_device(a.device); });
  so.kv_backend = value_of([&] { return parse_kv_backend(a.kv_backend); });
  so.kv_dtype = value_of([&] { return parse_dtype(a.kv_dtype); });
  LINGBOT_CHECK(a.scale_frames && a.kv_window && a.camera_iterations, "internal: model defaults not resolved");
  so.scale_frames = *a.scale_frames;
  so.kv_window = *a.kv_window;
  if (keyframe_interval < 0) {  // keyframe_interval="flow" (FlowKeyframes checks its own arguments)
    so.keyframe_policy = value_of([&] {
      return std::make_shared<FlowKeyframes>(a.flow_threshold.value_or(kDefaultFlowThreshold),
                                             a.max_non_keyframe_gap.value_or(kDefaultMaxNonKeyframeGap));
    });
  } else {
    // As run: a flow option without flow keyframes would be silently ignored.
    for (const auto& [given, name] : {std::pair{a.flow_threshold.has_value(), "flow_threshold"},
                                      std::pair{a.max_non_keyframe_gap.has_value(), "max_non_keyframe_gap"}})
      if (given) throw py::value_error(std::string(name) + " only applies to keyframe_interval='flow'");
    so.keyframe_interval = keyframe_interval;
  }
  so.camera_iterations = *a.camera_iterations;
  so.max_special_frames = a.max_special_frames;
  so.threads = a.threads;
  so.keep_features = a.features;
  so.keep_patch_tokens = a.patch_tokens;
  so.camera_head = true;
  so.depth_head = true;
  // 0 means "model default" to the engine; Python callers must say what they mean.
  check_value(*a.scale_frames >= 1, "scale_frames must be >= 1, got ", *a.scale_frames);
  check_value(*a.kv_window >= 1, "kv_window must be >= 1, got ", *a.kv_window);
  check_value(*a.camera_iterations >= 1, "camera_iterations must be >= 1, got ", *a.camera_iterations);
  check_value(a.threads >= 0, "threads must be >= 0 (0 = all cores), got ", a.threads);
  check_value(a.max_special_frames >= 0, "max_special_frames must be >= 0 (0 = keep all), got ", a.max_special_frames);
  return so;
}

Preprocess preprocess_arg(const std::string& preprocess) {
  try {
    return parse_preprocess(preprocess);
  } catch (const Error&) {
    throw py::value_error("preprocess must be 'crop' or 'pad', got '" + preprocess + "'");
  }
}

// options["preprocess"] / ["image_size"]: run's preprocessing, or None when frames go in as they are.
void add_preprocess(py::dict& d, const std::optional<PreprocessOptions>& pre) {
  d["preprocess"] = pre ? py::object(py::str(std::string(preprocess_name(pre->preprocess)))) : py::none();
  d["image_size"] = pre ? py::object(py::int_(pre->image_size)) : py::none();
}

PreprocessOptions preprocess_options(int image_size, const std::string& preprocess, int64_t patch) {
  check_value(patch > 0 && patch <= kMaxImageSize, "patch_size must be in 1..", kMaxImageSize, ", got ", patch);
  PreprocessOptions pre;
  pre.image_size = image_size;
  pre.patch_size = static_cast<int>(patch);
  pre.preprocess = preprocess_arg(preprocess);
  value_of([&] { check_preprocess_options(pre); });
  return pre;
}

py::dict stats_dict(const SessionStats& s) {
  const CacheStats& c = s.cache;
  return py::dict("steps"_a = s.steps, "frames_completed"_a = s.frames_completed, "frames_stored"_a = c.frames_stored,
                  "frames_resident"_a = c.frames_resident, "special_tokens"_a = c.special_tokens,
                  "kept_special_tokens"_a = c.kept_special_tokens, "visible_tokens"_a = c.visible_tokens,
                  "pinned_pages"_a = c.pinned_pages, "window_pages"_a = c.window_pages, "free_pages"_a = c.free_pages,
                  "pool_pages"_a = c.pool_pages, "bytes_used"_a = c.bytes_used, "bytes_reserved"_a = c.bytes_reserved,
                  "camera_cache_frames"_a = s.camera_cache_frames, "camera_cache_bytes"_a = s.camera_cache_bytes,
                  // device="cuda" only (None on the CPU): SessionStats::device_peak_bytes / device_kv_cache_bytes
                  "device_peak_bytes"_a = s.device_peak_bytes ? py::object(py::int_(*s.device_peak_bytes)) : py::none(),
                  "device_kv_cache_bytes"_a =
                      s.device_kv_cache_bytes ? py::object(py::int_(*s.device_kv_cache_bytes)) : py::none());
}

// ---- one sequence: streaming (Session) or windowed (WindowedSession) ---------------------------

// The WindowedOptions `run --mode windowed` builds, with the option checks it makes up front (names as
// the Python keywords); None when m.mode is streaming, where the window keywords are refused.
std::optional<WindowedOptions> windowed_options(const ModeArgs& m, int scale_frames) {
  if (m.mode == "streaming") {
    for (const auto& [given, name] : {std::pair{m.window_size.has_value(), "window_size"},
                                      std::pair{m.overlap_size.has_value(), "overlap_size"},
                                      std::pair{m.overlap_keyframes.has_value(), "overlap_keyframes"}})
      if (given) throw py::value_error(std::string(name) + " only applies to mode='windowed'");
    return std::nullopt;
  }
  if (m.overlap_size && m.overlap_keyframes) throw py::value_error("give overlap_size or overlap_keyframes, not both");
  check_value(!m.overlap_size || *m.overlap_size >= 0, "overlap_size must be >= 0, got ", m.overlap_size.value_or(0));
  check_value(!m.overlap_keyframes || *m.overlap_keyframes >= 1,
                "overlap_keyframes must be >= 1 (the overlap is at least the scale frames; no overlap: overlap_size=0), got ",
                m.overlap_keyframes.value_or(0));
  WindowedOptions w;
  w.window_size = m.window_size.value_or(kDefaultWindowSize);
  check_value(w.window_size > scale_frames, "window_size ", w.window_size, " must be larger than scale_frames ",
                scale_frames, ": a window stores its scale frames plus at least one keyframe");
  if (m.overlap_keyframes) w.overlap_keyframes = m.overlap_keyframes;
  else w.overlap_size = m.overlap_size.value_or(kDefaultOverlapSize);
  if (w.overlap_size == 0 &&  // as run's notice
      PyErr_WarnEx(PyExc_UserWarning,
                   "overlap_size=0: consecutive windows share no frame, so they are not aligned (each keeps its own "
                   "world frame; .windows says aligned=False)",
                   1) != 0)
    throw py::error_already_set();
  return w;
}

// One sequence through a Session (streaming) or a WindowedSession (windowed mode: overlapping windows
// aligned by Sim(3), as run --mode windowed). A WindowedSession has no reset of its own: reset() makes
// a new one with the same options.
class Stream {
 public:
  Stream(std::shared_ptr<const Model> model, const SessionOptions& options, std::optional<WindowedOptions> windowed)
      : model_(std::move(model)), options_(options), windowed_options_(std::move(windowed)) {
    make();
  }

  std::vector<FrameResult> push_frame(const Tensor& image) {
    check_open("push");
    check_threads_after_fork(options().threads);
    return session_ ? session_->push_frame(image) : windowed_->push_frame(image);
  }
  std::vector<FrameResult> finish() {
    check_open("finish()");
    check_threads_after_fork(options().threads);
    if (session_) return session_->finish();  // the Session closes itself (its own messages afterwards)
    std::vector<FrameResult> r = windowed_->finish();
    ended_ = true;
    return r;
  }
  // Ends the sequence without running the model: the results computed and not yet returned (windowed:
  // the tail held back for the overlap, WindowedSession::finish_early); none in streaming mode.
  std::vector<FrameResult> finish_early() {
    if (ended_) return {};
    ended_ = true;  // streaming: the frames waiting for a scale phase give no result
    return session_ ? std::vector<FrameResult>{} : windowed_->finish_early();
  }
  void reset() {
    ended_ = false;
    if (session_) session_->reset();
    else make();
  }
  SessionStats stats() const { return session_ ? session_->stats() : windowed_->stats(); }
  const SessionOptions& options() const { return session_ ? session_->options() : windowed_->options(); }
  int64_t frames_pushed() const { return session_ ? session_->frames_pushed() : windowed_->frames_pushed(); }
  bool closed() const { return ended_ || (session_ ? session_->closed() : windowed_->closed()); }
  int scale_frames() const { return options().scale_frames; }

  // Whether the next push_frame() / finish() runs a scale phase (the step Ctrl-C may stop at once):
  // the first scale_frames frames, and in windowed mode every window's.
  bool push_runs_scale_phase() const {
    return session_ ? session_->frames_pushed() + 1 == scale_frames() : windowed_->next_push_runs_scale_phase();
  }
  bool finish_runs_scale_phase() const {
    return session_ ? session_->frames_pushed() > 0 && session_->frames_pushed() < scale_frames()
                    : windowed_->finish_runs_scale_phase();
  }

  py::dict options_dict() const {
    const SessionOptions& o = options();
    py::dict d("mode"_a = windowed_ ? "windowed" : "streaming", "scale_frames"_a = o.scale_frames,
               "kv_window"_a = o.kv_window,
               // None for flow keyframes (as summary.json): keyframe_policy says how frames are chosen
               "keyframe_interval"_a = o.keyframe_policy->decides_before() ? py::object(py::int_(o.keyframe_interval))
                                                                           : py::object(py::none()),
               "keyframe_policy"_a = o.keyframe_policy->describe(), "camera_iterations"_a = o.camera_iterations,
               "max_special_frames"_a = o.max_special_frames, "device"_a = std::string(device_name(o.device)),
               "kv_backend"_a = kv_backend_name(o.kv_backend), "kv_dtype"_a = std::string(dtype_name(o.kv_dtype)),
               "threads"_a = o.threads, "features"_a = o.keep_features, "patch_tokens"_a = o.keep_patch_tokens);
    d["keyframes"] = d["keyframe_policy"];  // the old key (docs/naming.md): removed in the next release
    if (windowed_) {  // as summary.json's options
      const WindowedOptions& w = *windowed_options_;
      d["window_size"] = w.window_size;
      d["overlap_size"] = w.overlap_size ? py::object(py::int_(*w.overlap_size)) : py::none();
      d["overlap_keyframes"] = w.overlap_keyframes ? py::object(py::int_(*w.overlap_keyframes)) : py::none();
      d["overlap_frames"] = windowed_->overlap();  // either option resolved
    }
    return d;
  }

  // Windowed: every window begun so far (summary.json's "windows"); streaming: None.
  py::object windows() const {
    if (!windowed_) return py::none();
    py::list out;
    for (const WindowInfo& w : windowed_->windows()) {
      py::array_t<float> t({4, 4});
      std::copy(w.transform.begin(), w.transform.end(), t.mutable_data());
      py::dict cache("frames_stored"_a = w.cache.frames_stored, "bytes_used"_a = w.cache.bytes_used,
                     "bytes_reserved"_a = w.cache.bytes_reserved);
      out.append(py::dict("index"_a = w.index, "start"_a = w.start, "end"_a = w.end < 0 ? py::object(py::none()) : py::int_(w.end),
                          "aligned"_a = w.aligned, "scale"_a = w.scale, "transform"_a = t, "cache"_a = cache));
    }
    return out;
  }

 private:
  void make() {
    session_.reset();
    windowed_.reset();
    ended_ = false;
    if (!windowed_options_) {
      session_ = std::make_unique<Session>(model_, options_);
      return;
    }
    windowed_ = std::make_unique<WindowedSession>(model_, options_, *windowed_options_);
    value_of([&] { check_windowed_options(*windowed_options_, windowed_->options()); });  // up front, as run
  }

  std::shared_ptr<const Model> model_;
  SessionOptions options_;
  std::optional<WindowedOptions> windowed_options_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<WindowedSession> windowed_;
  bool ended_ = false;  // the caller ended the sequence: finish_early(), or finish() in windowed mode

  void check_open(const char* call) const {
    if (ended_)
      throw Error(std::string(call) + " after the end of the sequence (finish() or finish_early()): call reset() to "
                                      "start a new sequence");
    if (windowed_ && windowed_->closed())  // a WindowedSession has no reset of its own
      throw Error(std::string(call) + " after a step that failed or was stopped: call reset() to start a new sequence");
  }
};

// ---- results ----------------------------------------------------------------------------------

// One frame's outputs; every array owns its memory (see arrays.h).
struct PyResult {
  int64_t frame_index = 0;
  bool is_keyframe = false;
  FrameType frame_type = FrameType::Scale;
  double flow = -1.0;
  int64_t rope_time_index = 0;
  int64_t window = 0;  // windowed mode: the window the result comes from (FrameResult::window)
  std::string source;
  double timestamp = 0;
  io::TimestampUnit timestamp_unit = io::TimestampUnit::FrameIndex;  // for the exports (viewer: seconds or not)
  int64_t scale_frames = 0;  // of the session that produced it (ExportRun::scale_frames)
  py::object pose_enc, pose_enc_iters, c2w, w2c, K, depth, conf, world_points, image, patch_tokens;
  py::list features;

  // Pickled by value (multiprocessing queues, joblib): every field, the arrays as NumPy pickles them.
  py::tuple getstate() const {
    return py::make_tuple(2, frame_index, is_keyframe, static_cast<int>(frame_type), flow, rope_time_index, window,
                          source, timestamp, scale_frames,
                          py::make_tuple(pose_enc, pose_enc_iters, c2w, w2c, K, depth, conf, world_points, image,
                                         patch_tokens),
                          features, timestamp_unit == io::TimestampUnit::Seconds);
  }
  static PyResult setstate(const py::tuple& t) {
    try {
      return setstate_checked(t);
    } catch (const py::cast_error& e) {  // a field of the wrong type (a pickle can hold anything)
      throw py::value_error(std::string("not a pickled lingbot_map.Result: ") + e.what());
    }
  }
  static PyResult setstate_checked(const py::tuple& t) {
    if (t.size() != 13 || !py::isinstance<py::int_>(t[0]) || t[0].cast<int>() != 2)
      throw py::value_error("not a pickled lingbot_map.Result of this version");
    PyResult r;
    r.frame_index = t[1].cast<int64_t>();
    r.is_keyframe = t[2].cast<bool>();
    const int type = t[3].cast<int>();
    if (type < static_cast<int>(FrameType::Scale) || type > static_cast<int>(FrameType::NonKeyframe))
      throw py::value_error("not a pickled lingbot_map.Result: frame type " + std::to_string(type));
    r.frame_type = static_cast<FrameType>(type);
    r.flow = t[4].cast<double>();
    r.rope_time_index = t[5].cast<int64_t>();
    r.window = t[6].cast<int64_t>();
    r.source = t[7].cast<std::string>();
    r.timestamp = t[8].cast<double>();
    r.scale_frames = t[9].cast<int64_t>();
    const auto a = t[10].cast<py::tuple>();
    if (a.size() != 10) throw py::value_error("not a pickled lingbot_map.Result of this version");
    // A pickle can hold anything: every array field must be None or a float32 array of its rank.
    auto array = [&](int i, int ndim, const char* name) {
      const py::object v = a[static_cast<size_t>(i)];
      if (v.is_none()) return v;
      const auto f32_of_rank = [&] {
        const auto arr = py::reinterpret_borrow<py::array>(v);
        return arr.ndim() == ndim && arr.dtype().kind() == 'f' && arr.dtype().itemsize() == 4;
      };
      if (!py::isinstance<py::array>(v) || !f32_of_rank())
        throw py::value_error(std::string("not a pickled lingbot_map.Result: ") + name + " is not a " +
                              std::to_string(ndim) + "-d float32 array");
      return v;
    };
    r.pose_enc = array(0, 1, "pose_enc");
    r.pose_enc_iters = array(1, 2, "pose_enc_iters");
    r.c2w = array(2, 2, "c2w");
    r.w2c = array(3, 2, "w2c");
    r.K = array(4, 2, "K");
    r.depth = array(5, 2, "depth");
    r.conf = array(6, 2, "conf");
    r.world_points = array(7, 3, "world_points");
    r.image = array(8, 3, "image");
    r.patch_tokens = array(9, 2, "patch_tokens");
    r.features = t[11].cast<py::list>();
    for (const auto& f : r.features)
      if (!py::isinstance<py::array>(f) || py::reinterpret_borrow<py::array>(f).dtype().kind() != 'f')
        throw py::value_error("not a pickled lingbot_map.Result: features holds something other than float arrays");
    r.timestamp_unit = t[12].cast<bool>() ? io::TimestampUnit::Seconds : io::TimestampUnit::FrameIndex;
    return r;
  }
};

// A frame pushed whose result has not come back yet (scale phase).
struct Pending {
  int64_t index = 0;
  std::string source;
  double timestamp = 0;
  io::TimestampUnit timestamp_unit = io::TimestampUnit::FrameIndex;
  Tensor image;  // the model input [3, H, W]
};

// Pairs each engine result with its pending input (needs the GIL: builds arrays).
std::vector<PyResult> to_python(std::vector<FrameResult>&& results, std::deque<Pending>* pending, int scale_frames) {
  std::vector<PyResult> out;
  out.reserve(results.size());
  for (FrameResult& r : results) {
    LINGBOT_CHECK(!pending->empty() && pending->front().index == r.frame_index, "internal: result for frame ",
                  r.frame_index, " does not match the frames pushed");
    Pending p = std::move(pending->front());
    pending->pop_front();
    PyResult o;
    o.frame_index = r.frame_index;
    o.is_keyframe = r.is_keyframe;
    o.frame_type = r.frame_type;
    o.flow = r.flow;
    o.rope_time_index = r.rope_time_index;
    o.window = r.window;
    o.scale_frames = scale_frames;
    o.source = std::move(p.source);
    o.timestamp = p.timestamp;
    o.timestamp_unit = p.timestamp_unit;
    o.pose_enc = tensor_to_array(std::move(r.pose_enc));
    // Engine layout [iterations, 9]; also the reference's per-frame slice of pose_enc_iters.
    o.pose_enc_iters = tensor_to_array(std::move(r.pose_enc_iters));
    o.c2w = tensor_to_array(std::move(r.extrinsic_c2w));
    o.w2c = tensor_to_array(std::move(r.extrinsic));
    o.K = tensor_to_array(std::move(r.intrinsic));
    o.depth = tensor_to_array(std::move(r.depth));
    o.conf = tensor_to_array(std::move(r.depth_conf));
    o.world_points = tensor_to_array(std::move(r.world_points));
    o.image = tensor_to_array(std::move(p.image));
    o.patch_tokens = tensor_to_array(std::move(r.patch_tokens));
    for (Tensor& f : r.features) o.features.append(tensor_to_array(std::move(f)));
    out.push_back(std::move(o));
  }
  return out;
}

// ---- Session ----------------------------------------------------------------------------------

class PySession {
 public:
  PySession(const PyModel& model, const SessionArgs& args_in, std::optional<int> image_size, const ModeArgs& mode)
      : model_(model) {
    const SessionArgs args = with_model_defaults(args_in, model.model->config());
    int interval = parse_keyframe_interval(args.keyframe_interval);
    if (interval == 0) interval = 1;  // "auto" needs the stream length; an open stream stores every frame
    SessionOptions so = session_options(args, interval);
    so.stop = stop_.get();
    const std::optional<WindowedOptions> windowed = windowed_options(mode, *args.scale_frames);
    if (image_size) {
      pre_ = preprocess_options(*image_size, mode.preprocess, model.model->patch_size());
    } else {
      preprocess_arg(mode.preprocess);
      if (mode.preprocess_given)  // an option that would do nothing
        throw py::value_error("preprocess= applies to run's preprocessing, which image_size= asks for: give image_size "
                              "too (frames without it go in as they are)");
    }
    py::gil_scoped_release nogil;
    stream_ = std::make_unique<Stream>(model.model, so, windowed);
  }

  std::vector<PyResult> push(const py::handle& frame, std::optional<std::string> source, std::optional<double> timestamp) {
    BusyGuard busy(busy_, "this Session");
    // The exports write it as it is (TUM, poses.json): NaN or inf would make them unreadable.
    if (timestamp && !std::isfinite(*timestamp))
      throw py::value_error("timestamp must be a finite number of seconds, got " + std::string(py::str(py::float_(*timestamp))));
    Stream& s = open();
    InputFrame in = frame_from_python(frame, "frame");
    if (!in.rgb8 && pre_)
      throw py::value_error("image_size= preprocesses uint8 frames; a float32 frame is a model input already "
                            "(push uint8 [H, W, 3] frames, or make the Session without image_size)");
    const int64_t index = s.frames_pushed();
    if (pre_) {  // the engine would compare preprocessed sizes, which the caller never saw
      const io::ImageSize p = io::preprocessed_size({in.rgb8->width, in.rgb8->height}, *pre_);
      if (index == 0) {
        sequence_size_ = p;
      } else if (!(p == sequence_size_)) {
        throw Error(
            "frame " + std::to_string(index) + " (" + std::to_string(in.rgb8->width) + "x" + std::to_string(in.rgb8->height) +
            ", WxH) preprocesses to " + std::to_string(p.width) + "x" + std::to_string(p.height) + " at image_size=" +
            std::to_string(pre_->image_size) + ", but this sequence's frames preprocess to " +
            std::to_string(sequence_size_.width) + "x" + std::to_string(sequence_size_.height) +
            ": a Session takes pictures of one size and orientation per sequence (reset() starts a new one; "
            "reconstruct() pads mixed sizes as upstream does)");
      }
    }
    std::vector<FrameResult> results;
    Tensor image;
    try {
      CtrlCStopsTheStep ctrl_c(stop_.get(), s.push_runs_scale_phase());
      py::gil_scoped_release nogil;
      if (in.rgb8) image = pre_ ? io::preprocess_image(*in.rgb8, *pre_) : rgb8_to_chw(*in.rgb8);
      else image = std::move(in.chw);
      results = s.push_frame(image);
    } catch (const Stopped&) {
      rethrow_stopped();
    }
    pending_.push_back({index, source.value_or(""), timestamp.value_or(static_cast<double>(index)),
                        timestamp ? io::TimestampUnit::Seconds : io::TimestampUnit::FrameIndex, std::move(image)});
    return deliver(to_python(std::move(results), &pending_, s.scale_frames()));
  }

  std::vector<PyResult> finish() {
    BusyGuard busy(busy_, "this Session");
    Stream& s = open();
    std::vector<FrameResult> results;
    try {
      CtrlCStopsTheStep ctrl_c(stop_.get(), s.finish_runs_scale_phase());
      py::gil_scoped_release nogil;
      results = s.finish();
    } catch (const Stopped&) {
      rethrow_stopped();
    }
    return deliver(to_python(std::move(results), &pending_, s.scale_frames()));
  }

  std::vector<PyResult> finish_early() {
    BusyGuard busy(busy_, "this Session");
    Stream& s = open();
    return after_undelivered(to_python(s.finish_early(), &pending_, s.scale_frames()));
  }

  void reset() {
    BusyGuard busy(busy_, "this Session");
    Stream& s = open();
    {
      py::gil_scoped_release nogil;
      s.reset();
    }
    pending_.clear();
    undelivered_.clear();
  }

  void close() {
    BusyGuard busy(busy_, "this Session");
    {
      py::gil_scoped_release nogil;
      stream_.reset();
    }
    pending_.clear();
    undelivered_.clear();
  }

  // Readers take the guard too: the engine state they read changes while a push runs.
  py::dict stats() {
    BusyGuard busy(busy_, "this Session");
    return stats_dict(open().stats());
  }
  py::dict options() {
    BusyGuard busy(busy_, "this Session");
    py::dict d = open().options_dict();
    add_preprocess(d, pre_);
    return d;
  }
  py::object windows() {
    BusyGuard busy(busy_, "this Session");
    return open().windows();
  }
  bool finished() {
    BusyGuard busy(busy_, "this Session");
    return open().closed();
  }
  bool is_closed() {
    BusyGuard busy(busy_, "this Session");
    return stream_ == nullptr;
  }
  int64_t frames_pushed() {
    BusyGuard busy(busy_, "this Session");
    return open().frames_pushed();
  }
  const PyModel& model() const { return model_; }
  // "<lingbot_map.Session streaming, 5 frames pushed>" (", finished" / "closed" / "busy" as they apply).
  std::string repr() {
    std::optional<BusyGuard> busy;
    try {
      busy.emplace(busy_, "this Session");
    } catch (const Error&) {
      return "<lingbot_map.Session busy: a call is running>";
    }
    if (!stream_) return "<lingbot_map.Session closed>";
    const int64_t n = stream_->frames_pushed();
    return "<lingbot_map.Session " + py::str(stream_->options_dict()["mode"]).cast<std::string>() + ", " +
           std::to_string(n) + (n == 1 ? " frame" : " frames") + " pushed" + (stream_->closed() ? ", finished>" : ">");
  }

 private:
  Stream& open() {
    if (!stream_) throw Error("the Session is closed (close() or the end of its with-block): create a new Session");
    return *stream_;
  }
  // Results computed by a call go back with it unless a Ctrl-C is pending: CPython would raise
  // KeyboardInterrupt as the call returns and the list would be lost. Then KeyboardInterrupt is
  // raised here and they wait, in order, for the next push / finish / finish_early().
  std::vector<PyResult> deliver(std::vector<PyResult>&& results) {
    std::vector<PyResult> out = after_undelivered(std::move(results));
    if (PyErr_CheckSignals() != 0) {
      undelivered_ = std::move(out);
      throw py::error_already_set();
    }
    return out;
  }
  // The results held back by an interrupted call, then `results`, in frame order.
  std::vector<PyResult> after_undelivered(std::vector<PyResult>&& results) {
    std::vector<PyResult> out = std::move(undelivered_);
    undelivered_.clear();
    for (PyResult& r : results) out.push_back(std::move(r));
    return out;
  }

  PyModel model_;
  std::vector<PyResult> undelivered_;  // computed, not returned: a Ctrl-C came with them (deliver)
  io::ImageSize sequence_size_;        // with image_size=: the preprocessed size of this sequence's frames
  std::optional<PreprocessOptions> pre_;
  std::unique_ptr<std::atomic<bool>> stop_ = std::make_unique<std::atomic<bool>>(false);  // SessionOptions::stop
  std::unique_ptr<Stream> stream_;
  std::deque<Pending> pending_;
  std::atomic<bool> busy_{false};
};

// ---- reconstruct ------------------------------------------------------------------------------

struct SourceArgs {
  std::optional<int> image_size;  // None: 518 (uint8 frames, folders, videos); float32 arrays go in as they are
  double fps = 10;
  int64_t first_k = 0;
  int64_t stride = 1;
  bool rotate_cw90 = false;
};

// The frames of a folder, a video or a list of arrays, preprocessed as `run` does.
class FrameFeed {
 public:
  virtual ~FrameFeed() = default;
  // Next model input (needs the GIL for array lists; decoding/preprocessing release it). False at the end.
  virtual bool next(Pending* out) = 0;
  // What the video decoder lost or repaired so far; nullptr for folders and arrays.
  virtual const io::StreamDamage* damage() const { return nullptr; }
  std::optional<int64_t> count, estimated;
  io::ImageSize canvas;
};

class SourceFeed : public FrameFeed {
 public:
  SourceFeed(io::FrameSource src, const PreprocessOptions& pre) : src_(std::move(src)), pre_(pre) {
    count = src_.count();
    estimated = src_.estimated_count();
    canvas = src_.canvas(pre_);
  }
  bool next(Pending* out) override {
    py::gil_scoped_release nogil;
    io::SourceFrame f;
    if (!src_.next(&f)) return false;
    out->index = f.index;
    out->source = std::move(f.name);
    out->timestamp = f.timestamp;
    out->timestamp_unit = f.timestamp_unit;
    out->image = io::preprocess_image(f.image, pre_, canvas);
    return true;
  }
  const io::StreamDamage* damage() const override { return src_.damage(); }

 private:
  io::FrameSource src_;
  PreprocessOptions pre_;
};

class ArrayFeed : public FrameFeed {
 public:
  // The list is taken as it is now (a tuple of its items): frames appended or replaced later are not read.
  // preprocessing_asked: image_size= or preprocess= was given, which float32 frames cannot take.
  ArrayFeed(py::sequence frames, const PreprocessOptions& pre, bool preprocessing_asked)
      : frames_(py::tuple(frames)), pre_(pre) {
    const int64_t n = static_cast<int64_t>(py::len(frames_));
    check_value(n > 0, "images is an empty list: give at least one frame");
    count = estimated = n;
    // Validate every frame now (dtype, shape, float values, sizes: a bad one fails before any work) and
    // find upstream's batch canvas. Each frame is copied once for the checks and dropped.
    std::vector<io::ImageSize> sizes;
    int kinds = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::string what = "images[" + std::to_string(i) + "]";
      const InputFrame f = frame_from_python(frames_[static_cast<size_t>(i)], what);
      kinds |= f.rgb8 ? 1 : 2;
      if (kinds == 3)
        throw py::type_error("images mixes uint8 frames (preprocessed here) and float32 frames (model inputs): use one kind");
      if (!f.rgb8 && preprocessing_asked)
        throw py::value_error("image_size= and preprocess= preprocess uint8 frames; float32 frames are model inputs "
                              "already (give uint8 [H, W, 3] frames, or leave both unset)");
      model_inputs = !f.rgb8;
      if (f.rgb8) {
        sizes.push_back(io::preprocessed_size({f.rgb8->width, f.rgb8->height}, pre_));
        continue;
      }
      // float32 frames are model inputs as they are: one size, whole patches.
      const io::ImageSize s{static_cast<int>(f.chw.shape()[2]), static_cast<int>(f.chw.shape()[1])};
      if (s.width % pre_.patch_size != 0 || s.height % pre_.patch_size != 0)
        throw py::value_error(what + ": a float32 model input must be a multiple of the patch size " +
                              std::to_string(pre_.patch_size) + " on both sides, got " + std::to_string(s.width) + "x" +
                              std::to_string(s.height));
      if (!sizes.empty() && !(sizes.front() == s))
        throw py::value_error("float32 model inputs must all have one size: images[0] is " +
                              std::to_string(sizes.front().width) + "x" + std::to_string(sizes.front().height) + ", " +
                              what + " is " + std::to_string(s.width) + "x" + std::to_string(s.height));
      sizes.push_back(s);
    }
    canvas = io::batch_canvas_size(sizes);
  }
  bool model_inputs = false;  // the frames are float32 model inputs (no preprocessing)

  bool next(Pending* out) override {
    if (next_ >= static_cast<int64_t>(py::len(frames_))) return false;
    InputFrame in = frame_from_python(frames_[static_cast<size_t>(next_)], "images[" + std::to_string(next_) + "]");
    out->index = next_;
    out->source = "array_" + std::to_string(next_);
    out->timestamp = static_cast<double>(next_);
    {
      py::gil_scoped_release nogil;
      out->image = in.rgb8 ? io::preprocess_image(*in.rgb8, pre_, canvas) : std::move(in.chw);
    }
    ++next_;
    return true;
  }

 private:
  py::tuple frames_;
  PreprocessOptions pre_;
  int64_t next_ = 0;
};

class PyReconstruction {
 public:
  PyReconstruction(const py::object& images, const py::object& video, const py::object& model, const SourceArgs& src,
                   const SessionArgs& args_in, const ModeArgs& mode)
      : model_(model_from_python(model, args_in.device)) {
    const SessionArgs args = with_model_defaults(args_in, model_.model->config());
    const bool has_images = !images.is_none(), has_video = !video.is_none();
    if (has_images == has_video)
      throw py::value_error(has_images ? "give either images= or video=, not both"
                                       : "no input: give images= (a folder or a list of arrays) or video= (a file)");
    // Before any decoding: bad options fail first.
    int interval = parse_keyframe_interval(args.keyframe_interval);
    const std::optional<WindowedOptions> windowed = windowed_options(mode, *args.scale_frames);
    const PreprocessOptions pre =
        preprocess_options(src.image_size.value_or(kDefaultImageSize), mode.preprocess, model_.model->patch_size());
    pre_ = pre;
    const bool folder = has_images && (py::isinstance<py::str>(images) || py::hasattr(images, "__fspath__"));
    if (has_images && !folder) {
      if (!py::isinstance<py::sequence>(images) || py::isinstance<py::bytes>(images) || py::isinstance<py::bytearray>(images))
        throw py::type_error("images must be a folder path (str or os.PathLike) or a list of arrays, got " +
                             describe_array(images));
      if (src.first_k != 0 || src.stride != 1 || src.rotate_cw90)
        throw py::value_error("first_k, stride and rotate_cw90 select frames of a folder or video; slice the list instead");
      auto feed = std::make_unique<ArrayFeed>(images.cast<py::sequence>(), pre,
                                              src.image_size.has_value() || mode.preprocess_given);
      if (feed->model_inputs) pre_.reset();  // options: image_size / preprocess None, as a Session without them
      feed_ = std::move(feed);
      kind_ = "arrays";
    } else {
      io::FrameSelection sel;
      sel.first_k = src.first_k;
      sel.stride = src.stride;
      sel.video_fps = src.fps;
      sel.rotate_clockwise_90 = src.rotate_cw90;
      const fs::path path = (has_images ? images : video).cast<fs::path>();
      if (has_video) io::quiet_libav_logging();  // FFmpeg would print a second copy of every error
      std::unique_ptr<FrameFeed> feed;
      {
        py::gil_scoped_release nogil;
        feed = std::make_unique<SourceFeed>(has_images ? io::FrameSource::from_folder(path, sel)
                                                       : io::FrameSource::from_video(path, sel),
                                            pre);
      }
      feed_ = std::move(feed);
      kind_ = has_images ? "images" : "video";
    }
    const int patch = pre.patch_size;
    check_value(feed_->canvas.width >= patch && feed_->canvas.height >= patch, "preprocessed frames would be ",
                  feed_->canvas.width, "x", feed_->canvas.height, " pixels, smaller than one ", patch,
                  "-pixel patch: use a larger image_size");
    if (interval == 0) {  // auto, as run: windowed 1 (demo.py), else upstream's rule from the frame count
      const std::optional<int64_t> n = feed_->count ? feed_->count : feed_->estimated;
      interval = n && !windowed ? auto_keyframe_interval(*n) : 1;
    }
    SessionOptions so = session_options(args, interval);
    so.stop = stop_.get();
    py::gil_scoped_release nogil;
    stream_ = std::make_unique<Stream>(model_.model, so, windowed);
  }

  PyResult next() {
    BusyGuard busy(busy_, "this reconstruct() iterator");
    while (ready_.empty()) {
      if (done_) {
        // After the last result: a warning raised as an error then loses no frame.
        if (!warned_) {
          warned_ = true;
          warn_if_damaged();
        }
        throw py::stop_iteration();
      }
      Pending p;
      std::vector<FrameResult> results;
      try {
        if (feed_->next(&p)) {
          {
            CtrlCStopsTheStep ctrl_c(stop_.get(), stream_->push_runs_scale_phase());
            py::gil_scoped_release nogil;
            results = stream_->push_frame(p.image);
          }
          pending_.push_back(std::move(p));
        } else {
          {
            CtrlCStopsTheStep ctrl_c(stop_.get(), stream_->finish_runs_scale_phase());
            py::gil_scoped_release nogil;
            results = stream_->finish();
          }
          done_ = true;
        }
      } catch (...) {
        // A frame that failed to decode or run ends the iteration, as an exception ends a generator
        // (the frames after it would no longer line up with the session's frame indices); a step
        // Ctrl-C stopped ends it with KeyboardInterrupt.
        // pending_ stays: finish_early() pairs the rows already computed with their inputs.
        done_ = true;
        try {
          throw;
        } catch (const Stopped&) {
          rethrow_stopped();
        }
      }
      for (PyResult& r : to_python(std::move(results), &pending_, stream_->scale_frames())) ready_.push_back(std::move(r));
      check_signals();  // Ctrl-C: KeyboardInterrupt here, between frames (results stay queued)
    }
    PyResult r = std::move(ready_.front());
    ready_.pop_front();
    return r;
  }

  py::dict stats() {
    BusyGuard busy(busy_, "this reconstruct() iterator");
    return stats_dict(stream_->stats());
  }
  py::dict options() {
    BusyGuard busy(busy_, "this reconstruct() iterator");
    py::dict d = stream_->options_dict();
    add_preprocess(d, pre_);
    return d;
  }
  py::object windows() {
    BusyGuard busy(busy_, "this reconstruct() iterator");
    return stream_->windows();
  }
  // Ends the iteration early: the results computed and not yet returned (queued ones, and in windowed
  // mode the tail held back for the overlap), without running the model.
  std::vector<PyResult> finish_early() {
    BusyGuard busy(busy_, "this reconstruct() iterator");
    std::vector<PyResult> out(std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
    ready_.clear();
    done_ = true;
    if (!early_done_)
      for (PyResult& r : to_python(stream_->finish_early(), &pending_, stream_->scale_frames())) out.push_back(std::move(r));
    early_done_ = true;
    pending_.clear();
    return out;
  }
  py::object frame_count() const {
    if (feed_->count) return py::int_(*feed_->count);
    return py::none();
  }
  std::pair<int, int> image_size() const { return {feed_->canvas.width, feed_->canvas.height}; }
  // None for folders, arrays and a clean video; else the damage so far (run's summary.json "warnings").
  py::object damage() {
    BusyGuard busy(busy_, "this reconstruct() iterator");  // the decoder updates it while next() runs
    const io::StreamDamage* d = feed_->damage();
    if (!d || !d->any()) return py::none();
    return py::dict("decode_errors"_a = d->decode_errors, "lost_frames"_a = d->lost_frames,
                    "damaged_frames"_a = d->damaged_frames, "truncated"_a = d->truncated,
                    "description"_a = d->describe());
  }
  const std::string& kind() const { return kind_; }

 private:
  PyModel model_;
  std::unique_ptr<FrameFeed> feed_;
  std::unique_ptr<std::atomic<bool>> stop_ = std::make_unique<std::atomic<bool>>(false);  // SessionOptions::stop
  std::optional<PreprocessOptions> pre_;
  std::unique_ptr<Stream> stream_;
  std::deque<Pending> pending_;
  std::deque<PyResult> ready_;
  std::string kind_;
  bool done_ = false;
  bool early_done_ = false;  // finish_early() ran
  bool warned_ = false;  // warn_if_damaged ran (once, at the first StopIteration)

  // At the end of a damaged video: a RuntimeWarning (run exits 3 there unless --allow-damaged); the
  // frames that decoded were returned. warnings.simplefilter("error") turns it into an exception.
  void warn_if_damaged() const {
    const io::StreamDamage* d = feed_->damage();
    if (!d || !d->any()) return;
    const std::string msg = "the input video is damaged (" + d->describe() +
                            "); the frames that decoded were returned (Reconstruction.damage has the counts)";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) != 0) throw py::error_already_set();
  }
  std::atomic<bool> busy_{false};
};

// ---- Exporter: the files of `lingbot-map run` -------------------------------------------------

io::Mat34 mat34(const py::handle& a, const char* what) {
  const auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!arr || arr.ndim() != 2 || arr.shape(0) != 3 || arr.shape(1) != 4)
    throw py::value_error(std::string(what) + " must be a float array [3, 4], got " + describe_array(a));
  io::Mat34 m{};
  for (size_t i = 0; i < 12; ++i) m[i] = arr.data()[i];
  return m;
}

io::Mat33 mat33(const py::handle& a, const char* what) {
  const auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!arr || arr.ndim() != 2 || arr.shape(0) != 3 || arr.shape(1) != 3)
    throw py::value_error(std::string(what) + " must be a float array [3, 3], got " + describe_array(a));
  io::Mat33 m{};
  for (size_t i = 0; i < 9; ++i) m[i] = arr.data()[i];
  return m;
}

// A float32 C-contiguous view of `a`, which must have exactly `shape` (raises naming `what`).
CArray<float> f32_exact(const py::handle& a, const std::vector<py::ssize_t>& shape,
                                                 const std::string& what) {
  if (!py::isinstance<py::array>(a) || !holds<float>(py::reinterpret_borrow<py::array>(a)))
    throw py::type_error(what + " must be a float32 array, got " + describe_array(a));
  const auto arr = c_array<float>(a);
  bool same = arr.ndim() == static_cast<py::ssize_t>(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = arr.shape(static_cast<py::ssize_t>(i)) == shape[i];
  if (!same) {
    std::string want = "(";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    throw py::value_error(what + " must have shape " + want + (shape.size() == 1 ? ",)" : ")") + ", got " +
                          describe_array(a));
  }
  return arr;
}

// The export list as run's --export takes it: None = the default list, a comma string, or a list.
std::vector<std::string> export_names(const py::object& exports) {
  if (exports.is_none()) return io::parse_export_list(io::default_export_list());
  if (py::isinstance<py::str>(exports)) return value_of([&] { return io::parse_export_list(exports.cast<std::string>()); });
  if (py::isinstance<py::list>(exports) || py::isinstance<py::tuple>(exports)) {
    std::string list;
    for (const auto& item : exports) {
      if (!py::isinstance<py::str>(item))
        throw py::type_error("exports must be names (str), got " + describe_array(item));
      if (!list.empty()) list += ',';
      list += item.cast<std::string>();
    }
    check_value(!list.empty(), "exports is empty: give at least one export name");
    return value_of([&] { return io::parse_export_list(list); });
  }
  throw py::type_error("exports must be None, a comma-separated str or a list of names, got " + describe_array(exports));
}

// run's exporters (io::ExportSet) fed with Python results. Opened at the first write, when the frame
// size is known; that removes earlier outputs of this Exporter's exports in `out` (not of the others:
// another Exporter may be writing them into the same folder).
class PyExporter {
 public:
  PyExporter(const fs::path& out, const py::object& exports, double conf_threshold, Int downsample, const py::object& meta)
      : meta_(json_from_python(meta)) {
    check_value(downsample >= 1, "downsample must be >= 1, got ", downsample);
    check_value(std::isfinite(conf_threshold), "conf_threshold must be a finite number, got ", conf_threshold);
    if (!meta_.is_null() && !meta_.is_object()) throw py::type_error("meta must be a dict, got " + meta_.dump());
    std::vector<std::unique_ptr<io::Exporter>> exporters;
    const std::vector<std::string> names = export_names(exports);
    if (std::find(names.begin(), names.end(), "poses") != names.end()) {  // meta goes into poses.json only
      value_of([&] { io::check_poses_metadata(meta_); });  // refused now, not at the first write after the computation
      for (const char* own : {"image_width", "image_height"})
        check_value(meta_.is_null() || !meta_.contains(own), "meta must not contain the key '", own,
                      "' (the Exporter sets it from the frames)");
    }
    for (const std::string& name : names) {
      consecutive_ = consecutive_ || name == "viewer";  // viewer/NNNNNN.bin: frames 0, 1, 2, ... (the page loads them so)
      exporters.push_back(io::make_exporter(name));
    }
    set_ = std::make_unique<io::ExportSet>(std::move(exporters));
    run_.out_dir = out;
    run_.points = {static_cast<float>(conf_threshold), downsample};
    py::gil_scoped_release nogil;
    io::ensure_writable_dir(out);  // a bad folder fails here, before any frame
  }

  void write(const PyResult& r) {
    BusyGuard busy(busy_, "this Exporter");
    LINGBOT_CHECK(!closed_, "the Exporter is closed: create a new one");
    // Order first, before any file is touched: a refused frame leaves every export as it was.
    if (consecutive_)
      LINGBOT_CHECK(r.frame_index == frames_, "frames must be written in order 0, 1, 2, ... with the viewer export: got frame ",
                    r.frame_index, ", expected ", frames_);
    else
      LINGBOT_CHECK(r.frame_index > last_index_, "frames must be written in increasing order: got frame ", r.frame_index,
                    " after frame ", last_index_);
    for (const auto& [field, v] :
         {std::pair<const char*, const py::object*>{"pose_enc", &r.pose_enc}, {"c2w", &r.c2w}, {"w2c", &r.w2c},
          {"K", &r.K}, {"depth", &r.depth}, {"world_points", &r.world_points}, {"image", &r.image}})
      LINGBOT_CHECK(!v->is_none(), "result of frame ", r.frame_index, " has no ", field, " (camera and depth heads are needed)");
    const auto depth = py::reinterpret_borrow<py::array>(r.depth);
    check_value(depth.ndim() == 2, "depth must be [H, W], got ", describe_array(r.depth));
    const int H = static_cast<int>(depth.shape(0)), W = static_cast<int>(depth.shape(1));
    const size_t hw = static_cast<size_t>(H) * static_cast<size_t>(W);
    if (begun_)
      LINGBOT_CHECK(W == run_.width && H == run_.height, "frame ", r.frame_index, " is ", W, "x", H,
                    ", earlier frames of this Exporter are ", run_.width, "x", run_.height);
    const auto pose_enc = f32_exact(r.pose_enc, {9}, "pose_enc");
    const auto d = f32_exact(r.depth, {H, W}, "depth");
    const auto pts = f32_exact(r.world_points, {H, W, 3}, "world_points");
    const auto img = f32_exact(r.image, {3, H, W}, "image");
    std::optional<CArray<float>> conf;  // (a default array_t is not "none")
    if (!r.conf.is_none()) conf = f32_exact(r.conf, {H, W}, "conf");
    io::ExportFrame x;
    x.index = r.frame_index;
    x.timestamp = r.timestamp;
    x.timestamp_unit = r.timestamp_unit;
    x.source = r.source;
    x.keyframe = r.is_keyframe;
    x.scale_frame = r.frame_type == FrameType::Scale;
    x.image = std::span<const float>(img.data(), 3 * hw);
    x.pose_enc = std::span<const float>(pose_enc.data(), 9);
    x.c2w = mat34(r.c2w, "c2w");
    x.w2c = mat34(r.w2c, "w2c");
    x.intrinsics = mat33(r.K, "K");
    x.depth = std::span<const float>(d.data(), hw);
    if (conf) x.depth_conf = std::span<const float>(conf->data(), hw);
    x.world_points = std::span<const float>(pts.data(), 3 * hw);

    py::gil_scoped_release nogil;
    if (!begun_) {
      run_.width = W;
      run_.height = H;
      run_.scale_frames = static_cast<int>(r.scale_frames);
      run_.meta = meta_.is_null() ? nlohmann::json::object() : meta_;
      run_.meta["image_width"] = W;
      run_.meta["image_height"] = H;
      set_->begin(run_, io::StaleOutputs::SelectedExports);  // also removes an earlier run's summary.json
      begun_ = true;
    }
    set_->frame(x);
    ++frames_;
    last_index_ = r.frame_index;
  }

  // Finalises every export, whatever ended the writing (the files are complete for the frames written).
  void close() {
    BusyGuard busy(busy_, "this Exporter");
    if (closed_) return;
    closed_ = true;
    py::gil_scoped_release nogil;
    if (begun_) set_->finish();
  }
  // Garbage-collected without close(): the files are finished rather than left without their ends,
  // with a ResourceWarning as an open file gives. The GIL is held here (pybind11 deallocation).
  ~PyExporter() {
    if (closed_ || !begun_ || ::getpid() != owner_pid_) return;  // a forked child leaves the parent's files
    closed_ = true;
    try {
      set_->finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lingbot_map.Exporter: finishing %s at garbage collection failed: %s\n",
                   run_.out_dir.c_str(), e.what());
    }
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (Py_IsInitialized() && !finalizing &&
        PyErr_WarnFormat(PyExc_ResourceWarning, 1,
                         "lingbot_map.Exporter for %s was not closed: its files were finished at garbage "
                         "collection (call close(), or use a with-block)",
                         run_.out_dir.c_str()) != 0)
      PyErr_WriteUnraisable(nullptr);
  }
  PyExporter(const PyExporter&) = delete;
  PyExporter& operator=(const PyExporter&) = delete;
  py::object report() const { return py::module_::import("json").attr("loads")(set_->report().dump()); }
  int64_t frames() const { return frames_; }

 private:
  std::unique_ptr<io::ExportSet> set_;
  io::ExportRun run_;
  nlohmann::json meta_;
  bool begun_ = false, closed_ = false;
  pid_t owner_pid_ = ::getpid();  // the process that writes the files
  bool consecutive_ = false;  // the viewer export is on: frame indices 0, 1, 2, ...
  int64_t frames_ = 0;
  int64_t last_index_ = -1;   // frame index of the last frame written
  std::atomic<bool> busy_{false};
};

std::string result_repr(const PyResult& r) {
  std::string s = "<lingbot_map.Result frame " + std::to_string(r.frame_index) + (r.is_keyframe ? " keyframe" : "");
  if (py::isinstance<py::array>(r.depth) && py::reinterpret_borrow<py::array>(r.depth).ndim() == 2) {
    const auto d = py::reinterpret_borrow<py::array>(r.depth);
    s += " " + std::to_string(d.shape(1)) + "x" + std::to_string(d.shape(0));
  }
  if (!r.source.empty()) s += " source='" + r.source + "'";
  return s + ">";
}

}  // namespace

void bind_module(py::module_& m);

void bind_module(py::module_& m) {
  m.doc() = "lingbot_map: streaming 3D reconstruction (LingBot-Map) from NumPy, without PyTorch.";
  m.attr("__version__") = LINGBOT_VERSION;
  ::pthread_atfork(nullptr, nullptr, note_fork_child);  // once per process: the module is imported once
  py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  m.attr("Error").attr("__doc__") =
      "An engine error: an unreadable file or checkpoint, a frame the model cannot take, a missing device, "
      "a call out of order. The message is the engine's (the same text `lingbot-map` prints after "
      "'error: '). Argument values out of range or not among their choices raise ValueError.";
  m.attr("Error").attr("__module__") = "lingbot_map";  // tracebacks name the public module

  py::class_<PyModel>(m, "Model",
                      "A loaded LingBot-Map network (immutable; share one between any number of Sessions).")
      .def_static("load", &PyModel::load, "path"_a, "config"_a = py::none(), py::kw_only(), "weights_dtype"_a = "auto",
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
      .def_property_readonly("source", [](const PyModel& self) { return self.source; },
                             "The checkpoint path, or 'demo'.")
      .def(py::pickle([](const PyModel& self) { return self.getstate(); },
                      [](const py::tuple& t) { return PyModel::setstate(t); }))
      .def("__repr__", [](const PyModel& self) {
        return "<lingbot_map.Model " + self.source + ", " + std::to_string(self.model->config().parameter_count()) +
               " parameters>";
      });

  py::class_<PyResult>(m, "Result",
                       "One frame's outputs. Arrays are float32 NumPy arrays that own their memory (they stay valid\n"
                       "after the Session is gone). Camera convention: OpenCV axes (x right, y down, z forward);\n"
                       "c2w maps camera to world, w2c is its inverse; K is in pixels of the model input.")
      .def_readonly("frame_index", &PyResult::frame_index, "Position in the sequence, from 0.")
      .def_readonly("is_keyframe", &PyResult::is_keyframe, "Stored in the KV cache (scale frames and keyframes).")
      .def_readonly("rope_time_index", &PyResult::rope_time_index, "3D-RoPE time position (advances only for stored frames).")
      .def_readonly("window", &PyResult::window,
                    "mode='windowed': the window the result comes from (its pose is aligned to window 0); else 0.")
      .def_property_readonly("is_scale_frame", [](const PyResult& r) { return r.frame_type == FrameType::Scale; },
                             "One of the first scale_frames frames (processed together) of the session, or in\n"
                             "mode='windowed' of its window.")
      .def_property_readonly("frame_type", [](const PyResult& r) { return frame_type_name(r.frame_type); },
                             "'scale', 'keyframe' or 'non-keyframe'.")
      .def_readonly("flow", &PyResult::flow,
                    "keyframe_interval='flow': the mean flow in pixels against the last stored frame that decided; -1 otherwise.")
      .def_readonly("source", &PyResult::source, "File name, 'frame_<n>' for video, 'array_<i>', or what push() was given.")
      .def_readonly("timestamp", &PyResult::timestamp,
                    "Seconds for video and live streams and where push(timestamp=) gave one; the frame index otherwise.")
      .def_readonly("pose_enc", &PyResult::pose_enc, "[9]: t_xyz, quaternion xyzw (scalar last), fov_h, fov_w.")
      .def_readonly("pose_enc_iters", &PyResult::pose_enc_iters, "[camera_iterations, 9]: pose_enc after each refinement.")
      .def_readonly("c2w", &PyResult::c2w, "[3, 4] camera -> world [R | t] (t = camera centre).")
      .def_readonly("w2c", &PyResult::w2c, "[3, 4] world -> camera, the inverse of c2w.")
      .def_readonly("K", &PyResult::K, "[3, 3] intrinsics in pixels (cx = W/2, cy = H/2).")
      .def_readonly("depth", &PyResult::depth, "[H, W] depth along the camera z axis, positive.")
      .def_readonly("conf", &PyResult::conf, "[H, W] depth confidence, > 1.")
      .def_readonly("world_points", &PyResult::world_points, "[H, W, 3] world coordinates of every pixel.")
      .def_readonly("image", &PyResult::image, "[3, H, W] the model input (RGB in [0, 1]) the outputs belong to.")
      .def_readonly("features", &PyResult::features,
                    "Session(features=True): per selected aggregator layer, [P, 2C] tokens (P: patches + the special\n"
                    "tokens, 6 as released); else [].")
      .def_readonly("patch_tokens", &PyResult::patch_tokens,
                    "Session(patch_tokens=True): encoder patch tokens [(H/p)(W/p), C]; else None.")
      .def(py::pickle([](const PyResult& self) { return self.getstate(); },
                      [](const py::tuple& t) { return PyResult::setstate(t); }))
      .def("__repr__", &result_repr);

  const char* session_doc =
      "Inference over one sequence of frames (one Session per stream; Sessions may share a Model).\n\n"
      "Protocol: the first `scale_frames` frames are processed together; push() returns [] for them until\n"
      "the last one, which returns all their results. Every later push returns that frame's result.\n"
      "finish() ends the sequence (runs the scale phase if fewer frames came) and returns what is left;\n"
      "reset() starts a new sequence. Frames: uint8 [H, W, 3] RGB or float32 [3, H, W] in [0, 1], all the\n"
      "same size, multiples of the patch size unless image_size= asks for `run`'s preprocessing of uint8\n"
      "frames (resize + crop/pad, preprocess=). keyframe_interval='auto' stores every frame (the stream\n"
      "length is unknown; reconstruct() applies upstream's rule from the frame count); an int stores every\n"
      "N-th streamed frame; 'flow' stores a frame when its mean flow against the last stored one exceeds\n"
      "flow_threshold pixels or after max_non_keyframe_gap frames (run's --keyframe-interval flow).\n"
      "max_special_frames=N keeps the special tokens of only the newest N frames that left the window\n"
      "(run's --max-special-frames): memory and time per frame stop growing on endless streams; 0 keeps\n"
      "all (upstream). scale_frames, kv_window and camera_iterations default to the model's\n"
      "configuration (kv_cache.scale_frames, kv_cache.sliding_window, camera.num_iterations: 8, 64 and 4\n"
      "as released, run's defaults); a value given here takes precedence over Model.load(config=...).\n"
      "mode='windowed' (run's --mode windowed): overlapping windows of window_size stored frames, each\n"
      "a fresh cache whose first frames are the previous window's last overlap_size frames (or\n"
      "overlap_keyframes keyframes), aligned to window 0 by Sim(3); push() returns frames once their\n"
      "window has been aligned (so results arrive in bursts), `windows` lists the windows. Defaults as\n"
      "run: window_size=64, overlap_size=16. mode='crop' | 'pad' is the old spelling of preprocess=.\n"
      "Used as a context manager, the Session frees its cache on exit.";
  py::class_<PySession>(m, "Session", session_doc)
      .def(py::init([](const PyModel& model, std::optional<Int> scale_frames, std::optional<Int> kv_window,
                       const py::object& keyframe_interval, std::optional<Int> camera_iterations, const std::optional<std::string>& kv_backend, const std::string& kv_dtype,
                       Int threads, std::optional<Int> image_size, const std::string& mode,
                       const std::optional<std::string>& preprocess, std::optional<Int> window_size,
                       std::optional<Int> overlap_size, std::optional<Int> overlap_keyframes, Bool features,
                       Bool patch_tokens, std::optional<double> flow_threshold, std::optional<Int> max_non_keyframe_gap,
                       const std::optional<std::string>& backend, const py::object& keyframes, const std::string& device,
                       Int64 max_special_frames) {
             SessionArgs a{scale_frames, kv_window, keyframe_interval_arg(keyframe_interval, keyframes),
                           camera_iterations, kv_backend_arg(kv_backend, backend), kv_dtype, threads, features,
                           patch_tokens, flow_threshold, max_non_keyframe_gap, device};
             a.max_special_frames = max_special_frames;
             ModeArgs m = mode_args(mode, preprocess);
             m.window_size = window_size;
             m.overlap_size = overlap_size;
             m.overlap_keyframes = overlap_keyframes;
             return std::make_unique<PySession>(model, a, image_size, m);
           }),
           "model"_a, py::kw_only(), "scale_frames"_a = py::none(), "kv_window"_a = py::none(),
           "keyframe_interval"_a = py::none(), "camera_iterations"_a = py::none(), "kv_backend"_a = py::none(), "kv_dtype"_a = "bf16", "threads"_a = 0,
           "image_size"_a = py::none(), "mode"_a = "streaming", "preprocess"_a = py::none(), "window_size"_a = py::none(),
           "overlap_size"_a = py::none(), "overlap_keyframes"_a = py::none(), "features"_a = false,
           "patch_tokens"_a = false, "flow_threshold"_a = py::none(),
           "max_non_keyframe_gap"_a = py::none(), "backend"_a = py::none(), "keyframes"_a = py::none(),
           "device"_a = "cpu", "max_special_frames"_a = 0)
      .def("push", &PySession::push, "frame"_a, py::kw_only(), "source"_a = py::none(), "timestamp"_a = py::none(),
           "Pushes one frame; returns the results it completed (see the class doc). The GIL is released\n"
           "while the engine computes. `source` / `timestamp` are carried into the results (defaults: ''\n"
           "and the frame index).")
      .def("finish", &PySession::finish, "Ends the sequence; returns the results still pending (short streams).")
      .def("finish_early", &PySession::finish_early,
           "Ends the sequence without running the model (after KeyboardInterrupt or an error): returns the\n"
           "results already computed and not yet returned: those of a push / finish that a Ctrl-C\n"
           "interrupted as it returned, and (mode='windowed') the tail held back for the overlap, aligned as\n"
           "far as known. Then reset() starts a new sequence.")
      .def("reset", &PySession::reset, "Forgets the sequence (cache emptied, not reallocated); the next frame may differ in size.")
      .def("close", &PySession::close, "Frees the session's memory; any later call raises lingbot_map.Error.")
      .def("stats", &PySession::stats, "Cache occupancy after the last step: steps, frames_stored, bytes_reserved, ...")
      .def_property_readonly("options", &PySession::options, "The options in effect, every default resolved.")
      .def_property_readonly("windows", &PySession::windows,
                             "mode='windowed': every window begun so far, dicts index, start, end (exclusive; None while open),\n"
                             "aligned, scale, transform [4, 4] (window -> window 0: x -> scale * R x + t), cache\n"
                             "(frames_stored, bytes_used, bytes_reserved after the window's last step); else None.")
      .def("__repr__", &PySession::repr)
      .def_property_readonly("finished", &PySession::finished, "True after finish(), or after a step that failed or was stopped (Ctrl-C in a scale phase), until\n"
                             "reset(). A push refused before its step (a wrong frame size or dtype) leaves it False.")
      .def_property_readonly("closed", &PySession::is_closed, "True after close() / the end of a with-block.")
      .def_property_readonly("frames_pushed", &PySession::frames_pushed, "Frames pushed since the start or the last reset().")
      .def_property_readonly("model", &PySession::model, "The Model this session runs.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySession& self, const py::args&) { self.close(); });

  py::class_<PyReconstruction>(m, "Reconstruction",
                               "The iterator reconstruct() returns: one Result per frame, in order.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyReconstruction::next)
      .def("finish_early", &PyReconstruction::finish_early,
           "Ends the iteration without running the model (after KeyboardInterrupt or an error): returns\n"
           "the results already computed and not yet returned (mode='windowed': the tail held back for\n"
           "the overlap), as run writes them when it stops early.")
      .def("stats", &PyReconstruction::stats, "Cache occupancy after the last step (as Session.stats()).")
      .def_property_readonly("options", &PyReconstruction::options, "Session options in effect (keyframe interval resolved).")
      .def_property_readonly("windows", &PyReconstruction::windows, "mode='windowed': the windows so far (as Session.windows); else None.")
      .def_property_readonly("frame_count", &PyReconstruction::frame_count, "Frames in the input (folders, lists; after first_k / stride), fixed while iterating; None for video.")
      .def_property_readonly("image_size", &PyReconstruction::image_size, "(width, height) of every model input.")
      .def_property_readonly("kind", &PyReconstruction::kind, "'images', 'video' or 'arrays'.")
      .def_property_readonly("damage", &PyReconstruction::damage,
                             "None, or for a damaged video a dict: decode_errors, lost_frames, damaged_frames,\n"
                             "truncated, description. A RuntimeWarning says so at the end of the iteration.");

  m.def(
      "reconstruct",
      [](const py::object& images, const py::object& video, const py::object& model, std::optional<Int> image_size,
         const std::string& mode, const std::optional<std::string>& preprocess, std::optional<Int> window_size,
         std::optional<Int> overlap_size, std::optional<Int> overlap_keyframes, std::optional<double> fps_arg, Int64 first_k,
         Int64 stride, Bool rotate_cw90, std::optional<Int> scale_frames, std::optional<Int> kv_window,
         const py::object& keyframe_interval, std::optional<Int> camera_iterations, const std::optional<std::string>& kv_backend, const std::string& kv_dtype, Int threads,
         Bool features, Bool patch_tokens, std::optional<double> flow_threshold, std::optional<Int> max_non_keyframe_gap,
         const std::optional<std::string>& backend, const py::object& keyframes, const std::string& device,
         Int64 max_special_frames) {
        // As run's --fps (which needs --video): a sampling rate for frames that are not a video would do nothing.
        if (fps_arg && video.is_none()) throw py::value_error("fps= applies to video= only (a folder or list gives every frame)");
        const double fps = fps_arg.value_or(10.0);
        check_value(std::isfinite(fps), "fps must be a finite number (<= 0: every frame), got ", fps);
        check_value(stride >= 1, "stride must be >= 1, got ", stride);  // as io::FrameSource, before any work
        check_value(first_k >= 0, "first_k must be >= 0, got ", first_k);
        SourceArgs s;
        if (image_size) s.image_size = image_size->value;
        s.fps = fps;
        s.first_k = first_k;
        s.stride = stride;
        s.rotate_cw90 = rotate_cw90;
        SessionArgs a{scale_frames, kv_window, keyframe_interval_arg(keyframe_interval, keyframes), camera_iterations,
                      kv_backend_arg(kv_backend, backend), kv_dtype, threads, features, patch_tokens, flow_threshold,
                      max_non_keyframe_gap, device};
        a.max_special_frames = max_special_frames;
        ModeArgs m = mode_args(mode, preprocess);
        m.window_size = window_size;
        m.overlap_size = overlap_size;
        m.overlap_keyframes = overlap_keyframes;
        return std::make_unique<PyReconstruction>(images, video, model, s, a, m);
      },
      "images"_a = py::none(), "video"_a = py::none(), py::kw_only(), "model"_a, "image_size"_a = py::none(),
      "mode"_a = "streaming", "preprocess"_a = py::none(), "window_size"_a = py::none(), "overlap_size"_a = py::none(),
      "overlap_keyframes"_a = py::none(), "fps"_a = py::none(), "first_k"_a = 0, "stride"_a = 1, "rotate_cw90"_a = false,
      "scale_frames"_a = py::none(), "kv_window"_a = py::none(), "keyframe_interval"_a = py::none(),
      "camera_iterations"_a = py::none(),
      "kv_backend"_a = py::none(), "kv_dtype"_a = "bf16", "threads"_a = 0, "features"_a = false,
      "patch_tokens"_a = false, "flow_threshold"_a = py::none(),
      "max_non_keyframe_gap"_a = py::none(), "backend"_a = py::none(), "keyframes"_a = py::none(),
      "device"_a = "cpu", "max_special_frames"_a = 0,
      "Reconstructs a sequence as `lingbot-map run` does (same options, same defaults, same results):\n"
      "images= a folder (sorted .jpg/.jpeg/.png/.bmp) or a list of arrays (uint8 [H, W, 3], preprocessed\n"
      "like run; or float32 [3, H, W] model inputs), or video= a file (sampled at `fps`). image_size=None\n"
      "is run's 518 (float32 model inputs take no image_size= or preprocess=: they go in as they are).\n"
      "`model` is a Model or a checkpoint path. mode='windowed' runs run's --mode windowed (see Session;\n"
      "auto keyframe interval 1 there). Returns an iterator of Result, one per frame; inputs are checked\n"
      "before it is returned. Ctrl-C raises KeyboardInterrupt at the next frame boundary. A damaged video\n"
      "(decode errors, lost frames, cut short) yields the frames that decoded, then a RuntimeWarning at\n"
      "the end; Reconstruction.damage has the counts. An error while running a frame ends the iteration.");

  py::class_<PyExporter>(m, "Exporter",
                         "Writes results into `out` with the exporters of `lingbot-map run --export` (the same\n"
                         "files, byte for byte, for the same results): `exports` is None (run's default list,\n"
                         "default_exports()), a comma string like run's --export ('all' = every kind) or a list\n"
                         "of names (export_kinds()). Points (PLY, GLB, COLMAP, viewer) have conf > conf_threshold,\n"
                         "every downsample-th. `meta` adds top-level fields to poses.json. The files are opened at the\n"
                         "first write(), which removes earlier outputs of this Exporter's exports in `out` (not of\n"
                         "other exports: two Exporters may share a folder) and an earlier run's summary.json;\n"
                         "close() (or the end of a with-block) finalises them. summary.json is run's own and not written.")
      .def(py::init<const fs::path&, const py::object&, double, Int, const py::object&>(),
           "out"_a, py::kw_only(), "exports"_a = py::none(),
           "conf_threshold"_a = 1.5, "downsample"_a = 10, "meta"_a = py::none())
      .def("write", &PyExporter::write, "result"_a, "Appends one frame's result to every export (frames in order).")
      .def("close", &PyExporter::close, "Finalises every export (a second close() does nothing).")
      .def("report", &PyExporter::report, "Per export: the files written and counts (summary.json's 'exports').")
      .def_property_readonly("frames", &PyExporter::frames, "Frames written so far.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyExporter& self, const py::args&) { self.close(); });

  m.def(
      "export_kinds",
      [] {
        py::list out;
        for (const io::ExportKind& k : io::export_kinds())
          out.append(py::dict("name"_a = std::string(k.name), "description"_a = std::string(k.description),
                              "default"_a = k.default_on));
        return out;
      },
      "Every export Exporter (and run --export) knows: [{'name', 'description', 'default'}], in run's order.");
  m.def("default_exports", &io::default_export_list, "run's default --export list as one comma string (poses,tum,depth,ply,depth-preview,viewer).");

  m.def(
      "load_image",
      [](const fs::path& path) {
        io::ImageU8 img;
        {
          py::gil_scoped_release nogil;
          img = io::load_image(path);
        }
        return image_to_array(std::move(img));
      },
      "path"_a,
      "Decodes an image file as `run` does (PIL-compatible: EXIF orientation, alpha on white) -> uint8 [H, W, 3].");

  m.def(
      "preprocess",
      [](const py::handle& image, Int image_size, const std::optional<std::string>& preprocess, Int patch_size,
         const std::optional<std::string>& mode) {
        // mode= is the old spelling of preprocess= here too.
        if (mode && preprocess) throw py::value_error("give preprocess or its old spelling mode, not both");
        if (mode) warn_deprecated("mode= is deprecated, use preprocess=");
        InputFrame in = frame_from_python(image, "image");
        if (!in.rgb8) throw py::type_error("image must be a uint8 array [H, W, 3] (preprocess works on 8-bit RGB)");
        const PreprocessOptions pre =
            preprocess_options(image_size, preprocess.value_or(mode.value_or("crop")), patch_size);
        Tensor t;
        {
          py::gil_scoped_release nogil;
          t = io::preprocess_image(*in.rgb8, pre);
        }
        return tensor_to_array(std::move(t));
      },
      "image"_a, "image_size"_a = kDefaultImageSize, "preprocess"_a = py::none(), "patch_size"_a = 14, py::kw_only(),
      "mode"_a = py::none(),
      "`run`'s preprocessing (upstream's load_and_preprocess_images, bit-exact): PIL bicubic resize, then\n"
      "centre crop (preprocess='crop', the default: width := image_size) or white padding\n"
      "(preprocess='pad': longer side := image_size) -> float32 [3, H, W] = uint8 / 255.");

  m.def(
      "demo_frame",
      [](Int64 index, Int width, Int height) {
        check_value(index >= 0, "index must be >= 0, got ", index);
        check_value(width > 0 && height > 0, "width and height must be positive, got ", width, "x", height);
        io::ImageU8 img;
        {
          py::gil_scoped_release nogil;
          img = render_demo_frame(index, width, height);
        }
        return image_to_array(std::move(img));
      },
      "index"_a, "width"_a = kDemoFrameWidth, "height"_a = kDemoFrameHeight,
      "Frame `index` of the generated demo sequence (a camera moving through a textured room) as uint8 [H, W, 3].");

  m.def(
      "select_points",
      [](const py::handle& world_points, const py::handle& image, const py::object& conf, const py::object& depth,
         double conf_threshold, Int downsample) {
        if (!py::isinstance<py::array>(world_points))
          throw py::type_error("world_points must be a float32 array [H, W, 3], got " + describe_array(world_points));
        const auto wp = py::reinterpret_borrow<py::array>(world_points);
        if (wp.ndim() != 3 || wp.shape(2) != 3)
          throw py::value_error("world_points must be a float32 array [H, W, 3], got " + describe_array(world_points));
        check_value(downsample >= 1, "downsample must be >= 1, got ", downsample);
        check_value(std::isfinite(conf_threshold), "conf_threshold must be a finite number, got ", conf_threshold);
        const py::ssize_t H = wp.shape(0), W = wp.shape(1);
        const size_t hw = static_cast<size_t>(H * W);
        const auto pts = f32_exact(world_points, {H, W, 3}, "world_points");
        const auto img = f32_exact(image, {3, H, W}, "image");
        std::optional<CArray<float>> c;
        if (!conf.is_none()) c = f32_exact(conf, {H, W}, "conf");
        std::optional<CArray<float>> d;
        if (!depth.is_none()) d = f32_exact(depth, {H, W}, "depth");
        io::PointBatch b;
        {
          py::gil_scoped_release nogil;
          b = io::select_points(std::span<const float>(pts.data(), 3 * hw), std::span<const float>(img.data(), 3 * hw),
                                c ? std::span<const float>(c->data(), hw) : std::span<const float>(),
                                static_cast<float>(conf_threshold), downsample,
                                d ? std::span<const float>(d->data(), hw) : std::span<const float>());
        }
        const py::ssize_t n = static_cast<py::ssize_t>(b.size());
        py::array_t<float> xyz({n, py::ssize_t{3}});
        py::array_t<uint8_t> rgb({n, py::ssize_t{3}});
        std::copy(b.xyz.begin(), b.xyz.end(), xyz.mutable_data());
        std::copy(b.rgb.begin(), b.rgb.end(), rgb.mutable_data());
        return py::make_tuple(xyz, rgb);
      },
      "world_points"_a, "image"_a, "conf"_a = py::none(), "depth"_a = py::none(), "conf_threshold"_a = 1.5,
      "downsample"_a = 10,
      "The points `run` puts into points.ply for a frame with finite pose: finite points whose depth and\n"
      "conf (when given) are valid (finite, > 0), conf > conf_threshold, then every downsample-th\n"
      "-> (xyz float32 [N, 3], rgb uint8 [N, 3]) coloured from the model input `image`.");

  m.def(
      "load_safetensors",
      [](const fs::path& path) {
        struct Item {
          std::string name;
          Tensor floats;                      // float dtypes, as f32
          std::optional<io::IntTensor> ints;  // integer dtypes, as int64
        };
        std::vector<Item> items;
        {
          py::gil_scoped_release nogil;  // reading and converting need no Python objects
          const io::SafetensorsReader r = io::SafetensorsReader::open(path.string());
          for (const auto& e : r.entries()) {
            Item it{e.name, {}, std::nullopt};
            if (e.dtype == io::StorageDType::F64 || e.dtype == io::StorageDType::F32 || e.dtype == io::StorageDType::F16 ||
                e.dtype == io::StorageDType::BF16)
              it.floats = r.read(e.name, DType::F32);
            else
              it.ints = r.read_int(e.name);
            items.push_back(std::move(it));
          }
        }
        py::dict out;
        for (Item& it : items) {
          if (it.ints) {
            py::array_t<int64_t> a(std::vector<py::ssize_t>(it.ints->shape.begin(), it.ints->shape.end()));
            std::copy(it.ints->values.begin(), it.ints->values.end(), a.mutable_data());
            out[py::str(it.name)] = a;
          } else if (it.floats.empty()) {  // a [0, 3] tensor is an empty array, not None (tensor_to_array's "absent")
            out[py::str(it.name)] =
                py::array_t<float>(std::vector<py::ssize_t>(it.floats.shape().begin(), it.floats.shape().end()));
          } else {
            out[py::str(it.name)] = tensor_to_array(std::move(it.floats));
          }
        }
        return out;
      },
      "path"_a,
      "Reads a .safetensors file with the engine's reader -> {name: array} (floats as float32, integers as int64).");

  m.def(
      "verify",
      [](const fs::path& case_dir, const std::optional<std::string>& kv_backend, const std::string& kv_dtype, Int threads,
         const std::optional<std::string>& backend, const std::string& device, const std::string& weights_dtype,
         const std::optional<std::vector<std::string>>& only) {
        VerifyOptions o;
        o.case_dir = case_dir.string();
        o.kv_backend = value_of([&] { return parse_kv_backend(kv_backend_arg(kv_backend, backend)); });
        o.kv_dtype = value_of([&] { return parse_dtype(kv_dtype); });
        check_value(threads >= 0, "threads must be >= 0 (0 = all cores), got ", threads);
        o.threads = threads;
        o.device = resolve_device(value_of([&] { return parse_device(device); }));
        o.weights_dtype = PyModel::load_options(weights_dtype, device).weights_dtype;  // as verify --weights-dtype
        o.only = only.value_or(std::vector<std::string>{});
        VerifyReport rep;
        {
          py::gil_scoped_release nogil;
          rep = run_verify(o);
        }
        py::list rows;
        for (const VerifyRow& row : rep.rows)
          rows.append(py::dict("tensor"_a = row.tensor, "frames"_a = row.frames, "max_abs"_a = row.max_abs,
                               "max_rel"_a = row.max_rel, "tolerance"_a = row.tolerance, "status"_a = row.status,
                               "note"_a = row.note));
        return py::dict("case"_a = rep.case_name, "passed"_a = rep.passed(), "rows"_a = rows,
                        "report"_a = format_verify_report(rep));
      },
      "case_dir"_a, py::kw_only(), "kv_backend"_a = py::none(), "kv_dtype"_a = "f32", "threads"_a = 0,
      "backend"_a = py::none(), "device"_a = "cpu", "weights_dtype"_a = "f32", "only"_a = py::none(),
      "`lingbot-map verify`: runs a golden case directory and compares with its reference ->\n"
      "{'case', 'passed', 'rows': [{'tensor', 'max_abs', 'status', ...}], 'report': the CLI's table}.\n"
      "weights_dtype ('f32' the reference's precision; 'bf16' ... with tolerances scaled as the CLI's) and\n"
      "only (glob patterns of tensor names; the others are reported SKIP) as verify --weights-dtype / --only.");

  m.def("blas", &bench::blas_description, "The BLAS library and kernels in use (as `run` prints them).");
}

}  // namespace lingbot::python

PYBIND11_MODULE(_lingbot_map, m) { lingbot::python::bind_module(m); }
