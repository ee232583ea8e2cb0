#include "run_options.h"

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "io/file_util.h"
#include "lingbot/preprocess.h"
#include "lingbot/session.h"
#include "run_checks.h"
#include "viewer_server.h"

namespace lingbot::cli {

namespace fs = std::filesystem;

ConfigOverrides parse_sets(const std::vector<std::string>& sets) {
  ConfigOverrides o = config_overrides(sets);
  // Fields run sets from its own options (always, defaults included): a --set of them would be
  // silently overridden.
  for (const auto& [key, value] : o)
    for (const auto& [field, option] : {std::pair<const char*, const char*>{"camera.num_iterations", "--camera-iterations"},
                                        {"kv_cache.scale_frames", "--scale-frames"},
                                        {"kv_cache.sliding_window", "--kv-window"}})
      LINGBOT_CHECK(key != field, "--set ", key, ": run sets this field from ", option, "; use that option");
  return o;
}

namespace {

// Output locations that can never work, found before anything is written (a folder that cannot be
// created or written is found when it is created: nothing else exists yet then).
void check_output_paths(const RunArgs& a) {
  for (const auto& [option, path] : {std::pair<const char*, const std::string*>{"--out", &a.out},
                                     {"--export-preprocessed", &a.export_preprocessed}})
    if (!path->empty()) io::check_output_folder_path(*path, option);
  if (a.export_preprocessed.empty()) return;
  // Its NNNNNN.png files would replace or join files of the same names: the input frames (and a next
  // run would read them as frames), or the outputs of an export.
  const fs::path pre = fs::weakly_canonical(a.export_preprocessed), out = fs::weakly_canonical(a.out);
  const auto within = [](const fs::path& p, const fs::path& dir) {  // p is dir or below it
    const fs::path rel = p.lexically_relative(dir);
    return !rel.empty() && *rel.begin() != "..";
  };
  LINGBOT_CHECK(pre != out, "--export-preprocessed must not be the --out folder");
  for (const io::ExportKind& kind : io::export_kinds())
    if (!kind.folder.empty())
      LINGBOT_CHECK(!within(pre, out / kind.folder), "--export-preprocessed ", a.export_preprocessed, " is inside --out's ",
                    kind.folder, "/ folder, where an export writes: choose another folder");
  if (!a.images.empty()) {
    const fs::path in = fs::weakly_canonical(a.images);
    LINGBOT_CHECK(!within(pre, in) && !within(in, pre), "--export-preprocessed ", a.export_preprocessed,
                  " overlaps the --images folder ", a.images,
                  " (the PNGs would replace or join the input frames): choose another folder");
  }
}

// Sizes beyond which no run can be useful (run_checks.h); memory is checked later, from the model.
void check_upper_bounds(const RunArgs& a) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> bounds[] = {
      {"--scale-frames", {a.scale_frames, kMaxScaleFrames}}, {"--kv-window", {a.kv_window.value_or(kDefaultKvWindow), kMaxKvWindow}},
      {"--camera-iterations", {a.camera_iterations, kMaxCameraIterations}}, {"--threads", {a.threads, kMaxThreads}},
      {"--downsample", {a.downsample, kMaxDownsample}}};
  for (const auto& [option, vb] : bounds)
    LINGBOT_CHECK(vb.first <= vb.second, option, " must be at most ", vb.second, ", got ", vb.first);
}

}  // namespace

