// `lingbot-map run --mode streaming|windowed` and the keyframe options: exact errors for inconsistent
// combinations (one "error:" line, exit 1, nothing written), the deprecated --mode crop|pad alias,
// and a windowed run whose summary.json states the windows and every frame's type.
#include <cmath>

#include "run_test_util.h"

namespace {

using namespace run_test;
using nlohmann::json;

const std::string kBase = "--images " + kTestdata + "/tiny/frames --model " + kTestdata +
                          "/tiny/weights.safetensors --image-size 112 --scale-frames 2 --kv-window 3 --threads 1";

std::string error_of(const std::string& args, const std::string& name) {
  const fs::path out = fresh_dir("modes_" + name) / "out";
  const Result r = run_cli("run " + kBase + " " + args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_FALSE(fs::exists(out)) << name;
  return r.err;
}


// An option that needs another one (docs/cli.md "Exit codes and errors": a usage error, exit 2).
std::string usage_error_of(const std::string& args, const std::string& name) {
  const fs::path out = fresh_dir("modes_" + name) / "out";
  const Result r = run_cli("run " + kBase + " " + args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_FALSE(fs::exists(out)) << name;
  const std::string usage = "Run 'lingbot-map run --help' for usage.\n";
  EXPECT_TRUE(r.err.size() > usage.size() && r.err.substr(r.err.size() - usage.size()) == usage) << r.err;
  return r.err.substr(0, r.err.size() > usage.size() ? r.err.size() - usage.size() : 0);
}

TEST(RunModes, InconsistentOptionsNameTheOption) {
  EXPECT_EQ(usage_error_of("--mode crop --preprocess pad", "alias_conflict"),
            "error: --mode crop (the deprecated spelling of --preprocess crop) contradicts --preprocess pad\n");
  EXPECT_EQ(usage_error_of("--mode pad --preprocess pad", "alias_twice"),  // was accepted, unlike every other pair
            "error: give --preprocess pad or its old spelling --mode pad, not both\n");
  EXPECT_EQ(usage_error_of("--flow-threshold 5", "flow_without_flow"),
            "error: --flow-threshold only applies to --keyframe-interval flow (got --keyframe-interval auto)\n");
  EXPECT_EQ(usage_error_of("--keyframe-interval 2 --max-non-keyframe-gap 4", "gap_without_flow"),
            "error: --max-non-keyframe-gap only applies to --keyframe-interval flow (got --keyframe-interval 2)\n");
  EXPECT_EQ(error_of("--keyframe-interval flow --flow-threshold 0", "flow_zero"),
            "error: --flow-threshold must be a number > 0 (pixels), got 0\n");
  EXPECT_EQ(error_of("--keyframe-interval flow --max-non-keyframe-gap 0", "gap_zero"),
            "error: --max-non-keyframe-gap must be >= 1, got 0\n");
  EXPECT_EQ(usage_error_of("--window-size 6", "window_in_streaming"), "error: --window-size only applies to --mode windowed\n");
  EXPECT_EQ(usage_error_of("--kv-backend dense-full --max-special-frames 4", "dense_full_bound"),
            "error: --max-special-frames does not apply to --kv-backend dense-full (it keeps every frame)\n");
  EXPECT_EQ(usage_error_of("--overlap-keyframes 2", "overlap_in_streaming"),
            "error: --overlap-keyframes only applies to --mode windowed\n");
  EXPECT_EQ(error_of("--mode windowed --window-size 2", "window_vs_scale"),
            "error: --window-size 2 must be larger than --scale-frames 2: a window stores its scale frames plus at "
            "least one keyframe\n");
  EXPECT_EQ(error_of("--mode windowed --window-size 6 --overlap-size 6", "overlap_ge_window"),
            "error: --overlap-size 6 must be smaller than a window (6 frames: --scale-frames 2 + (--window-size 6 - "
            "2) keyframes x --keyframe-interval 1)\n");
  EXPECT_EQ(error_of("--mode windowed --window-size 6", "default_overlap"),
            "error: the default overlap (--overlap-size 16) must be smaller than a window (6 frames: --scale-frames "
            "2 + (--window-size 6 - 2) keyframes x --keyframe-interval 1)\n");
  EXPECT_EQ(error_of("--mode windowed --window-size 3 --overlap-keyframes 2 --keyframe-interval 2", "overlap_keyframes"),
            "error: --overlap-keyframes 2 (= 4 frames) must be smaller than a window (4 frames: --scale-frames 2 + "
            "(--window-size 3 - 2) keyframes x --keyframe-interval 2)\n");
  EXPECT_EQ(error_of("--mode windowed --keyframe-interval flow --window-size 4 --overlap-size 3", "flow_window"),
            "error: --window-size 4 must be at least the overlap + --scale-frames (3 + 2) with --keyframe-interval "
            "flow: --overlap-size 3 would not fit in a window, and consecutive windows would not overlap by it\n");
  const Result both = run_cli("run " + kBase + " --mode windowed --window-size 6 --overlap-size 2 --overlap-keyframes 1 "
                              "--out " + (fresh_dir("modes_two_overlaps") / "out").string());
  EXPECT_EQ(both.exit_code, 2);  // a usage error
  EXPECT_EQ(both.err, "error: give --overlap-size or --overlap-keyframes, not both\n"
                      "Run 'lingbot-map run --help' for usage.\n");
}

TEST(RunModes, DeprecatedModeAliasStillSelectsThePreprocessing) {
  const fs::path out = fresh_dir("modes_alias") / "out";
  const Result r = run_cli("run " + kBase + " --first-k 3 --mode pad --progress lines --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "notice: --mode pad is deprecated, use --preprocess pad (--mode now selects streaming | windowed)\n");
  const json s = read_json(out / "summary.json");
  EXPECT_EQ(s.at("options").at("preprocess"), "pad");
  EXPECT_EQ(s.at("options").at("mode"), "streaming");
  EXPECT_EQ(s.at("image_width"), 112);
  EXPECT_EQ(s.at("image_height"), 112);  // padded to a square
}

// 10 frames, 2 scale frames, window of 4 stored frames, overlap 2: windows [0,4) [2,6) [4,8) [6,10);
// every frame written once, in order; frame types per stitched frame; window 0 is the reference.
TEST(RunModes, WindowedRunWritesWindowsAndFrameTypes) {
  const fs::path out = fresh_dir("modes_windowed") / "out";
  const Result r = run_cli("run " + kBase + " --mode windowed --window-size 4 --overlap-size 2 --progress lines --out " +
                           out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "windows: 4 stored frames each, overlap 2 frames")) << r.out;
  const json s = read_json(out / "summary.json");
  EXPECT_EQ(s.at("status"), "completed");
  EXPECT_EQ(s.at("warnings"), json::array());  // aligned windows: no windows_not_aligned warning
  EXPECT_EQ(s.at("frames"), 10);
  EXPECT_EQ(s.at("frame_type"), json({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
  const json& w = s.at("windows");
  ASSERT_EQ(w.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i].at("start"), 2 * i);
    EXPECT_EQ(w[i].at("end"), 2 * i + 4);
  }
  EXPECT_EQ(w[0].at("scale"), 1.0);
  EXPECT_EQ(w[0].at("transform"), json({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}));
  for (int i = 1; i < 4; ++i) {
    const double sc = w[i].at("scale").get<double>();
    EXPECT_GT(sc, 1e-3);
    EXPECT_LT(sc, 1e3);
    // The rotation block is orthonormal: row norms 1.
    for (int row = 0; row < 3; ++row) {
      double n = 0;
      for (int c = 0; c < 3; ++c) n += std::pow(w[i].at("transform")[row][c].get<double>(), 2);
      EXPECT_NEAR(n, 1.0, 1e-5);
    }
  }
  const json poses = read_json(out / "poses.json");
  ASSERT_EQ(poses.at("frames").size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(poses.at("frames")[i].at("index"), i);
  EXPECT_EQ(s.at("options").at("mode"), "windowed");
  EXPECT_EQ(s.at("options").at("window_size"), 4);
}

// A scale phase runs its frames in one step that can take minutes on a CPU: the bar shows its blocks
// and heads as they finish, for every window's scale phase; log lines do so only every 10 s of it.
TEST(RunModes, ProgressShowsWhereEachScalePhaseIs) {
  const fs::path out = fresh_dir("modes_scale_progress") / "out";
  const Result bar = run_cli("run " + kBase + " --mode windowed --window-size 4 --overlap-size 2 --export poses "
                             "--progress bar --out " + out.string());
  ASSERT_EQ(bar.exit_code, 0) << bar.err;
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  // The tiny model's 4 blocks, then the heads of the 2 scale frames, once per window (4 windows).
  EXPECT_EQ(count(bar.err, "\rscale phase: aggregator block 0/4, 0:0"), 4u) << bar.err;
  for (const char* step : {"\rscale phase: aggregator block 1/4, 0:0", "\rscale phase: aggregator block 4/4, 0:0",
                           "\rscale phase: heads, frame 1/2, 0:0", "\rscale phase: heads, frame 2/2, 0:0"})
    EXPECT_EQ(count(bar.err, step), 4u) << step << "\n" << bar.err;
  EXPECT_EQ(count(bar.err, "scale phase: heads, frame 3/"), 0u);  // streamed frames are one-frame steps
  EXPECT_TRUE(contains(bar.err, "] 10/10 frames")) << bar.err;  // the frames' bar still ends the run
  EXPECT_EQ(count(bar.err, "frame 1/2 encoded"), 0u) << bar.err;  // windowed: no scale frames before the steps

  // Streaming: each scale frame's push encodes it, before the step: the bar says so too.
  const Result encoded = run_cli("run --images " + kTestdata + "/tiny/frames --model " + kTestdata +
                                 "/tiny/weights.safetensors --image-size 112 --scale-frames 3 --kv-window 3 --threads 1 "
                                 "--first-k 4 --export poses --progress bar --out " + out.string());
  ASSERT_EQ(encoded.exit_code, 0) << encoded.err;
  for (const char* step : {"\rscale phase: frame 1/3 encoded, 0:0", "\rscale phase: frame 2/3 encoded, 0:0",
                           "\rscale phase: aggregator block 0/4, 0:0", "\rscale phase: heads, frame 3/3, 0:0"})
    EXPECT_EQ(count(encoded.err, step), 1u) << step << "\n" << encoded.err;

  // A known shorter input runs its scale phase over its frames: announced as such.
  const Result short_input = run_cli("run --images " + kTestdata + "/tiny/frames --model " + kTestdata +
                                     "/tiny/weights.safetensors --image-size 112 --scale-frames 8 --kv-window 3 "
                                     "--threads 1 --first-k 3 --export poses --progress lines --out " + out.string());
  ASSERT_EQ(short_input.exit_code, 0) << short_input.err;
  EXPECT_TRUE(contains(short_input.out, "scale phase: frames 0-2 are encoded as they are read, then run together\n"))
      << short_input.out;

  const Result lines = run_cli("run " + kBase + " --first-k 4 --export poses --progress lines --out " + out.string());
  ASSERT_EQ(lines.exit_code, 0) << lines.err;
  // Said at the first frame's push (each scale frame is encoded as it comes), then before the step.
  EXPECT_TRUE(contains(lines.out, "output: " + out.string() + "\nscale phase: frames 0-1 are encoded as they are read, "
                                  "then run together\nscale phase: frames 0-1 together, no result until it ends\n"))
      << lines.out;
  EXPECT_FALSE(contains(lines.out, "scale phase: aggregator")) << lines.out;  // a step of well under 10 s
  EXPECT_EQ(count(lines.err, "scale phase"), 0u) << lines.err;
}

// Overlap 0: windows share no frame, so nothing aligns them. The banner says so, every window past
// the first is "aligned": false with the identity, and one warning lists them (stderr + summary).
TEST(RunModes, WindowedRunWithoutOverlapWarnsThatWindowsAreNotAligned) {
  const fs::path out = fresh_dir("modes_windowed_no_overlap") / "out";
  const Result r = run_cli("run " + kBase + " --mode windowed --window-size 4 --overlap-size 0 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "windows: 4 stored frames each, overlap 0 frames (no shared frames: the windows are not "
                              "aligned, each keeps its own world frame)"))
      << r.out;
  EXPECT_EQ(r.err, "warning: windows 1, 2 not aligned to window 0 (--overlap-size 0: no shared frames); each keeps "
                   "its own world frame, so poses and points of different windows are not in one frame\n");
  const json s = read_json(out / "summary.json");
  EXPECT_EQ(s.at("status"), "completed");
  ASSERT_EQ(s.at("windows").size(), 3u);  // [0,4) [4,8) [8,10)
  EXPECT_EQ(s.at("windows")[0].at("aligned"), true);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(s.at("windows")[i].at("aligned"), false);
    EXPECT_EQ(s.at("windows")[i].at("start"), 4 * i);
    EXPECT_EQ(s.at("windows")[i].at("transform"), json({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}));
  }
  EXPECT_EQ(s.at("warnings"),
            json::parse(R"([{"kind": "windows_not_aligned", "windows": [1, 2], "reason": "no overlap"}])"));
}

// No overlap frame with a finite pose (here: a zero normalisation std makes every output non-finite):
// no similarity, so each window keeps its frame (identity, "aligned": false, never a NaN transform),
// and the warning says why.
TEST(RunModes, WindowedRunWithoutAFinitePoseInTheOverlapWarnsThatWindowsAreNotAligned) {
  const fs::path out = fresh_dir("modes_windowed_nan") / "out";
  const Result r = run_cli("run " + kBase + " --mode windowed --window-size 4 --overlap-size 2 --set image_norm.std=0,0,0 "
                           "--out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "warning: windows 1, 2, 3 not aligned to window 0 (no overlap frame has a finite pose in "
                              "both windows); each keeps its own world frame"))
      << r.err;
  const json s = read_json(out / "summary.json");
  ASSERT_EQ(s.at("windows").size(), 4u);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(s.at("windows")[i].at("aligned"), false);
    EXPECT_EQ(s.at("windows")[i].at("transform"), json({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}));
  }
  EXPECT_EQ(s.at("warnings").back(),
            json::parse(R"({"kind": "windows_not_aligned", "windows": [1, 2, 3], "reason": "no finite pose in the overlap"})"));
}

// A windowed run that fails on its input keeps every frame the model finished: the current window's
// tail, held back for the overlap with the next window, is written too (it was lost), and every
// window in summary.json has its end.
TEST(RunModes, WindowedRunThatFailsKeepsTheTailItComputed) {
  const fs::path dir = fresh_dir("modes_windowed_fail");
  fs::create_directories(dir / "frames");
  for (int i = 0; i < 10; ++i) {
    const std::string name = "00000" + std::to_string(i) + ".png";
    fs::copy_file(fs::path(kTestdata) / "tiny" / "frames" / name, dir / "frames" / name);
  }
  fs::resize_file(dir / "frames" / "000008.png", 100);  // frame 8 cannot be decoded
  const fs::path out = dir / "out";
  const Result r = run_cli("run --images " + (dir / "frames").string() + " --model " + kTestdata +
                           "/tiny/weights.safetensors --image-size 112 --scale-frames 2 --kv-window 3 --threads 1 "
                           "--mode windowed --window-size 4 --overlap-size 2 --out " + out.string());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot decode image " + (dir / "frames" / "000008.png").string())) << r.err;
  const json s = read_json(out / "summary.json");
  EXPECT_EQ(s.at("status"), "failed");
  EXPECT_EQ(s.at("frames"), 8);
  EXPECT_EQ(s.at("frames_without_result"), 0);
  const json poses = read_json(out / "poses.json");
  ASSERT_EQ(poses.at("frames").size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(poses.at("frames")[i].at("index"), i);
  // Windows of 4 frames overlapping by 2 over frames 0-7; the last one ends at the failed frame.
  ASSERT_EQ(s.at("windows").size(), 3u) << s.at("windows");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.at("windows")[i].at("start"), 2 * i) << s.at("windows")[i];
    EXPECT_EQ(s.at("windows")[i].at("end"), 2 * i + 4) << s.at("windows")[i];
  }
}

}  // namespace

// summary.json options: the flow parameters in effect (defaults resolved) with flow keyframes, null
// with interval keyframes (as keyframe_interval is null with flow).
TEST(RunModes, SummaryHasTheFlowParametersInEffect) {
  const fs::path dir = fresh_dir("modes_flow_summary");
  Result r = run_cli("run --demo --demo-frames 5 --scale-frames 2 --threads 1 --keyframe-interval flow "
                     "--max-non-keyframe-gap 2 --export poses --out " + (dir / "flow").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto flow = read_json(dir / "flow" / "summary.json")["options"];
  EXPECT_EQ(flow["flow_threshold"], 5.0);  // the default
  EXPECT_EQ(flow["max_non_keyframe_gap"], 2);
  EXPECT_TRUE(flow["keyframe_interval"].is_null());
  r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --threads 1 --export poses --out " + (dir / "interval").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto interval = read_json(dir / "interval" / "summary.json")["options"];
  EXPECT_TRUE(interval["flow_threshold"].is_null());
  EXPECT_TRUE(interval["max_non_keyframe_gap"].is_null());
  EXPECT_EQ(interval["keyframe_interval"], 1);
}

// summary.json "options" holds every option as given or resolved, each under its own name: a value
// written under another option's key (first_k from --stride) fails here.
TEST(RunModes, SummaryOptionsAreTheOptionsOfTheRun) {
  const fs::path dir = fresh_dir("modes_options");
  const Result r = run_cli("run --images " + kTinyFrames + " --model " + kTinyModel +
                           " --image-size 98 --preprocess pad --first-k 7 --stride 2 --rotate-cw90 --scale-frames 2"
                           " --kv-window 3 --keyframe-interval 2 --max-special-frames 5 --camera-iterations 2"
                           " --kv-backend dense --kv-dtype f32 --weights-dtype f32 --threads 1 --pipeline off"
                           " --conf-threshold 0.25 --downsample 3 --export ply,tum --progress lines"
                           " --export-preprocessed " + (dir / "pre").string() + " --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json expected = json::parse(R"({
    "image_size": 98, "mode": "streaming", "preprocess": "pad", "fps": null, "first_k": 7, "stride": 2,
    "rotate_cw90": true, "scale_frames": 2, "kv_window": 3, "keyframe_interval": 2, "keyframe_interval_rule": "given",
    "keyframe_policy": "interval 2", "flow_threshold": null, "max_non_keyframe_gap": null, "window_size": null,
    "overlap_size": null, "overlap_keyframes": null, "overlap_frames": null, "max_special_frames": 5,
    "max_special_frames_rule": "given", "camera_iterations": 2, "device": "cpu", "kv_backend": "dense",
    "kv_dtype": "f32", "weights_dtype": "f32", "threads": 1, "pipeline": "off", "conf_threshold": 0.25,
    "downsample": 3, "export": ["tum", "ply"], "set": []})");  // exports in their canonical order
  json options = read_json(dir / "out" / "summary.json").at("options");
  EXPECT_EQ(options.at("export_preprocessed"), (dir / "pre").string());
  options.erase("export_preprocessed");
  EXPECT_EQ(options, expected) << options.dump(1);
}

// dense-full has no window: a --kv-window is refused (it was silently ignored), the banner says so and
// summary.json records none (not the unused default).
TEST(RunModes, DenseFullHasNoKvWindow) {
  const fs::path dir = fresh_dir("modes_dense_full");
  const Result given = run_cli("run --images " + kTinyFrames + " --model " + kTinyModel +
                               " --kv-backend dense-full --kv-window 8 --out " + (dir / "given").string());
  EXPECT_EQ(given.exit_code, 2);
  EXPECT_EQ(given.err, "error: --kv-window does not apply to --kv-backend dense-full (it keeps every frame)\n"
                       "Run 'lingbot-map run --help' for usage.\n");
  EXPECT_FALSE(fs::exists(dir / "given"));
  const Result r = run_cli("run --images " + kTinyFrames + " --model " + kTinyModel +
                           " --image-size 98 --first-k 3 --scale-frames 2 --kv-backend dense-full --threads 1"
                           " --export tum --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(", 2 scale frames, no window (dense-full keeps every frame), "), std::string::npos) << r.out;
  const json options = read_json(dir / "out" / "summary.json").at("options");
  EXPECT_TRUE(options.at("kv_window").is_null()) << options.dump(1);
  EXPECT_EQ(options.at("kv_backend"), "dense-full");
}
