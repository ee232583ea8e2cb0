// `lingbot-map run`: frames (image folder, video, or the built-in demo) -> streaming Session ->
// the exports chosen with --export (io/export.h: poses.json, trajectory.tum, depth/, points.ply,
// depth_preview/, predictions/, colmap/, scene.glb, bss/) and summary.json in --out. Its options and
// their checks are in run_options.*, its frames in run_input.*, its threads in run_pipeline.h.
//
// Order of work, so that bad input never leaves files that look like a result:
//   1. options are checked, the input is opened and its first frame decoded, the model is loaded and
//      the Session created (any error here: nothing is written, --out is not even created);
//   2. --out and every chosen export's folders are created and checked writable, previous outputs
//      of a run there are removed (only the file names this command writes), and the exporters
//      are opened;
//   3. frames stream through the Session one at a time; every completed frame is appended to the
//      files at once, so they are valid for the frames done at any moment;
//   4. summary.json is written last, with "status": "completed", "damaged" (the video had decode
//      errors or lost frames, or a JPEG of the folder had lost data: exit 3 unless --allow-damaged), "interrupted" (Ctrl-C, SIGTERM or SIGHUP:
//      exit 130 / 143 / 129) or "failed" (an error after step 2: it carries the message; exit 1), and the
//      "warnings" list (input damage, non-finite outputs). A run killed hard (SIGKILL, a second
//      Ctrl-C) leaves no summary.json, but every per-frame file already written is valid.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/format_bytes.h"
#include "core/memory_stats.h"
#include "core/printf_string.h"
#include "core/scoped_signal_action.h"
#include "io/checkpoint.h"
#include "io/export.h"
#include "io/file_util.h"
#include "io/frame_source.h"
#include "io/live_source.h"
#include "io/output_lock.h"
#include "io/png.h"
#include "io/preprocess.h"
#include "io/video.h"
#include "io/writers.h"
#include "kernels/cpu/ops.h"
#include "pipeline/sequence_runner.h"
#include "pipeline/session_backend.h"
#include "lingbot/session.h"
#include "pipeline/demo_model.h"
#include "run_checks.h"
#include "run_input.h"
#include "run_modes.h"
#include "run_options.h"
#include "run_pipeline.h"
#include "run_progress.h"
#include "stop_signals.h"
#include "viewer_server.h"

namespace lingbot::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A run a signal stopped exits 128 + the signal, as shells report it: 130 (SIGINT), 143 (SIGTERM),
// 129 (SIGHUP).
constexpr int kExitDamagedInput = 3;   // the run finished but the input was damaged (see --allow-damaged)

// ---- Ctrl-C / SIGTERM / SIGHUP -----------------------------------------------------------------
// summary.json "status": how the run ended.
enum class RunStatus { Completed, Damaged, Interrupted, Failed };
const char* run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::Completed: return "completed";
    case RunStatus::Damaged: return "damaged";
    case RunStatus::Interrupted: return "interrupted";
    case RunStatus::Failed: return "failed";
  }
  return "?";
}

// Multi-line messages (a configuration check lists every problem) as one line: "head: a; b".
std::string one_line(const std::string& msg) {
  std::string out;
  size_t start = 0;
  while (start <= msg.size()) {
    size_t end = msg.find('\n', start);
    if (end == std::string::npos) end = msg.size();
    std::string piece = msg.substr(start, end - start);
    const size_t b = piece.find_first_not_of(" \t"), e = piece.find_last_not_of(" \t\r");
    piece = b == std::string::npos ? "" : piece.substr(b, e - b + 1);
    if (!piece.empty()) {
      if (!out.empty()) out += out.back() == ':' ? " " : "; ";
      out += piece;
    }
    start = end + 1;
  }
  return out;
}

// ---- outputs ----------------------------------------------------------------------------------
RigidTransform<double> to_rigid_transform(const Tensor& t, const char* what) {
  t.check_shape({3, 4}, what);
  RigidTransform<double> m{};
  for (int i = 0; i < 12; ++i) m[static_cast<size_t>(i)] = t.f32()[i];
  return m;
}

io::Mat33 to_mat33(const Tensor& t, const char* what) {
  t.check_shape({3, 3}, what);
  io::Mat33 m{};
  for (int i = 0; i < 9; ++i) m[static_cast<size_t>(i)] = t.f32()[i];
  return m;
}

json cache_json(const SessionStats& s) {
  const CacheStats& c = s.cache;
  return {{"steps", s.steps},
          {"frames_stored", c.frames_stored},
          {"frames_resident", c.frames_resident},
          {"special_tokens", c.special_tokens},
          {"kept_special_tokens", c.kept_special_tokens},  // the keys of Python's Session.stats(), same names
          {"special_frames_dropped", c.special_frames_dropped},
          {"visible_tokens", c.visible_tokens},
          {"pinned_pages", c.pinned_pages},
          {"window_pages", c.window_pages},
          {"free_pages", c.free_pages},
          {"pool_pages", c.pool_pages},
          {"bytes_used", c.bytes_used},
          {"bytes_reserved", c.bytes_reserved},
          {"camera_cache_frames", s.camera_cache_frames},
          {"camera_cache_bytes", s.camera_cache_bytes}};
}

// A window's KV cache after its last step (windowed summary: the top-level "cache" is the last window's).
json window_cache_json(const CacheStats& c) {
  return {{"frames_stored", c.frames_stored}, {"bytes_used", c.bytes_used}, {"bytes_reserved", c.bytes_reserved}};
}

// What the frame loop counted and how the run ended: summary.json's figures and the last line's.
struct RunTally {
  int64_t frames_done = 0;              // frames written
  int64_t keyframes = 0;                // of them stored (scale frames included)
  int64_t pushed = 0;                   // frames given to the model
  int64_t frames_without_geometry = 0;  // written without a finite camera (io/output_validity.h)
  std::vector<int> frame_types;         // per written frame: 0 scale, 1 keyframe, 2 non-keyframe
  double infer_seconds = 0;             // in the model (a stopped step's time included)
  double first_result_seconds = 0;      // model load start -> first frame result written (time to first frame)
  RunStatus status = RunStatus::Completed;
  std::string error;    // status Failed: the message
  int stop_signal = 0;  // status Interrupted: the signal
};

