#pragma once
// The keyword arguments Session and reconstruct() share, checked and turned into the engine's options
// as `lingbot-map run` turns its flags into them (tools/cmd_run.cpp); the names are the Python keywords.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lingbot/model.h"
#include "lingbot/preprocess.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"
#include "pipeline/memory_estimate.h"

namespace lingbot::python {

namespace py = pybind11;

// keyframe_interval= : "auto" -> 0 (decided by the caller), "flow" -> -1 (FlowKeyframes), an int >= 1 -> that
// interval (run's --keyframe-interval).
int parse_keyframe_interval(const py::handle& k);

// keyframe_interval= and its old spelling keyframes= (docs/naming.md), as kv_backend_arg.
py::object keyframe_interval_arg(const py::object& keyframe_interval, const py::object& keyframes);

// mode= (run's --mode: "streaming" | "windowed") and preprocess= (run's --preprocess: "crop" | "pad").
// mode="crop" | "pad" is the old spelling of preprocess= (as run's --mode crop | pad): it still works,
// with a DeprecationWarning, and means streaming mode.
struct ModeArgs {
  std::string mode = "streaming";
  std::string preprocess = "crop";
  bool preprocess_given = false;  // preprocess= (or the old mode="crop" | "pad") was passed
  std::optional<int> window_size, overlap_size, overlap_keyframes;  // windowed mode (run's defaults when None)
};

// The mode= and preprocess= a caller passed (the window keywords are the caller's to fill in).
ModeArgs mode_args(const std::string& mode, const std::optional<std::string>& preprocess);

// kv_backend= and its old spelling backend= (docs/naming.md): the old one works with a
// DeprecationWarning; both at once is an error.
std::string kv_backend_arg(const std::optional<std::string>& kv_backend, const std::optional<std::string>& backend);

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
  py::object progress = py::none();  // None or callable(dict): SessionOptions::step_progress
};

// Fills the options left None from the model's configuration.
SessionArgs with_model_defaults(SessionArgs a, const ModelConfig& c);

// The progress callable as the engine holds it: every copy of SessionOptions::step_progress shares
// this one reference. The Python object that owns the engine keeps a copy too and reports it to the
// garbage collector (gc_support.h), so a callable that refers back to its Session or iterator makes a
// cycle the collector can break.
using ProgressHolder = std::shared_ptr<py::object>;

// The SessionOptions `lingbot-map run` builds from the same values (tools/cmd_run.cpp); *progress: the
// callable's holder (null without one).
SessionOptions session_options(const SessionArgs& a, int keyframe_interval, ProgressHolder* progress);

// preprocess= 'crop' | 'pad'; ValueError otherwise.
Preprocess preprocess_arg(const std::string& preprocess);

// options["preprocess"] / ["image_size"]: run's preprocessing, or None when frames go in as they are.
void add_preprocess(py::dict& d, const std::optional<PreprocessOptions>& pre);

// run's preprocessing at image_size for a model of patch size `patch`; ValueError for values it refuses.
PreprocessOptions preprocess_options(int image_size, const std::string& preprocess, int64_t patch);

// Session.stats() / Reconstruction.stats(): SessionStats as a dict (device_* None on the CPU).
py::dict stats_dict(const SessionStats& s);

// The WindowedOptions `run --mode windowed` builds, with the option checks it makes up front (names as
// the Python keywords); None when m.mode is streaming, where the window keywords are refused.
std::optional<WindowedOptions> windowed_options(const ModeArgs& m, int scale_frames);

// run's memory feasibility check (pipeline/memory_estimate.h) for a session on a model: `mi` from
// memory_inputs() (all but the frame size); adds the preprocessed frame size and throws lingbot::Error
// naming the keyword to lower when it cannot fit.
void check_memory(const Model& model, MemoryInputs mi, int width, int height);

}  // namespace lingbot::python