void check_run_args(const RunArgs& a) {
  const int sources = (a.images.empty() ? 0 : 1) + (a.video.empty() ? 0 : 1);
  if (a.demo) {
    usage_check(sources == 0 && a.model.empty(),
                "--demo uses generated frames and a built-in model; do not combine it with --images, --video or --model");
    LINGBOT_CHECK(a.demo_frames >= 1, "--demo-frames must be >= 1, got ", a.demo_frames);
  } else {
    usage_check(sources == 1, sources == 0 ? "no input: give --images DIR or --video FILE (or --demo to try the built-in example)"
                                           : "give either --images or --video, not both");
    usage_check(!a.model.empty(),
                  "no --model given: download the LingBot-Map checkpoint lingbot-map-long.pt from the "
                  "Robbyant/lingbot-map project release and pass it with --model PATH "
                  "(or run with --demo to try the pipeline with a built-in random-weight model)");
  }
  if (a.image_size)
    LINGBOT_CHECK(*a.image_size >= 1 && *a.image_size <= kMaxImageSize, "--image-size must be in 1..", kMaxImageSize,
                  ", got ", *a.image_size);
  LINGBOT_CHECK(std::isfinite(a.fps), "--fps must be a finite number, got ", a.fps);
  check_mode_args(a.modes, a.scale_frames);
  usage_check(!a.live || !a.video.empty(),
                "--live needs --video SOURCE (a camera /dev/video0, rtsp://..., http://..., pipe:0 or a file)");
  LINGBOT_CHECK(a.debug_frame_delay_ms >= 0, "--debug-frame-delay-ms must be >= 0, got ", a.debug_frame_delay_ms);
  LINGBOT_CHECK(a.first_k >= 0, "--first-k must be >= 0, got ", a.first_k);
  LINGBOT_CHECK(a.stride >= 1, "--stride must be >= 1, got ", a.stride);
  LINGBOT_CHECK(a.scale_frames >= 1, "--scale-frames must be >= 1, got ", a.scale_frames);
  LINGBOT_CHECK(a.kv_window.value_or(kDefaultKvWindow) >= 1, "--kv-window must be >= 1, got ", *a.kv_window);
  LINGBOT_CHECK(a.max_special_frames.value_or(0) >= 0 && a.max_special_frames.value_or(0) <= kMaxSpecialFrames,
                "--max-special-frames must be in 0..", kMaxSpecialFrames, " (0 = keep all), got ", a.max_special_frames.value_or(0));
  LINGBOT_CHECK(a.camera_iterations >= 1, "--camera-iterations must be >= 1, got ", a.camera_iterations);
  LINGBOT_CHECK(a.threads >= 0, "--threads must be >= 0, got ", a.threads);
  LINGBOT_CHECK(std::isfinite(a.conf_threshold), "--conf-threshold must be a finite number, got ", a.conf_threshold);
  LINGBOT_CHECK(a.downsample >= 1, "--downsample must be >= 1, got ", a.downsample);
  check_upper_bounds(a);
  LINGBOT_CHECK(a.progress == "auto" || a.progress == "bar" || a.progress == "lines",
                "--progress must be auto, bar or lines, got '", a.progress, "'");
  LINGBOT_CHECK(!a.out.empty(), "--out must not be empty");
  check_output_paths(a);
  LINGBOT_CHECK(a.demo_pace >= 0 && a.demo_pace <= 60, "--demo-pace must be 0..60 seconds, got ", a.demo_pace);
  usage_check(a.demo || a.demo_pace == 0, "--demo-pace paces the generated frames of --demo only");
}