// The run's last lines on stdout: status, counts, time per frame and memory; frames without a result;
// the demo's reminder; the warnings' count.
void print_run_report(const RunTally& t, std::optional<int64_t> points, double model_seconds, double total_seconds,
                      std::optional<int64_t> device_peak_bytes, bool demo, int64_t warnings) {
  // Per frame: the model's time, and the run's after the model loaded (decoding large photos or
  // writing many exports can take longer than the model); none without a frame (as summary.json's null).
  const double frames = static_cast<double>(t.frames_done);
  const std::string per_frame = t.frames_done == 0 ? ""
                                                   : printf_string(", %.3f s/frame in the model, %.3f s/frame in all",
                                                                   t.infer_seconds / frames, (total_seconds - model_seconds) / frames);
  std::printf("%s: %s (%s), %s%s, peak RSS %s%s%s\n", run_status_name(t.status), count_of(t.frames_done, "frame").c_str(),
              count_of(t.keyframes, "keyframe").c_str(),
              points ? (std::to_string(*points) + " points").c_str() : "no point export", per_frame.c_str(),
              format_bytes(static_cast<int64_t>(peak_rss_bytes())).c_str(), device_peak_bytes ? ", device peak " : "",
              device_peak_bytes ? format_bytes(*device_peak_bytes).c_str() : "");
  if (t.pushed > t.frames_done)  // a stopped or failed step, or scale frames still waiting for the rest
    std::printf("%s given to the model %s no result (summary.json frames_without_result)\n",
                count_of(t.pushed - t.frames_done, "frame").c_str(), t.pushed - t.frames_done == 1 ? "has" : "have");
  if (demo) std::printf("demo: random weights, so the geometry above is meaningless.\n");
  if (warnings > 0) std::printf("%s (listed in summary.json)\n", count_of(warnings, "warning").c_str());
}

// summary.json "windows": each window's frames, alignment and cache.
json windows_json(const std::vector<WindowInfo>& infos) {
  json windows = json::array();
  for (const WindowInfo& w : infos) {
    json t = json::array();
    for (int r = 0; r < 4; ++r)
      t.push_back({w.transform[r * 4], w.transform[r * 4 + 1], w.transform[r * 4 + 2], w.transform[r * 4 + 3]});
    windows.push_back({{"index", w.index},
                       {"start", w.start},
                       {"end", w.end},
                       {"scale", w.scale},
                       {"aligned", w.aligned},
                       {"transform", t},
                       {"cache", window_cache_json(w.cache)}});
  }
  return windows;
}

// The points the point filter kept, from the exports' report: the same in every point export
// (scene.glb's count before its budget); none when no export keeps points.
std::optional<int64_t> points_kept(const json& export_report) {
  for (const auto& [name, key] : {std::pair{"ply", "points"}, std::pair{"colmap", "points"},
                                  std::pair{"viewer", "points"}, std::pair{"glb", "points_before_budget"}})
    if (export_report.contains(name)) return export_report[name].at(key).get<int64_t>();
  return std::nullopt;
}

// A frame pushed into the session whose result has not come back yet (scale phase).
struct PendingFrame {
  int64_t index = 0;
  double timestamp = 0;
  io::TimestampUnit timestamp_unit = io::TimestampUnit::FrameIndex;
  std::string name;
  Tensor image;  // preprocessed [3, H, W], for the point colours
  io::PixelRect content;  // the pixels of `image` that came from the picture (io::content_rect)
  io::SourcePlacement placement;  // where the picture lies on `image` (io::place_on_frame)
  CorruptData corrupt;            // image folders: the data its JPEG lost (io::SourceFrame::corrupt)
};

// A finished frame for the writer: its result, the frame it came from, the KV cache's bytes when it
// was returned (for the progress line).
struct WriteJob {
  FrameResult result;
  PendingFrame frame;
  int64_t cache_bytes = 0;
  int64_t computed = 0;  // frames the model had finished with this one (a scale phase finishes several at once)
};

// The options resolved before the input is opened (only the checkpoint's index is read: names and
// shapes), so option and model-file problems are reported before any frame or weight is read.
struct RunSettings {
  std::vector<std::string> export_names;
  KVBackend kv_backend;
  Device device;
  DType kv_dtype;
  int kv_window;  // --kv-window or its default (dense-full: unused)
  WeightsDtypeForDevice weights;
  ConfigOverrides overrides;  // --set
  ModelConfig model_config;   // the checkpoint's (from its index) or the demo model's, --set applied
  PreprocessOptions pre;      // the patch size decides the preprocessing
};

RunSettings resolve_settings(const RunArgs& a) {
  check_run_args(a);
  std::vector<std::string> export_names = io::parse_export_list(a.exports);
  usage_check(a.serve_port < 0 || std::find(export_names.begin(), export_names.end(), "viewer") != export_names.end(),
              "--serve shows the viewer export: add viewer to --export");
  // parse_choice: the old spelling --attention has no validator.
  const KVBackend backend = parse_choice("--kv-backend", [&] { return parse_kv_backend(a.kv_backend); });
  // dense-full keeps every frame (the no-eviction reference): a bound on what is kept cannot apply.
  usage_check(backend != KVBackend::DenseFull || a.max_special_frames.value_or(0) == 0,
                "--max-special-frames does not apply to --kv-backend dense-full (it keeps every frame)");
  usage_check(backend != KVBackend::DenseFull || !a.kv_window,
              "--kv-window does not apply to --kv-backend dense-full (it keeps every frame)");
  // Checked before anything is loaded: a missing device is one error line.
  const Device device = cli::resolve_device_option(a.device);
  const DType kv_dtype = parse_dtype(a.kv_dtype);
  WeightsDtypeForDevice weights = parse_weights_dtype(a.weights_dtype, device);
  if (!weights.notice.empty()) std::printf("%s\n", weights.notice.c_str());
  ConfigOverrides overrides = parse_sets(a.sets);
  usage_check(!a.demo || overrides.empty(), "--set changes a loaded checkpoint's configuration; it cannot be used with --demo");

  if (!a.demo) io::check_path_exists(a.model, "model file");
  ModelConfig model_cfg = a.demo ? demo_model_config() : [&] {
    ModelConfig cfg = ModelConfig::infer(io::index_checkpoint(a.model).tensors);
    for (const auto& [key, value] : overrides) cfg.set(key, value);
    return cfg;
  }();
  const int patch = static_cast<int>(model_cfg.encoder.patch_size);
  LINGBOT_CHECK(patch > 0, a.model, ": patch size must be positive, got ", patch);

  PreprocessOptions pre;
  pre.image_size = a.image_size.value_or(a.demo ? kDemoImageSize : kDefaultImageSize);
  pre.patch_size = patch;
  pre.preprocess = parse_preprocess(a.preprocess);  // checked by resolve_preprocess
  LINGBOT_CHECK(pre.image_size % patch == 0, "--image-size must be a multiple of the model's patch size ", patch,
                ", got ", pre.image_size);
  return RunSettings{std::move(export_names), backend,   device, kv_dtype, a.kv_window.value_or(kDefaultKvWindow),
                     std::move(weights),      std::move(overrides), std::move(model_cfg), pre};
}

