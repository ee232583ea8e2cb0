// Session / reconstruct() keyword arguments -> engine options (options.h).
#include "options.h"

#include <algorithm>
#include <stdexcept>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "arrays.h"
#include "checks.h"
#include "core/memory_stats.h"
#include "core/error.h"
#include "lingbot/keyframe_policy.h"

namespace lingbot::python {

using namespace py::literals;

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

py::object keyframe_interval_arg(const py::object& keyframe_interval, const py::object& keyframes) {
  if (keyframes.is_none()) return keyframe_interval.is_none() ? py::str("auto") : keyframe_interval;
  if (!keyframe_interval.is_none()) throw py::value_error("give keyframe_interval or its old spelling keyframes, not both");
  warn_deprecated("keyframes= is deprecated, use keyframe_interval=");
  return keyframes;
}

ModeArgs mode_args(const std::string& mode, const std::optional<std::string>& preprocess) {
  ModeArgs m;
  if (mode == "crop" || mode == "pad") {
    if (preprocess && *preprocess != mode)
      throw py::value_error("mode='" + mode + "' (the old spelling of preprocess=) contradicts preprocess='" +
                            *preprocess + "'");
    if (preprocess)  // as every other old spelling (and preprocess()'s mode=): even alike
      throw py::value_error("give preprocess='" + mode + "' or its old spelling mode='" + mode + "', not both");
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

std::string kv_backend_arg(const std::optional<std::string>& kv_backend, const std::optional<std::string>& backend) {
  if (!backend) return kv_backend.value_or("paged");
  if (kv_backend) throw py::value_error("give kv_backend or its old spelling backend, not both");
  warn_deprecated("backend= is deprecated, use kv_backend=");
  return *backend;
}

SessionArgs with_model_defaults(SessionArgs a, const ModelConfig& c) {
  // As run: a window the backend does not have would be silently ignored (only a given one: the
  // model's default fills it below).
  check_value(!a.kv_window || a.kv_backend != "dense-full", "kv_window does not apply to the dense-full KV backend (it keeps every frame)");
  // A value from the config is checked here, naming its config key: session_options' messages name
  // the keyword, which the caller did not give.
  const auto from_config = [](std::optional<int>& arg, int64_t value, const char* key, const char* keyword, int max) {
    if (arg) return;
    check_value(value >= 1 && value <= max, "the model config's ", key, " is ", value, ", outside the 1..", max, " a Session takes: give ",
                keyword, "= (or a config with another value)");
    arg = static_cast<int>(value);
  };
  from_config(a.scale_frames, c.kv_cache.scale_frames, "kv_cache.scale_frames", "scale_frames", kMaxScaleFrames);
  from_config(a.kv_window, c.kv_cache.sliding_window, "kv_cache.sliding_window", "kv_window", kMaxKvWindow);
  from_config(a.camera_iterations, c.camera.num_iterations, "camera.num_iterations", "camera_iterations", kMaxCameraIterations);
  return a;
}

namespace {

// SessionOptions::step_progress calling the callable with the GIL held: fn({"frames", "stage", "done",
// "total"}). The engine copies its options without the GIL (the step runs with it released), so the
// callable is held through a shared_ptr, whose copies touch no Python reference count; the last one
// takes the GIL to drop it. An exception the callable raises fails the step and reaches the caller as
// raised.
ProgressHolder hold_progress(const py::object& fn) {
  return ProgressHolder(new py::object(fn), [](py::object* o) {
    if (!Py_IsInitialized()) {  // the interpreter is gone: nothing to release
      (void)o->release();
      delete o;
      return;
    }
    py::gil_scoped_acquire gil;
    delete o;
  });
}

std::function<void(const StepProgress&)> python_step_progress(ProgressHolder held) {
  return [held = std::move(held)](const StepProgress& p) {
    py::gil_scoped_acquire gil;
    try {
      (*held)(py::dict("frames"_a = p.frames, "stage"_a = p.stage == StepProgress::Stage::Aggregator ? "aggregator" : "heads",
                       "done"_a = p.done, "total"_a = p.total));
    } catch (py::error_already_set& e) {
      // Out of reconstruct()'s next() it would end the iteration silently (as PEP 479 for generators).
      if (e.matches(PyExc_StopIteration)) throw std::runtime_error("the progress callable raised StopIteration");
      throw;
    }
  };
}

}  // namespace

SessionOptions session_options(const SessionArgs& a, int keyframe_interval, ProgressHolder* progress) {
  SessionOptions so;
  if (!a.progress.is_none()) {
    if (!PyCallable_Check(a.progress.ptr()))
      throw py::type_error("progress must be None or a callable taking a dict, got " +
                           std::string(py::str(py::type::of(a.progress).attr("__name__"))));
    ProgressHolder held = hold_progress(a.progress);
    so.step_progress = python_step_progress(held);
    *progress = std::move(held);
  }
  so.device = value_of([&] { return parse_device(a.device); });
  so.kv_backend = value_of([&] { return parse_kv_backend(a.kv_backend); });
  so.kv_dtype = value_of([&] { return parse_dtype(a.kv_dtype); });
  LINGBOT_CHECK(a.scale_frames && a.kv_window && a.camera_iterations, "internal: model defaults not resolved");
  so.scale_frames = *a.scale_frames;
  so.kv_window = *a.kv_window;
  if (keyframe_interval < 0) {  // keyframe_interval="flow"
    // FlowKeyframes checks these too, in its words ("flow threshold"): named here as the keywords.
    if (a.flow_threshold)
      check_value(std::isfinite(*a.flow_threshold) && *a.flow_threshold > 0,
                  "flow_threshold must be a number > 0 (pixels), got ", py::str(py::float_(*a.flow_threshold)).cast<std::string>());
    if (a.max_non_keyframe_gap)
      check_value(*a.max_non_keyframe_gap >= 1, "max_non_keyframe_gap must be >= 1, got ", *a.max_non_keyframe_gap);
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
  check_value(a.max_special_frames >= 0 && a.max_special_frames <= kMaxSpecialFrames, "max_special_frames must be in 0..",
              kMaxSpecialFrames, " (0 = keep all), got ", a.max_special_frames);
  // The upper bounds and the combination the Session constructor refuses (resolve() in
  // src/pipeline/session.cpp, which the engine does not export): the same constants and messages, here
  // so that they are ValueErrors raised before any Session is built, as the lower bounds above.
  const int threads = resolve_threads(a.threads);
  for (const auto& [name, value, bound] : {std::tuple{"scale_frames", *a.scale_frames, kMaxScaleFrames},
                                           std::tuple{"kv_window", *a.kv_window, kMaxKvWindow},
                                           std::tuple{"camera_iterations", *a.camera_iterations, kMaxCameraIterations},
                                           std::tuple{"threads", threads, kMaxThreads}})
    check_value(value <= bound, name, " must be at most ", bound, ", got ", value,
                std::string_view(name) == "threads" && a.threads == 0 ? " (0 = all: OpenMP's thread count)" : "");
  check_value(so.kv_backend != KVBackend::DenseFull || a.max_special_frames == 0,
              "max_special_frames does not apply to the dense-full KV backend (it keeps every frame)");
  return so;
}

Preprocess preprocess_arg(const std::string& preprocess) {
  try {
    return parse_preprocess(preprocess);
  } catch (const Error&) {
    throw py::value_error("preprocess must be 'crop' or 'pad', got '" + preprocess + "'");
  }
}

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
                  "kept_special_tokens"_a = c.kept_special_tokens, "special_frames_dropped"_a = c.special_frames_dropped,
                  "visible_tokens"_a = c.visible_tokens,
                  "pinned_pages"_a = c.pinned_pages, "window_pages"_a = c.window_pages, "free_pages"_a = c.free_pages,
                  "pool_pages"_a = c.pool_pages, "bytes_used"_a = c.bytes_used, "bytes_reserved"_a = c.bytes_reserved,
                  "camera_cache_frames"_a = s.camera_cache_frames, "camera_cache_bytes"_a = s.camera_cache_bytes,
                  // device="cuda" only (None on the CPU): SessionStats::device_peak_bytes / device_kv_cache_bytes
                  "device_peak_bytes"_a = s.device_peak_bytes ? py::object(py::int_(*s.device_peak_bytes)) : py::none(),
                  "device_kv_cache_bytes"_a =
                      s.device_kv_cache_bytes ? py::object(py::int_(*s.device_kv_cache_bytes)) : py::none());
}

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

void check_memory(const Model& model, MemoryInputs mi, int width, int height) {
  mi.width = width;
  mi.height = height;
  // As run's check (tools/run_checks.cpp), in the module's keywords.
  static const MemoryAdvice advice = {
      "the reconstruction", "lower kv_window= or scale_frames= (the KV cache keeps the window's and the scale frames) or image_size=",
      "lower kv_window= or scale_frames= (the KV cache keeps the window's and the scale frames), use kv_dtype='bf16' "
      "(half the bytes), or lower image_size=",
      "process fewer frames (first_k=, stride=, fps=), a larger keyframe_interval=, or bound the history with "
      "max_special_frames=N (the newest N past frames keep their special tokens and camera-head entries)",
      "lower image_size= or scale_frames=",
      "bound the special tokens past the window with max_special_frames=N (the newest N past frames keep theirs), "
      "process fewer frames (first_k=, stride=, fps=) or use a larger keyframe_interval="};
  check_memory_feasible(estimate_run_memory(model.config(), mi), static_cast<int64_t>(available_memory_bytes()), advice,
                        static_cast<int64_t>(total_memory_bytes()));
}

}  // namespace lingbot::python