void define_run_options(CLI::App* cmd, RunArgs* a) {
  cmd->add_option("--images", a->images, "folder of frames (.jpg .jpeg .png .bmp, sorted by name)");
  CLI::Option* video_option = cmd->add_option("--video", a->video,
                  "video file, or any FFmpeg input: a camera /dev/video0 (V4L2), rtsp://..., http://..., pipe:0 "
                  "(stdin); decoded with FFmpeg's libraries, frame by frame");
  cmd->add_flag("--live", a->live,
                "--video is a live source: unknown length, decoded on its own thread keeping only the newest frame "
                "(frames the engine is too slow for are dropped and counted in the log and summary.json); ends "
                "at the end of the stream or on Ctrl-C");
  cmd->add_option("--debug-frame-delay-ms", a->debug_frame_delay_ms,
                  "test hook: sleep this long after each frame (a deliberately slow engine)")
      ->group("");
  CLI::Option* demo_option = cmd->add_flag("--demo", a->demo,
                "run a built-in random-weight model on generated frames (no checkpoint needed; the "
                "geometry is meaningless)");
  cmd->add_option("--demo-frames", a->demo_frames, "number of generated frames for --demo")
      ->needs(demo_option)
      ->capture_default_str();
  cmd->add_option("--model", a->model, "checkpoint: upstream lingbot-map-long.pt, or safetensors from 'convert'");
  cmd->add_option("--out", a->out, "output folder (created if needed)")->required();
  cmd->add_option("--image-size", a->image_size,
                  "model input width in crop mode / longer side in pad mode, in pixels: a multiple of the patch "
                  "size, at most 4096 (default 518; 112 with --demo)");
  cmd->add_option("--preprocess", a->preprocess,
                  "preprocessing of upstream's image loader: crop (width := image size, centre-crop height) | "
                  "pad (longer side := image size, white padding to a square, which gives no points); default crop")
      ->check(one_of({"crop", "pad"}, "crop or pad"));
  cmd->add_option("--mode", a->modes.mode,
                  "streaming (frame by frame with the KV cache) | windowed (overlapping windows with a fresh cache "
                  "each, aligned by a similarity; for sequences beyond the ~320 stored frames the video RoPE was "
                  "trained on), as upstream demo.py. crop | pad are the deprecated spelling of --preprocess")
      ->check(one_of({"streaming", "windowed", "crop", "pad"},
                     "streaming or windowed (crop | pad: the deprecated spelling of --preprocess)"))
      ->capture_default_str();
  cmd->add_option("--fps", a->fps, "video: frames per second to sample (<= 0: every frame)")
      ->needs(video_option)  // a folder's frames are taken as they are (--stride, --first-k)
      ->check(finite_number())
      ->capture_default_str();
  // The demo's frames are generated as --demo-frames says: these would be ignored (yet recorded).
  cmd->add_option("--first-k", a->first_k, "use only the first K frames (after fps sampling); 0 = all")
      ->excludes(demo_option)
      ->capture_default_str();
  cmd->add_option("--stride", a->stride, "then use every N-th frame")->excludes(demo_option)->capture_default_str();
  cmd->add_flag("--rotate-cw90", a->rotate_cw90, "rotate frames 90 degrees clockwise before preprocessing")
      ->excludes(demo_option);
  CLI::Option* scale_frames = cmd->add_option("--scale-frames", a->scale_frames,
                  "frames processed together first (bidirectional attention), pinned in the KV cache")
      ->capture_default_str();
  a->renamed.add(cmd, scale_frames, "--scale-frames", "--num-scale-frames", a->scale_frames);
  cmd->add_option("--kv-window", a->kv_window,
                  "sliding window of the KV cache, in stored frames (not with --kv-backend dense-full: it keeps every frame)")
      ->default_str(std::to_string(kDefaultKvWindow));
  cmd->add_option("--keyframe-interval", a->modes.keyframe_interval,
                  "which frames after the scale frames are stored in the KV cache: N = every N-th; auto = as "
                  "upstream, 1 up to 320 frames, else ceil(frames / 320) (video: from the estimated count; "
                  "windowed: 1; --live, streaming: flow; 0 means auto); flow = a frame is stored when the mean camera-motion flow "
                  "against the last stored frame exceeds --flow-threshold, or after --max-non-keyframe-gap frames")
      ->check(keyframe_interval_validator())
      ->capture_default_str();
  add_flow_keyframe_options(cmd, &a->modes);
  cmd->add_option("--window-size", a->modes.window_size,
                  "--mode windowed: stored frames per window, its scale frames included (default " +
                      std::to_string(kDefaultWindowSize) + "; a window spans scale-frames + (window-size - "
                      "scale-frames) x keyframe-interval frames, or until that many are stored with flow)");
  cmd->add_option("--overlap-size", a->modes.overlap_size,
                  "--mode windowed: frames shared by consecutive windows (default " +
                      std::to_string(kDefaultOverlapSize) + ")");
  cmd->add_option("--overlap-keyframes", a->modes.overlap_keyframes,
                  "--mode windowed: the overlap in keyframes instead: max(scale-frames, N x keyframe-interval) "
                  "frames");
  cmd->add_option("--max-special-frames", a->max_special_frames,
                  "bound the cost of long streams: keep the special tokens of only the newest N frames evicted from "
                  "the KV window (and a camera-head history of the scale frames + window + N); 0 = keep all, as upstream "
                  "(outputs move with a bound: docs/long-streams.md); default 0, with --live (streaming mode) " +
                      std::to_string(kLiveMaxSpecialFrames));
  cmd->add_option("--camera-iterations", a->camera_iterations, "camera-head refinement iterations")->capture_default_str();
  cmd->add_option("--device", a->device,
                  "where the model runs: cpu | cuda (a -DLINGBOT_CUDA=ON build and a GPU) | auto (cuda when "
                  "available, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  CLI::Option* kv_backend = cmd->add_option("--kv-backend", a->kv_backend,
                                             "KV cache backend: paged | dense | dense-full")
                                 ->check(one_of({"paged", "dense", "dense-full"}, "paged, dense or dense-full"))
                                 ->capture_default_str();
  a->renamed.add(cmd, kv_backend, "--kv-backend", "--attention", a->kv_backend);
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache storage dtype: f32 | f16 | bf16")
      ->check(one_of({"f32", "f16", "bf16"}, "f32, f16 or bf16"))
      ->capture_default_str();
  cmd->add_option("--weights-dtype", a->weights_dtype,
                  "storage dtype of the blocks' linear layers and the DPT convolutions: auto (cpu: bf16 where the CPU "
                  "has a native bf16 GEMM, else f32; cuda: bf16 on sm_80 and later, else f32) | f32 | f16 | bf16")
      ->check(one_of({"auto", "f32", "f16", "bf16"}, "auto, f32, f16 or bf16"))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "OpenMP threads (0 = all cores); results do not depend on it")->capture_default_str();
  cmd->add_option("--conf-threshold", a->conf_threshold,
                  "point clouds (points.ply, scene.glb, colmap, viewer) keep points with depth confidence above this")
      ->check(finite_number())
      ->capture_default_str();
  cmd->add_option("--downsample", a->downsample, "point clouds keep every N-th of the confident points")->capture_default_str();
  cmd->add_option("--set", a->sets,
                  "override a model configuration field, key=value (repeatable; keys as 'inspect' prints them)")
      ->check(key_value());
  cmd->add_option("--export-preprocessed", a->export_preprocessed,
                  "also write each preprocessed model input as DIR/NNNNNN.png (as demo.py --export_preprocessed)");
  cmd->add_option("--export", a->exports,
                  "comma list of outputs: poses, tum, depth, ply, depth-preview, viewer, npz, colmap, glb, bss, or "
                  "all; may be repeated (--export ply --export glb = --export ply,glb)")
      // Joined with newlines, which the run's callback turns into commas: CLI11's join(',') splits each
      // value at its commas and drops the empty items, so `ply,,glb` passed as `ply,glb`, and a lone `,`
      // left the option without a value to take the next argument (--out) as its own.
      ->multi_option_policy(CLI::MultiOptionPolicy::Join)
      ->capture_default_str();
  cmd->add_option("--serve", a->serve_port,
                  "also serve the viewer on 127.0.0.1:PORT (default 8080; 0 = any free port) while the run goes "
                  "on, and after it until Ctrl-C (see 'view')")
      ->expected(0, 1)
      ->check(CLI::Range(0, 65535))
      ->default_str(std::to_string(kDefaultViewerPort));
  cmd->add_option("--demo-pace", a->demo_pace,
                  "--demo only: wait this many seconds before each generated frame, to watch --serve follow a run")
      ->check(finite_number())
      ->capture_default_str();
  cmd->add_option("--progress", a->progress, "auto (bar on a terminal, else log lines) | bar | lines")
      ->check(one_of({"auto", "bar", "lines"}, "auto, bar or lines"))
      ->capture_default_str();
  cmd->add_option("--pipeline", a->pipeline,
                  "on: decode and preprocess the next frames and write the finished ones on their own threads while "
                  "the model runs (the host's work overlaps the model's; outputs are identical) | off: one thread, "
                  "in turn")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--allow-damaged", a->allow_damaged,
                "a damaged video (decode errors, lost frames, file cut short) or a JPEG with corrupt data still counts as completed "
                "(exit 0); the damage is listed in summary.json \"warnings\" either way");
}

}  // namespace lingbot::cli