// Memory feasibility from the configuration and the session's options, before the weights are read:
// a run that cannot fit is refused with the option to lower (pipeline/memory_estimate.h).
void check_run_memory(const RunSettings& settings, const Input& input, const SessionOptions& so, const ModeChoice& mode) {
  MemoryInputs mi = memory_inputs(settings.model_config, so, settings.weights.dtype,
                                  mode.windowed ? std::optional(mode.window) : std::nullopt,
                                  input.count ? input.count : input.estimated);
  mi.width = input.canvas.width;
  mi.height = input.canvas.height;
  check_memory_feasible(estimate_run_memory(settings.model_config, mi), static_cast<int64_t>(available_memory_bytes()),
                        run_memory_advice(), static_cast<int64_t>(total_memory_bytes()));
}

// The run's first lines on stdout, once the model is loaded and before the first result: what runs on
// what (input, model, session options, windows, device, BLAS, weights, attention, output folder).
void print_run_banner(const RunArgs& a, const RunSettings& settings, const Input& input, const ModeChoice& mode,
                      const Model& model, double model_seconds, int64_t overlap_frames,
                      const std::string& device_description, const fs::path& out) {
  const std::string frame_count = input.count       ? count_of(*input.count, "frame")
                                  : input.estimated ? "about " + count_of(*input.estimated, "frame")
                                                    : "unknown frames";
  // A video's rate and what --fps keeps of it (--fps 7 of 30 fps keeps 1 in 4 frames: 7.5 fps).
  const std::string sampling =
      !input.sampling ? ""
      : input.sampling->sample_interval == 1
          ? printf_string(" (%g fps, every frame)", input.sampling->source_fps)
          : printf_string(" (%g fps, 1 in %d frames: %g fps)", input.sampling->source_fps, input.sampling->sample_interval,
                          input.sampling->source_fps / input.sampling->sample_interval);
  std::printf("input: %s%s%s%s, %s, preprocessed to %dx%d (%s)\n", input.kind.c_str(), input.path.empty() ? "" : " ",
              input.path.c_str(), sampling.c_str(), frame_count.c_str(), input.canvas.width, input.canvas.height,
              a.preprocess.c_str());
  for (const std::string& notice : input.notices) std::printf("notice: %s\n", notice.c_str());
  std::printf("model: %s, %.1f M parameters, loaded in %.2f s\n", a.demo ? "built-in demo (random weights)" : a.model.c_str(),
              static_cast<double>(model.config().parameter_count()) / 1e6, model_seconds);
  const std::string window = settings.kv_backend == KVBackend::DenseFull ? "no window (dense-full keeps every frame)"
                                                                         : "KV window " + std::to_string(settings.kv_window);
  std::printf("session: %s mode, KV backend %s, KV %s, %d scale frames, %s, keyframes: %s, %d camera iterations\n",
              a.modes.mode.c_str(), a.kv_backend.c_str(), a.kv_dtype.c_str(), a.scale_frames, window.c_str(),
              mode.policy->describe().c_str(), a.camera_iterations);
  if (mode.windowed)
    std::printf("windows: %d stored frames each, overlap %lld frames%s\n", mode.window.window_size,
                static_cast<long long>(overlap_frames),
                overlap_frames == 0 ? " (no shared frames: the windows are not aligned, each keeps its own world frame)"
                                    : "");
  // GEMMs dominate a frame: say which BLAS kernels run (an OPENBLAS_CORETYPE override shows here).
  std::printf("device: %s\n", device_description.c_str());
  std::printf("blas: %s\n", kernels::blas_description().c_str());
  const std::string& rule = settings.weights.rule;
  std::printf("weights: %s for the block linears (%s%s%s)%s\n", dtype_name(model.weights_dtype()).data(),
              gemm_path_description(settings.device, model.weights_dtype()).c_str(), rule.empty() ? "" : "; ",
              rule.c_str(), model.load_stats().mapped ? ", checkpoint memory-mapped" : "");
  if (const std::string ignored = model.load_stats().ignored_description(); !ignored.empty())
    std::printf("notice: %s\n", ignored.c_str());
  const int64_t head_dim = model.config().aggregator.embed_dim / model.config().aggregator.num_heads;
  std::printf("attention: %s\n",
              attention_path_description(settings.device, settings.kv_dtype, model.weights_dtype(), head_dim).c_str());
  std::printf("output: %s\n", out.c_str());
  std::fflush(stdout);
}

// --max-special-frames in effect, and where it came from (summary.json max_special_frames_rule).
struct SpecialFramesBound {
  static constexpr const char* kGiven = "given";
  static constexpr const char* kAutomaticLive = "automatic (live input: bounded cost)";
  static constexpr const char* kDefault = "default (keep all, as upstream)";
  int64_t frames = 0;  // 0: every evicted frame's special tokens are kept
  const char* rule = kDefault;
};

// As given; unset, a live stream in streaming mode (unknown and unbounded length: its special stream,
// camera cache and per-frame time would grow for hours) keeps the newest kLiveMaxSpecialFrames evicted
// frames' specials; otherwise 0, every frame's (upstream).
SpecialFramesBound resolve_max_special_frames(const RunArgs& a, bool live_input, bool windowed, KVBackend backend) {
  if (a.max_special_frames) return {*a.max_special_frames, SpecialFramesBound::kGiven};
  if (live_input && !windowed && backend != KVBackend::DenseFull)
    return {kLiveMaxSpecialFrames, SpecialFramesBound::kAutomaticLive};
  return {};
}

// summary.json "options": every option as it took effect (defaults and automatic choices resolved).
json options_json(const RunArgs& a, const RunSettings& settings, const Input& input, const ModeChoice& mode,
                  const SpecialFramesBound& special, int64_t overlap_frames, DType weights_dtype) {
  const auto* flow = dynamic_cast<const FlowKeyframes*>(mode.policy.get());
  const bool video = input.kind == "video" || input.kind == "live";
  return {{"image_size", settings.pre.image_size},
          {"mode", a.modes.mode},
          {"preprocess", a.preprocess},
          {"fps", video ? json(a.fps) : json()},  // video only
          {"first_k", a.first_k},
          {"stride", a.stride},
          {"rotate_cw90", a.rotate_cw90},
          {"scale_frames", a.scale_frames},
          {"kv_window", settings.kv_backend == KVBackend::DenseFull ? json() : json(settings.kv_window)},  // null: no window
          // null for flow keyframes (no interval: keyframe_policy says how frames are chosen)
          {"keyframe_interval", mode.policy->decides_before() ? json(mode.keyframe_interval) : json()},
          {"keyframe_interval_rule", mode.keyframe_rule},
          {"keyframe_policy", mode.policy->describe()},
          // flow keyframes' parameters in effect (defaults resolved); null for interval keyframes
          {"flow_threshold", flow ? json(flow->threshold()) : json()},
          {"max_non_keyframe_gap", flow ? json(flow->max_non_keyframe_gap()) : json()},
          {"window_size", mode.windowed ? json(mode.window.window_size) : json()},
          {"overlap_size", mode.window.overlap_size ? json(*mode.window.overlap_size) : json()},
          {"overlap_keyframes", mode.window.overlap_keyframes ? json(*mode.window.overlap_keyframes) : json()},
          {"overlap_frames", mode.windowed ? json(overlap_frames) : json()},  // either option resolved
          {"max_special_frames", special.frames},
          {"max_special_frames_rule", special.rule},
          {"camera_iterations", a.camera_iterations},
          {"device", std::string(device_name(settings.device))},
          {"kv_backend", a.kv_backend},
          {"kv_dtype", a.kv_dtype},
          {"weights_dtype", std::string(dtype_name(weights_dtype))},
          {"threads", resolve_threads(a.threads)},  // in effect (0 = all cores resolved), as Python's
          {"pipeline", a.pipeline},
          {"conf_threshold", a.conf_threshold},
          {"downsample", a.downsample},
          {"export_preprocessed", a.export_preprocessed.empty() ? json() : json(a.export_preprocessed)},  // null: none
          {"export", settings.export_names},
          {"set", a.sets}};
}

// What the frame loop reports to: the run's warnings and tally, the progress display, --serve's status,
// and an image folder's damage (the frames given to the model whose JPEG lost data).
struct LoopReports {
  RunWarnings& warnings;
  RunTally& tally;
  Progress& progress;
  LiveRunStatus& live;
  io::StreamDamage& image_damage;
};

// `run`'s frame loop: each frame decoded, preprocessed, given to the model, and its results written
// by every export. With --pipeline on, a reader thread decodes and preprocesses ahead (not for a live
// source: it must hand over its newest frame when the model is ready) and a writer thread writes the
// finished frames, both overlapping the model (tools/run_pipeline.h); off, all runs in this thread in
// turn. run() returns with the tally's status Completed, Interrupted (a stop signal) or Failed (the
// error kept), every result computed before the end written, and the progress display ended.
class FrameLoop {
 public:
  FrameLoop(const RunArgs& a, Input& input, const PreprocessOptions& pre, SequenceRunner& session, io::ExportSet& exports,
            LoopReports reports, const StopSignalGuard& sigint, Clock::time_point t_model)
      : a_(a), input_(input), pre_(pre), session_(session), exports_(exports), r_(reports), sigint_(sigint),
        t_model_(t_model), hw_(static_cast<size_t>(input.canvas.height) * static_cast<size_t>(input.canvas.width)),
        scale_frames_(session.windowed() ? 0 : session.options().scale_frames),
        // A known shorter input has its scale phase over all its frames (run by finish()).
        scale_phase_frames_(input.count ? std::min(scale_frames_, *input.count) : scale_frames_) {}
  FrameLoop(const FrameLoop&) = delete;
  FrameLoop& operator=(const FrameLoop&) = delete;
  ~FrameLoop() { stop_stages(); }  // every way out: the threads end before the queues they use

  void run(io::SourceFrame first) {
    RunTally& tally = r_.tally;
    try {
      if (a_.pipeline == "on") start_writer();
      const bool read_ahead = a_.pipeline == "on" && !input_.live;
      if (read_ahead) {
        read_ahead_loop(std::move(first));
      } else {
        in_turn_loop(std::move(first));
      }
      finish_stream();
      to_writer_.close();
      if (writer_) {
        writer_->join();
        writer_->rethrow();
      }
    } catch (const std::exception& e) {
      tally.status = RunStatus::Failed;
      tally.error = one_line(error_text(e));
    }
    stop_stages();  // the writer's last progress update comes before the bar's end
    if (tally.status == RunStatus::Failed) {
      // The results already computed are kept (windowed: the tail held back for the overlap), written
      // here in this thread; when the failure was a write, writing fails again and changes nothing.
      writer_.reset();
      try {
        deliver(session_.finish_early());
      } catch (const std::exception&) {
      }
    }
    r_.progress.end();
  }

 private:
  // One finished frame to every export, and into the tally.
  void write_result(const WriteJob& job) {
    const FrameResult& r = job.result;
    const PendingFrame& f = job.frame;
    const int H = input_.canvas.height, W = input_.canvas.width;
    LINGBOT_CHECK(!r.extrinsic_c2w.empty() && !r.intrinsic.empty() && !r.depth.empty() && !r.world_points.empty(),
                  "the session returned no camera / depth output for frame ", r.frame_index);
    // Non-finite values: reported per frame and field; a frame without a finite camera keeps its
    // raw arrays but has no geometry (io/output_validity.h).
    const FrameCheck check = check_frame_result(r);
    LINGBOT_CHECK(static_cast<size_t>(r.depth.numel()) == hw_ && static_cast<size_t>(r.world_points.numel()) == 3 * hw_,
                  "depth map of frame ", r.frame_index, " has shape ", shape_str(r.depth.shape()), ", expected [", H, ", ", W, "]");
    r.pose_enc.check_shape({9}, "pose_enc");
    io::ExportFrame x;
    x.index = r.frame_index;
    x.timestamp = f.timestamp;
    x.timestamp_unit = f.timestamp_unit;
    x.source = f.name;
    x.keyframe = r.is_keyframe;
    x.scale_frame = r.frame_type == FrameType::Scale;  // windowed: a scale frame of its window
    x.image = std::span<const float>(f.image.f32(), 3 * hw_);
    x.pose_enc = std::span<const float>(r.pose_enc.f32(), 9);
    x.c2w = to_rigid_transform(r.extrinsic_c2w, "extrinsic_c2w");
    x.w2c = to_rigid_transform(r.extrinsic, "extrinsic");
    x.intrinsics = to_mat33(r.intrinsic, "intrinsic");
    x.depth = std::span<const float>(r.depth.f32(), hw_);
    if (!r.depth_conf.empty()) x.depth_conf = std::span<const float>(r.depth_conf.f32(), hw_);
    x.world_points = std::span<const float>(r.world_points.f32(), 3 * hw_);
    x.content = f.content;
    x.placement = f.placement;
    exports_.frame(x);
    RunTally& tally = r_.tally;
    r_.warnings.add_frame(r.frame_index, check);  // after the frame is written (a frame taken back has none)
    if (!check.geometry_valid) ++tally.frames_without_geometry;
    if (tally.frames_done == 0) tally.first_result_seconds = std::chrono::duration<double>(Clock::now() - t_model_).count();
    ++tally.frames_done;
    r_.live.set_frames(tally.frames_done);
    if (r.is_keyframe) ++tally.keyframes;
    tally.frame_types.push_back(static_cast<int>(r.frame_type));
    r_.progress.update(tally.frames_done, job.computed, r, job.cache_bytes);
  }

  // The preprocessed model input of a decoded frame (which it drops: only the preprocessed one is kept).
  PendingFrame prepare(io::SourceFrame& frame, int64_t index) const {
    Tensor image = [&] {
      try {
        return io::preprocess_image(frame.image, pre_, input_.canvas);
      } catch (const Error& e) {
        throw Error("frame " + frame.name + ": " + e.what());
      }
    }();
    const io::FramePlacement placed = io::place_on_frame({frame.image.width, frame.image.height}, pre_, input_.canvas);
    frame.image = {};
    return PendingFrame{index,           frame.timestamp, frame.timestamp_unit, frame.name,
                        std::move(image), placed.content,  placed.source,        frame.corrupt};
  }

  // Results to the writer, each with the frame it belongs to (results come in push order).
  void deliver(std::vector<FrameResult>&& results) {
    // On the CPU the pool's pages become resident as frames are written: the bytes in use. A GPU
    // holds the whole pool from the start.
    const CacheStats cache = session_.stats().cache;
    const int64_t cache_bytes = session_.options().device == Device::Cuda ? cache.bytes_reserved : cache.bytes_used;
    computed_ += static_cast<int64_t>(results.size());
    for (FrameResult& r : results) {
      LINGBOT_CHECK(!pending_.empty() && pending_.front().index == r.frame_index, "internal: result for frame ",
                    r.frame_index, " does not match the frames pushed");
      WriteJob job{std::move(r), std::move(pending_.front()), cache_bytes, computed_};
      pending_.pop_front();
      if (!writer_) {
        write_result(job);
      } else if (!to_writer_.push(std::move(job))) {
        writer_->join();
        writer_->rethrow();  // the writer's error ends the run
        throw Error("internal: the writer stopped without an error");
      }
    }
  }

  // The scale phase runs its frames together and can take minutes on a CPU: say so before it.
  static void announce_scale_phase(int64_t frames) {
    std::printf("scale phase: frames 0-%lld together, no result until it ends\n", static_cast<long long>(frames - 1));
    std::fflush(stdout);
  }

  void run_model(PendingFrame&& f) {
    RunTally& tally = r_.tally;
    if (!a_.export_preprocessed.empty()) {  // here, not in the reader: only frames the model gets
      io::write_png_rgb8(fs::path(a_.export_preprocessed) / io::frame_file_name(f.index, ".png"),
                         io::rgb8_from_chw(std::span<const float>(f.image.f32(), static_cast<size_t>(f.image.numel())),
                                           static_cast<int>(f.image.dim(2)), static_cast<int>(f.image.dim(1))));
    }
    if (tally.pushed == 0 && scale_phase_frames_ > 1) {
      std::printf("scale phase: frames 0-%lld are encoded as they are read, then run together\n",
                  static_cast<long long>(scale_phase_frames_ - 1));
      std::fflush(stdout);
      r_.progress.begin_scale_phase();
    }
    if (tally.pushed + 1 == scale_frames_) announce_scale_phase(tally.pushed + 1);
    // Here, not when decoded: a frame the reader decoded ahead and the model never got is no damage of the run.
    if (f.corrupt.any()) r_.image_damage.add_damaged_image(f.index, f.name, f.corrupt);
    const auto t0 = Clock::now();
    std::vector<FrameResult> results;
    try {
      results = session_.push_frame(f.image);
    } catch (const Stopped&) {
      tally.infer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();  // the model's time all the same
      ++tally.pushed;  // given to the model, no result: counted in frames_without_result
      return;          // Ctrl-C / SIGTERM ended the step: sigint_.requested() is set, the loops stop after this
    }
    tally.infer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (tally.pushed + 1 < scale_phase_frames_) r_.progress.scale_frame_encoded(tally.pushed + 1, scale_phase_frames_);
    if (a_.debug_frame_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a_.debug_frame_delay_ms));
    pending_.push_back(std::move(f));
    ++tally.pushed;
    deliver(std::move(results));
  }

  void start_writer() {
    writer_.emplace([this] {
      try {
        while (std::optional<WriteJob> job = to_writer_.pop()) write_result(*job);
      } catch (...) {
        to_writer_.close();  // the model thread's next hand-over fails and it stops
        throw;
      }
    });
  }

  void read_ahead_loop(io::SourceFrame first) {
    reader_.emplace([this, frame = std::move(first)]() mutable {
      struct CloseAtEnd {
        BoundedQueue<PendingFrame>& q;
        ~CloseAtEnd() { q.close(); }
      } close_at_end{to_model_};
      int64_t index = 0;
      bool have = true;
      while (have && !stop_reading_) {
        if (!to_model_.push(prepare(frame, index++))) break;
        have = input_.next(&frame);
      }
    });
    while (std::optional<PendingFrame> f = to_model_.pop()) {
      run_model(std::move(*f));
      if (sigint_.requested()) break;
    }
    stop_reading_ = true;
    to_model_.close();
    reader_->join();
    // A decoding error ends the run after the frames before it (after Ctrl-C it belongs to a
    // frame the model would not have read).
    if (!sigint_.requested()) reader_->rethrow();
  }

  void in_turn_loop(io::SourceFrame first) {
    io::SourceFrame frame = std::move(first);
    bool have = true;
    while (have) {
      run_model(prepare(frame, r_.tally.pushed));
      if (sigint_.requested()) break;
      have = input_.next(&frame);
    }
  }

  // The end of the input: the session's last results (a short stream's scale phase runs here), or
  // after a stop signal the results it computed and held back (windowed: the overlap's tail).
  void finish_stream() {
    RunTally& tally = r_.tally;
    bool stopped = sigint_.requested();
    if (!stopped) {
      const auto t0 = Clock::now();
      try {
        if (tally.pushed > 0 && tally.pushed < scale_frames_) announce_scale_phase(tally.pushed);  // a short stream's
        std::vector<FrameResult> results = session_.finish();
        tally.infer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        deliver(std::move(results));
      } catch (const Stopped&) {
        tally.infer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();  // the model's time all the same
        stopped = true;  // a short stream's scale phase, stopped by Ctrl-C / SIGTERM
      }
    }
    if (stopped) {
      tally.status = RunStatus::Interrupted;
      tally.stop_signal = sigint_.signal();
      deliver(session_.finish_early());  // windowed: the computed tail held back for the overlap
    }
  }

  // Ends the stages: the reader at once; the writer after the frames already handed to it.
  void stop_stages() {
    stop_reading_ = true;
    to_model_.close();
    if (reader_) reader_->join();
    to_writer_.close();
    if (writer_) writer_->join();
  }

  const RunArgs& a_;
  Input& input_;
  const PreprocessOptions& pre_;
  SequenceRunner& session_;
  io::ExportSet& exports_;
  LoopReports r_;
  const StopSignalGuard& sigint_;
  const Clock::time_point t_model_;
  const size_t hw_;  // pixels of a model input
  const int64_t scale_frames_;        // the session's (0 windowed: each window runs its own)
  const int64_t scale_phase_frames_;  // the frames of the first scale phase
  std::deque<PendingFrame> pending_;  // pushed, no result yet
  int64_t computed_ = 0;              // results the model returned so far
  BoundedQueue<PendingFrame> to_model_{2};
  BoundedQueue<WriteJob> to_writer_{4};
  std::atomic<bool> stop_reading_{false};
  std::optional<StageThread> reader_, writer_;  // last: joined (stop_stages) before the rest goes
};

int run_command(const RunArgs& a) {
  const auto t_start = Clock::now();
  const RunSettings settings = resolve_settings(a);
  const std::vector<std::string>& export_names = settings.export_names;
  const KVBackend backend = settings.kv_backend;
  const Device device = settings.device;
  const DType kv_dtype = settings.kv_dtype;
  const WeightsDtypeForDevice& weights = settings.weights;
  const PreprocessOptions& pre = settings.pre;
  const int patch = pre.patch_size;

  // From here on SIGINT / SIGTERM stop the run cleanly: while a live source is silent before its first
  // frame (its reader checks the flag), while the weights load, and after each frame of the loop.
  // (stop_signals.h: SIGHUP too, SIGPIPE ignored; a second signal terminates at once).
  StopSignalGuard sigint("no summary.json; the files written so far stay valid");
  const auto interrupted_before_any_frame = [&] {
    std::fprintf(stderr, "interrupted before the first frame (%s): nothing was written\n",
                 stop_signal_words(sigint.signal()));
    return exit_code_of_signal(sigint.signal());
  };
  Input input = [&] {
    try {
      return open_input(a, pre, [&sigint] { return sigint.requested(); });
    } catch (const Error&) {
      if (sigint.requested()) return Input{};  // the interrupt aborted the open
      throw;
    }
  }();
  if (sigint.requested()) return interrupted_before_any_frame();
  LINGBOT_CHECK(input.canvas.width >= patch && input.canvas.height >= patch, "preprocessed frames would be ",
                input.canvas.width, "x", input.canvas.height, " pixels, smaller than one ", patch,
                "-pixel patch: use a larger --image-size");
  // The first frame is decoded before anything is written: an unreadable input fails here.
  io::SourceFrame first;
  const bool have_first = input.next(&first);
  if (!have_first && sigint.requested()) return interrupted_before_any_frame();
  LINGBOT_CHECK(have_first, "no frames selected from ", input.path.empty() ? std::string("the input") : input.path,
                " (check --first-k, --stride, --fps)");

  const ModeChoice mode = choose_mode(a.modes, input.count ? input.count : input.estimated);
  const int keyframe_interval = mode.keyframe_interval;
  if (mode.keyframe_rule.rfind("automatic", 0) == 0 && keyframe_interval > 1)
    std::printf("keyframe interval %d selected automatically (%lld frames > %lld)\n", keyframe_interval,
                static_cast<long long>(*(input.count ? input.count : input.estimated)),
                static_cast<long long>(kAutoKeyframeFrames));

  const SpecialFramesBound special = resolve_max_special_frames(a, input.live != nullptr, mode.windowed, backend);
  const int64_t max_special_frames = special.frames;
  if (special.rule == SpecialFramesBound::kAutomaticLive)
    std::printf("live input: --max-special-frames %lld (memory and time per frame stay flat however long the stream "
                "runs; --max-special-frames 0 keeps every frame's special tokens, as upstream)\n",
                static_cast<long long>(max_special_frames));

  SessionOptions so;  // the stop flag and the progress callback are added below
  so.device = device;
  so.kv_backend = backend;
  so.kv_dtype = kv_dtype;
  so.scale_frames = a.scale_frames;
  so.kv_window = settings.kv_window;
  so.max_special_frames = max_special_frames;
  so.camera_iterations = a.camera_iterations;
  so.threads = a.threads;
  so.keep_features = false;
  so.camera_head = true;
  so.depth_head = true;
  so.keyframe_policy = mode.policy;
  so.keyframe_interval = mode.keyframe_interval;
  check_run_memory(settings, input, so, mode);

  const auto t_model = Clock::now();
  std::shared_ptr<const Model> model;
  ModelLoadOptions mo;
  mo.weights_dtype = weights.dtype;
  if (a.demo) {
    std::printf("demo: built-in model with RANDOM weights and generated frames.\n"
                "demo: the poses, depth and points it writes are MEANINGLESS; this only shows the pipeline works.\n");
    model = make_demo_model(kDemoWeightSeed, mo);
  } else {
    // The released checkpoint takes tens of seconds to load on a CPU: say so before, also into a pipe.
    std::error_code size_error;
    const auto bytes = fs::file_size(a.model, size_error);
    std::printf("model: loading %s%s ...\n", a.model.c_str(),
                size_error ? "" : (" (" + format_bytes(static_cast<int64_t>(bytes)) + ")").c_str());
    std::fflush(stdout);
    model = Model::load(a.model, settings.overrides, mo);
  }
  const double model_seconds = std::chrono::duration<double>(Clock::now() - t_model).count();
  LINGBOT_CHECK(model->patch_size() == patch, "internal: patch size ", model->patch_size(), " differs from the index's ", patch);

  so.stop = sigint.flag();
  const bool bar = a.progress == "bar" || (a.progress == "auto" && ::isatty(STDERR_FILENO));
  Progress progress(bar, input.count ? input.count : input.estimated);
  so.step_progress = [&progress](const StepProgress& p) { progress.step(p); };
  SequenceRunner session(model, so, mode.windowed ? std::optional(mode.window) : std::nullopt);
  // A stop while the weights loaded (tens of seconds for the released checkpoint) ends the run here,
  // before exports.begin() below replaces an earlier run's outputs.
  if (sigint.requested()) return interrupted_before_any_frame();

  const fs::path out(a.out);
  // --serve binds before anything is written, so a busy port leaves no half-made output folder.
  LiveRunStatus live;
  std::optional<ViewerServer> viewer_server;
  if (a.serve_port >= 0) {
    viewer_server.emplace(out, [&live] { return live.json(); });
    viewer_server->start(kDefaultViewerHost, a.serve_port, "--serve PORT");
  }
  // The exporters clean their own files (io::ExportSet::begin), so the folder never mixes two runs.
  io::ensure_writable_dir(out, "output folder");
  const io::OutputLock out_lock(out);  // held to the end: no second run mixes its files in (io/output_lock.h)
  if (viewer_server)  // announced once the folder is this run's (a locked folder ends the run before)
    std::printf("viewer: %s  (follows the run; Ctrl-C stops the run, then the viewer)\n", viewer_server->url().c_str());
  if (!a.export_preprocessed.empty()) io::ensure_writable_dir(a.export_preprocessed, "--export-preprocessed folder");
  const int H = input.canvas.height, W = input.canvas.width;
  int64_t overlap_frames = 0;  // windowed: --overlap-size or --overlap-keyframes resolved
  if (mode.windowed) {
    SessionOptions with_policy = so;
    with_policy.keyframe_policy = mode.policy;
    overlap_frames = windowed_overlap(mode.window, with_policy);
  }
  print_run_banner(a, settings, input, mode, *model, model_seconds, overlap_frames, session.device_description(), out);

  const json options = options_json(a, settings, input, mode, special, overlap_frames, model->weights_dtype());
  const json meta = {{"image_width", W},
                     {"image_height", H},
                     {"model", a.demo ? "built-in demo (random weights)" : a.model},
                     {"demo", a.demo}};

  json summary = {{"format", "lingbot-map run summary"},
                  {"version", 1},
                  {"demo", a.demo},
                  {"input", {{"kind", input.kind},
                             {"path", input.path},
                             // video: the stream's rate and the decoded frames kept (1 in sample_interval)
                             {"source_fps", input.sampling ? json(input.sampling->source_fps) : json()},
                             {"sample_interval", input.sampling ? json(input.sampling->sample_interval) : json()}}},
                  {"model", a.demo ? json("built-in demo (random weights)") : json(a.model)},
                  {"image_width", W},
                  {"image_height", H},
                  {"options", options}};
  if (a.demo) summary["warning"] = "random-weight demo model: the geometry is meaningless";
  RunWarnings warnings;
  RunTally tally;
  progress.restart_clock();
  std::vector<std::unique_ptr<io::Exporter>> exporters;
  for (const std::string& name : export_names) exporters.push_back(io::make_exporter(name));
  io::ExportSet exports(std::move(exporters));
  {
    io::ExportRun run;
    run.out_dir = out;
    run.width = W;
    run.height = H;
    run.scale_frames = session.options().scale_frames;
    run.points = {static_cast<float>(a.conf_threshold), a.downsample};
    run.meta = meta;
    exports.begin(run, io::StaleOutputs::EveryExport);  // also removes an earlier run's summary.json
  }
  if (!a.export_preprocessed.empty()) {  // an earlier run's frames beyond this run's would pass for its own
    const size_t removed = io::remove_files_in(
        a.export_preprocessed, [](const std::string& n) { return io::is_frame_file_name(n, ".png"); });
    if (removed > 0)
      std::printf("notice: --export-preprocessed %s: %zu frame PNG(s) of an earlier run removed\n",
                  a.export_preprocessed.c_str(), removed);
  }
  io::StreamDamage image_damage;
  FrameLoop(a, input, pre, session, exports, {warnings, tally, progress, live, image_damage}, sigint, t_model)
      .run(std::move(first));
  // Every export is finalised before the summary, whatever the status.
  try {
    exports.finish();
  } catch (const std::exception& e) {
    if (tally.status != RunStatus::Failed) tally.error = one_line(error_text(e));
    tally.status = RunStatus::Failed;
  }
  const json export_report = exports.report();
  const std::optional<int64_t> points = points_kept(export_report);
  for (const auto& [name, rep] : export_report.items())
    if (rep.contains("note")) std::printf("%s: %s\n", name.c_str(), rep["note"].get<std::string>().c_str());
  // Empty point clouds are valid files that some tools refuse to open ("number of vertex <= 0"): say why.
  if (points && *points == 0 && tally.frames_done > tally.frames_without_geometry)
    std::printf("notice: no point passed --conf-threshold %g: the point clouds are empty (a lower threshold keeps "
                "points)\n", a.conf_threshold);

  // Damage found in the video (complete when the stream was read to its end), or in the folder's frames.
  const io::StreamDamage* damage = input.damage() ? input.damage() : &image_damage;
  if (damage && damage->any()) {
    warnings.add_damage(*damage);
    if (tally.status == RunStatus::Completed && !a.allow_damaged) tally.status = RunStatus::Damaged;
  }

  const double total_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  const SessionStats stats = session.stats();
  summary["status"] = run_status_name(tally.status);
  summary["interrupted"] = tally.status == RunStatus::Interrupted;
  if (tally.stop_signal != 0) summary["signal"] = stop_signal_name(tally.stop_signal);
  if (!tally.error.empty()) summary["error"] = tally.error;
  if (session.windowed()) {
    std::vector<int64_t> unaligned;  // a window begun but stopped before its first row has nothing to align
    for (const WindowInfo& w : session.windows())
      if (w.index > 0 && !w.aligned && w.end != w.start) unaligned.push_back(w.index);
    warnings.add_unaligned_windows(unaligned, overlap_frames);
  }
  summary["warnings"] = warnings.list();
  summary["frames_without_geometry"] = tally.frames_without_geometry;
  summary["frames"] = tally.frames_done;
  summary["frames_pushed"] = tally.pushed;
  summary["frames_without_result"] = tally.pushed - tally.frames_done;  // pending scale frames, a stopped step's frames
  summary["keyframes"] = tally.keyframes;
  summary["frame_type"] = tally.frame_types;
  summary["frame_type_legend"] = "per frame: 0 scale frame, 1 keyframe (stored), 2 non-keyframe (used, not stored)";
  if (session.windowed()) {
    summary["windows"] = windows_json(session.windows());
    summary["windows_note"] = "frames [start, end) of each window; window w is mapped into window 0's frame by "
                              "x -> scale * R x + t with transform = [[R, t], [0, 0, 0, 1]] (scale not in it)";
  }
  summary["points"] = points ? json(*points) : json();  // null: no export keeps points
  summary["exports"] = export_report;
  summary["seconds"] = {{"total", total_seconds},
                        {"model_load", model_seconds},
                        {"first_frame", tally.frames_done > 0 ? json(tally.first_result_seconds) : json()},  // null: no frame
                        {"inference", tally.infer_seconds},
                        {"per_frame", tally.frames_done > 0 ? json(tally.infer_seconds / static_cast<double>(tally.frames_done)) : json()}};
  summary["peak_rss_bytes"] = peak_rss_bytes();
  // Device memory of --device cuda (SessionStats); null on the CPU, whose memory is peak_rss_bytes.
  summary["device_peak_bytes"] = stats.device_peak_bytes ? json(*stats.device_peak_bytes) : json();
  summary["device_kv_cache_bytes"] = stats.device_kv_cache_bytes ? json(*stats.device_kv_cache_bytes) : json();
  summary["blas"] = kernels::blas_description();
  summary["cache"] = cache_json(stats);
  if (input.live) {
    input.live->stop();  // the decoder may still be reading an endless source
    const io::LiveStats ls = input.live->stats();
    summary["live"] = {{"frames_decoded", ls.decoded}, {"frames_processed", ls.delivered}, {"frames_dropped", ls.dropped}};
    std::printf("live: %s decoded, %lld processed, %lld dropped%s\n", count_of(ls.decoded, "frame").c_str(),
                static_cast<long long>(ls.delivered), static_cast<long long>(ls.dropped),
                ls.dropped > 0 ? " (newest frame first: the engine was slower than the source)" : "");
  }
  // With a full disk even the summary may not fit: the run's own error stays the message.
  std::string summary_error;
  try {
    io::write_json_file(out / "summary.json", summary);
  } catch (const Error& e) {
    summary_error = e.what();
  }
  live.finish(run_status_name(tally.status), tally.error);
  // The report comes first; --serve then keeps serving until Ctrl-C, and the exit code (or the
  // error, which main prints) follows. Not after SIGTERM or SIGHUP: a service manager (or the closed
  // terminal) sends it once and means the process, not only the run.
  const auto serve_until_stopped = [&] {
    if (!viewer_server || (tally.stop_signal != 0 && tally.stop_signal != SIGINT)) return;
    std::printf("viewer: run %s; still serving %s until Ctrl-C\n", run_status_name(tally.status), viewer_server->url().c_str());
    std::fflush(stdout);
    wait_for_stop_signal();
  };
  if (tally.status == RunStatus::Failed || !summary_error.empty()) {
    serve_until_stopped();
    if (tally.status == RunStatus::Failed) throw Error(tally.error + (summary_error.empty() ? "" : " (and " + summary_error + ")"));
    throw Error(summary_error);
  }
  print_run_report(tally, points, model_seconds, total_seconds, stats.device_peak_bytes, a.demo, warnings.count());
  std::printf("wrote %s\n", (out / "summary.json").c_str());
  std::fflush(stdout);
  if (tally.status == RunStatus::Damaged)
    std::fprintf(stderr, "error: %s. Pass --allow-damaged to accept such input with exit code 0\n",
                 io::damaged_input_message(input.kind == "images" ? io::DamagedInput::ImageFolder : io::DamagedInput::Video,
                                           *damage, "processed and written")
                     .c_str());
  serve_until_stopped();
  if (tally.status == RunStatus::Damaged) return kExitDamagedInput;
  if (tally.status == RunStatus::Interrupted) return exit_code_of_signal(tally.stop_signal);
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run",
      "Reconstruct a sequence: image folder or video -> camera poses, depth maps and a point cloud.\n"
      "Frames stream through the model one at a time (--mode streaming, or --mode windowed: overlapping\n"
      "windows aligned to each other, for long sequences) and every frame is written as soon as it is\n"
      "final. Outputs in --out, chosen with --export (default\n"
      "poses,tum,depth,ply,depth-preview,viewer; 'all' = every one):\n"
      "  poses          poses.json: per frame index, timestamp, keyframe, source, c2w 4x4, w2c 3x4,\n"
      "                 intrinsics 3x3 (OpenCV camera axes: x right, y down, z forward; pixels of the\n"
      "                 preprocessed image, principal point (W/2, H/2) at integer pixel coordinates)\n"
      "  tum            trajectory.tum: TUM RGB-D lines 'timestamp tx ty tz qx qy qz qw' (camera-to-world)\n"
      "  depth          depth/NNNNNN.png 16-bit depth, value * 0.001 = depth (0 = invalid); NNNNNN.npy\n"
      "                 float32 [H, W]; NNNNNN_conf.png (value * 0.01) and NNNNNN_conf.npy: confidence\n"
      "  ply            points.ply: binary coloured point cloud: points with confidence > --conf-threshold,\n"
      "                 every --downsample-th one, coloured from the preprocessed frame\n"
      "  depth-preview  depth_preview/NNNNNN.png: colourised depth (Turbo, near = red, invalid = black)\n"
      "  npz            predictions/frame_NNNNNN.npz + predictions/meta.npz (upstream batch_demo.py layout)\n"
      "                 and, up to 300 frames, predictions.npz (upstream demo_render/demo.py --save_predictions keys)\n"
      "  colmap         colmap/{cameras,images,points3D}.txt: COLMAP text model (principal point +0.5),\n"
      "                 and colmap/images/NNNNNN.png, the model inputs its cameras belong to\n"
      "  glb            scene.glb: points (as points.ply, at most 2,000,000), keyframe frustums, trajectory\n"
      "  viewer         viewer/NNNNNN.bin: per-frame points, pose and frame image for 'view' / --serve\n"
      "  bss            bss/traj.txt (timestamp + 3x4 camera-to-world) and bss/intrinsics.txt\n"
      "                 (timestamp fx fy cx cy w h): upstream's benchmark format\n"
      "  summary.json   always, written last: status completed | damaged | interrupted | failed (with\n"
      "                 the error), warnings, frames, keyframes, frame_type per frame, windows (windowed:\n"
      "                 bounds, scale, transform), seconds per frame, peak memory, cache stats, options\n"
      "Ctrl-C, SIGTERM or SIGHUP ends the model step in progress at its next block (its frames give no\n"
      "result; the frames before it are kept), finalises the files and exits with code 130 (SIGTERM: 143,\n"
      "SIGHUP: 129); a second Ctrl-C (a second or more after the first) terminates at once (no\n"
      "summary.json; files stay valid). A standard output that goes away (| head) does not stop the\n"
      "run: it ends as usual, then exits 1 saying so.\n"
      "A damaged video (decode errors, lost frames, cut short) or a JPEG decoded with corrupt data exits\n"
      "with code 3 unless --allow-damaged.\n"
      "Non-finite model outputs: depth/confidence pixels that are NaN, inf or <= 0 are 0 in the PNGs\n"
      "and give no points (the .npy/.npz keep them); a frame whose camera is not finite is listed in\n"
      "poses.json with \"valid\": false and no matrices, and is left out of every geometric export.\n"
      "Earlier outputs of this command in --out are replaced. The checkpoint is upstream's\n"
      "lingbot-map-long.pt (project Robbyant/lingbot-map); --demo needs none.");
  auto a = std::make_shared<RunArgs>();
  define_run_options(cmd, a.get());
  cmd->callback([a] {
    int code = 0;
    try {
      a->renamed.resolve();
      std::replace(a->exports.begin(), a->exports.end(), '\n', ',');  // repeated --export options (run_options.cpp)
      // An option contradicting its old spelling, an unknown export: usage errors (exit 2).
      const PreprocessChoice pre = parse_choice("", [&] { return resolve_preprocess(a->modes, a->preprocess); });
      (void)parse_choice("--export", [&] { return io::parse_export_list(a->exports); });
      if (pre.alias_used)
        std::fprintf(stderr, "notice: --mode %s is deprecated, use --preprocess %s (--mode now selects streaming | "
                             "windowed)\n", pre.preprocess.c_str(), pre.preprocess.c_str());
      a->preprocess = pre.preprocess;
      a->modes.live = a->live;
      code = run_command(*a);
    } catch (const Error& e) {
      throw Error(one_line(e.what()));  // main prints it as the one "error: ..." line
    }
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace lingbot::cli
