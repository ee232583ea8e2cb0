// `lingbot-map run` on bad input: one "error: ..." line, exit code 1, and no file claiming success.
// Errors found before the run starts leave --out untouched (not even created); an error after
// frames were written leaves summary.json with "status": "failed" and the message.
#include <algorithm>
#include <fstream>

#include "lingbot/device.h"
#include "run_test_util.h"

namespace {

using namespace run_test;
using nlohmann::json;


// Runs `run <args> --out <fresh>/out` and checks the failure contract; returns the error line.
std::string expect_failure(const std::string& args, const std::string& name) {
  const fs::path out = fresh_dir(name) / "out";
  const Result r = run_cli("run " + args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_FALSE(fs::exists(out)) << "output folder created for a run that never started: " << name;
  // Exactly one line on stderr.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  return r.err;
}

// A usage error (docs/cli.md "Exit codes and errors": options that need or exclude each other, a missing
// input or model): exit 2, the error line and where the usage is; nothing created.
std::string expect_usage_error(const std::string& args, const std::string& name) {
  const fs::path out = fresh_dir(name) / "out";
  const Result r = run_cli("run " + args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_FALSE(fs::exists(out)) << name;
  const std::string usage = "Run 'lingbot-map run --help' for usage.\n";
  EXPECT_TRUE(r.err.size() > usage.size() && r.err.substr(r.err.size() - usage.size()) == usage) << r.err;
  return r.err.substr(0, r.err.size() > usage.size() ? r.err.size() - usage.size() : 0);
}

TEST(RunErrors, NoModelSaysHowToGetTheCheckpoint) {
  EXPECT_EQ(expect_usage_error("--images " + kTinyFrames, "no_model"),
            "error: no --model given: download the LingBot-Map checkpoint lingbot-map-long.pt from the "
            "Robbyant/lingbot-map project release and pass it with --model PATH (or run with --demo to try "
            "the pipeline with a built-in random-weight model)\n");
}

TEST(RunErrors, InputChoice) {
  EXPECT_EQ(expect_usage_error("--model " + kTinyModel, "no_input"),
            "error: no input: give --images DIR or --video FILE (or --demo to try the built-in example)\n");
  EXPECT_EQ(expect_usage_error("--images " + kTinyFrames + " --video x.mp4 --model " + kTinyModel, "two_inputs"),
            "error: give either --images or --video, not both\n");
  EXPECT_EQ(expect_usage_error("--demo --set aggregator.depth=2", "demo_and_set"),
            "error: --set changes a loaded checkpoint's configuration; it cannot be used with --demo\n");
  EXPECT_EQ(expect_usage_error("--demo --model " + kTinyModel, "demo_and_model"),
            "error: --demo uses generated frames and a built-in model; do not combine it with --images, --video "
            "or --model\n");
}

TEST(RunErrors, MissingAndEmptyInputs) {
  EXPECT_EQ(expect_failure("--images /nonexistent/frames --model " + kTinyModel, "missing_folder"),
            "error: image folder not found: /nonexistent/frames\n");
  const fs::path empty = fresh_dir("empty_folder_input");
  EXPECT_EQ(expect_failure("--images " + empty.string() + " --model " + kTinyModel, "empty_folder"),
            "error: no images (.jpg, .jpeg, .png, .bmp) in " + empty.string() + "\n");
  EXPECT_EQ(expect_failure("--video /nonexistent/clip.mp4 --model " + kTinyModel, "missing_video"),
            "error: video file not found: /nonexistent/clip.mp4\n");
  EXPECT_EQ(expect_failure("--images " + kTinyFrames + " --model /nonexistent/model.pt", "missing_model"),
            "error: model file not found: /nonexistent/model.pt\n");
}

TEST(RunErrors, UnreadableFiles) {
  const fs::path dir = fresh_dir("bad_inputs");
  // Not a video: the container probe fails.
  write_file(dir / "clip.mp4", "this is not a video file\n");
  const std::string video_err = expect_failure("--video " + (dir / "clip.mp4").string() + " --model " + kTinyModel, "bad_video");
  EXPECT_EQ(video_err.rfind("error: cannot open video " + (dir / "clip.mp4").string() + ": ", 0), 0u) << video_err;
  // Not an image.
  fs::create_directories(dir / "frames");
  write_file(dir / "frames" / "000000.png", "not a png");
  const std::string image_err = expect_failure("--images " + (dir / "frames").string() + " --model " + kTinyModel, "bad_image");
  EXPECT_EQ(image_err.rfind("error: cannot decode image " + (dir / "frames" / "000000.png").string(), 0), 0u)
      << image_err;
  // Not a checkpoint.
  write_file(dir / "model.pt", "not a checkpoint");
  const std::string model_err =
      expect_failure("--images " + kTinyFrames + " --model " + (dir / "model.pt").string(), "bad_model");
  EXPECT_EQ(model_err, "error: " + (dir / "model.pt").string() +
                          ": unrecognised checkpoint format (neither a PyTorch zip checkpoint nor safetensors)\n");
}

// Renamed flags (docs/naming.md): the old spelling still works with one notice line and the same
// result; both spellings at once are an error.
TEST(RunErrors, OldFlagSpellingsWorkWithANotice) {
  const fs::path dir = fresh_dir("old_spellings");
  const Result old = run_cli("run --demo --demo-frames 4 --num-scale-frames 2 --attention dense --threads 1 --out " +
                             (dir / "old").string());
  ASSERT_EQ(old.exit_code, 0) << old.err;
  EXPECT_EQ(old.err, "notice: --num-scale-frames is deprecated, use --scale-frames\n"
                     "notice: --attention is deprecated, use --kv-backend\n");
  const Result now = run_cli("run --demo --demo-frames 4 --scale-frames 2 --kv-backend dense --threads 1 --out " +
                             (dir / "new").string());
  ASSERT_EQ(now.exit_code, 0) << now.err;
  EXPECT_EQ(now.err, "");
  const auto options_of = [](const fs::path& out) { return read_json(out / "summary.json")["options"]; };
  EXPECT_EQ(options_of(dir / "old")["scale_frames"], 2);
  EXPECT_EQ(options_of(dir / "old")["kv_backend"], "dense");
  EXPECT_EQ(options_of(dir / "old"), options_of(dir / "new"));
  EXPECT_EQ(slurp(dir / "old" / "poses.json"), slurp(dir / "new" / "poses.json"));
  EXPECT_EQ(expect_usage_error("--demo --num-scale-frames 2 --scale-frames 3", "both_spellings"),
            "error: give --scale-frames or its old spelling --num-scale-frames, not both\n");
}

TEST(RunErrors, OptionsThatDoNotFitTheModel) {
  const std::string base = "--images " + kTinyFrames + " --model " + kTinyModel;
  EXPECT_EQ(expect_failure(base + " --image-size 100", "image_size"),
            "error: --image-size must be a multiple of the model's patch size 14, got 100\n");
  EXPECT_EQ(expect_failure(base + kTinyRunArgs + " --stride 0", "stride"), "error: --stride must be >= 1, got 0\n");
  EXPECT_EQ(expect_failure(base + kTinyRunArgs + " --downsample 0", "downsample"), "error: --downsample must be >= 1, got 0\n");
  // A configuration the checkpoint does not fit (head count that does not divide the width).
  EXPECT_EQ(expect_failure(base + kTinyRunArgs + " --set aggregator.num_heads=3", "set_heads"),
            "error: invalid model config: aggregator.num_heads 3 must divide aggregator.embed_dim 128\n");
}

// Fields run sets from its own options would silently override a --set of them.
TEST(RunErrors, SetOfAFieldRunSetsItselfNamesTheOption) {
  const std::string base = "--images " + kTinyFrames + " --model " + kTinyModel + kTinyRunArgs;
  EXPECT_EQ(expect_failure(base + " --set camera.num_iterations=2", "set_iterations"),
            "error: --set camera.num_iterations: run sets this field from --camera-iterations; use that option\n");
  EXPECT_EQ(expect_failure(base + " --set kv_cache.scale_frames=3", "set_scale"),
            "error: --set kv_cache.scale_frames: run sets this field from --scale-frames; use that option\n");
  EXPECT_EQ(expect_failure(base + " --set kv_cache.sliding_window=2", "set_window"),
            "error: --set kv_cache.sliding_window: run sets this field from --kv-window; use that option\n");
}

// --export-preprocessed writes NNNNNN.png: never over the input frames, never into an export's folder.
TEST(RunErrors, ExportPreprocessedNeverOverlapsInputsOrExports) {
  const fs::path dir = fresh_dir("preprocessed_overlap");
  fs::copy(kTinyFrames, dir / "frames");
  const auto hash_of_inputs = [&] {
    std::string all;
    for (const auto& p : lingbot::io::list_image_files(dir / "frames")) all += slurp(p);
    return all;
  };
  const std::string before = hash_of_inputs();
  const std::string base = "--images " + (dir / "frames").string() + " --model " + kTinyModel + kTinyRunArgs;
  EXPECT_EQ(expect_failure(base + " --export-preprocessed " + (dir / "frames").string(), "pre_inputs"),
            "error: --export-preprocessed " + (dir / "frames").string() + " overlaps the --images folder " +
                (dir / "frames").string() + " (the PNGs would replace or join the input frames): choose another folder\n");
  EXPECT_EQ(expect_failure(base + " --export-preprocessed " + (dir / "frames" / "pre").string(), "pre_below_inputs"),
            "error: --export-preprocessed " + (dir / "frames" / "pre").string() + " overlaps the --images folder " +
                (dir / "frames").string() + " (the PNGs would replace or join the input frames): choose another folder\n");
  EXPECT_EQ(hash_of_inputs(), before) << "the input frames changed";
  const fs::path out = fresh_dir("pre_depth") / "out";
  const Result r = run_cli("run " + base + " --export depth --export-preprocessed " + (out / "depth").string() + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: --export-preprocessed " + (out / "depth").string() +
                       " is inside --out's depth/ folder, where an export writes: choose another folder\n");
  EXPECT_FALSE(fs::exists(out));
  // A folder of its own below --out is fine.
  const Result ok = run_cli("run " + base + " --export poses --export-preprocessed " + (out / "pre").string() + " --out " + out.string());
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(lingbot::io::list_image_files(out / "pre").size(), lingbot::io::list_image_files(kTinyFrames).size());
  // A shorter run into the same folder replaces the frames: the earlier run's later ones stayed, passing
  // for this run's. Files not named as frames are not touched.
  write_file(out / "pre" / "notes.png", "x");
  const Result again = run_cli("run " + base + " --first-k 2 --export poses --export-preprocessed " + (out / "pre").string() +
                               " --out " + out.string());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "notice: --export-preprocessed " + (out / "pre").string() + ": " +
                                      std::to_string(lingbot::io::list_image_files(kTinyFrames).size()) +
                                      " frame PNG(s) of an earlier run removed\n")) << again.out;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out / "pre")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"000000.png", "000001.png", "notes.png"}));
}

// Options that only mean something with another one are usage errors (exit 2), not silently ignored.
TEST(RunErrors, OptionsWithoutTheOptionTheyNeed) {
  const std::string base = "run --images " + kTinyFrames + " --model " + kTinyModel + kTinyRunArgs + " --out " +
                           (fresh_dir("needs") / "out").string();
  for (const auto& [extra, message] : {std::pair<std::string, std::string>{" --fps 5", "error: --fps requires --video"},
                                       {" --demo-frames 5", "error: --demo-frames requires --demo"},
                                       {" --serve -1", "error: --serve: Value -1 not in range 0 to 65535"},
                                       {" --serve 70000", "error: --serve: Value 70000 not in range 0 to 65535"}}) {
    const Result r = run_cli(base + extra);
    EXPECT_EQ(r.exit_code, 2) << extra;
    EXPECT_EQ(r.err, message + "\nRun 'lingbot-map run --help' for usage.\n") << extra;
  }
  // The demo generates its frames (--demo-frames): a frame selection would be ignored, yet recorded.
  for (const std::string option : {"--first-k 5", "--stride 2", "--rotate-cw90"}) {
    const Result r = run_cli("run --demo " + option + " --out " + (fresh_dir("needs") / "demo").string());
    EXPECT_EQ(r.exit_code, 2) << option;
    EXPECT_EQ(r.err, "error: --demo excludes " + option.substr(0, option.find(' ')) + "\nRun 'lingbot-map run --help' for usage.\n")
        << option;
  }
}

TEST(RunErrors, UnwritableOutput) {
  const fs::path dir = fresh_dir("unwritable");
  write_file(dir / "file", "x");
  const fs::path out = dir / "file" / "out";  // below a regular file: cannot be created, even by root
  const Result r = run_cli("run --images " + kTinyFrames + " --model " + kTinyModel + kTinyRunArgs + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: --out " + out.string() + ": " + (dir / "file").string() + " is not a folder\n");
  EXPECT_FALSE(fs::exists(out));
}

// A frame that cannot be decoded in the middle of the sequence: the frames before it stay valid,
// summary.json says "failed" with the error, exit code 1; the same with the reader thread (--pipeline
// on, the default: it fails while the model thread still runs frames 0-2) and without.
TEST(RunErrors, FailureMidRunIsRecordedInSummary) {
  const fs::path dir = fresh_dir("mid_run");
  fs::create_directories(dir / "frames");
  for (const char* name : {"000000.png", "000001.png", "000002.png"})
    fs::copy_file(fs::path(kTinyFrames) / name, dir / "frames" / name);
  // Frame 3: a valid PNG header (size probe works) with its image data cut off.
  write_file(dir / "frames" / "000003.png", slurp(fs::path(kTinyFrames) / "000003.png").substr(0, 60));
  for (const std::string pipeline : {"on", "off"}) {
    const fs::path out = dir / ("out_" + pipeline);
    const Result r = run_cli("run --images " + (dir / "frames").string() + " --model " + kTinyModel + kTinyRunArgs +
                             " --pipeline " + pipeline + " --out " + out.string());
    EXPECT_EQ(r.exit_code, 1) << pipeline << r.out << r.err;
    EXPECT_EQ(r.err.rfind("error: cannot decode image " + (dir / "frames" / "000003.png").string(), 0), 0u)
        << pipeline << r.err;
    const json summary = read_json(out / "summary.json");
    EXPECT_EQ(summary.at("status"), "failed") << pipeline;
    EXPECT_EQ(summary.at("interrupted"), false);
    EXPECT_EQ(r.err, "error: " + summary.at("error").get<std::string>() + "\n");
    EXPECT_EQ(summary.at("frames"), 3) << pipeline;
    EXPECT_EQ(read_json(out / "poses.json").at("frames").size(), 3u);
    EXPECT_EQ(read_lines(out / "trajectory.tum").size(), 3u);
  }
}


// The error line of --device cuda on this machine (no GPU visible): what is missing, the build's
// CUDA support or a device (with the runtime's reason).
std::string no_cuda_device_error() {
  std::string why_none;
  lingbot::cuda_device_count(&why_none);
  return lingbot::cuda_compiled()
             ? "error: device cuda: no CUDA device is visible (cudaGetDeviceCount: " + why_none + ")\n"
             : "error: device cuda: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)\n";
}

// --device: cuda needs a CUDA build and a visible GPU, each missing one named in one line (in a
// CUDA build on a machine with a GPU the check does not apply: the run must succeed there);
// auto falls back to the CPU; anything else is refused by the option parser.
TEST(RunErrors, DeviceCudaNamesWhatIsMissing) {
  if (lingbot::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: --device cuda is valid here";
  const std::string err = expect_failure("--demo --demo-frames 2 --device cuda", "device_cuda");
  EXPECT_EQ(err, no_cuda_device_error());
  const Result bad = run_cli("run --demo --device tpu --out " + (fresh_dir("device_tpu") / "out").string());
  EXPECT_EQ(bad.exit_code, 2) << "a usage error, as every option the parser refuses";
  EXPECT_TRUE(contains(bad.err, "error: --device: tpu not in {cpu,cuda,auto}\n")) << bad.err;
}

TEST(RunErrors, DeviceAutoRunsOnTheCpuWithoutAGpu) {
  if (lingbot::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: auto picks it";
  const fs::path out = fresh_dir("device_auto") / "out";
  const Result r = run_cli("run --demo --demo-frames 3 --device auto --threads 1 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "device: cpu (1 thread)\n")) << r.out;
  EXPECT_EQ(read_json(out / "summary.json")["options"]["device"], "cpu");
}

TEST(RunErrors, VerifyAndBenchModelTakeTheSameDevice) {
  if (lingbot::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: --device cuda is valid here";
  const std::string want = no_cuda_device_error();
  for (const std::string& args : {"verify --golden " + kTestdata + "/tiny --device cuda",
                                 std::string("bench model --model-size demo --frames 3 --scale-frames 2 --device cuda")}) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, want) << args;
  }
  const Result ok = run_cli("bench model --model-size demo --frames 3 --scale-frames 2 --threads 1 --calibrate off "
                            "--writers off --weights-dtype f32 --device auto");
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_EQ(summary_of(ok.out).at("device"), "cpu");
}

// dense-full never evicts: on a case whose stored frames outgrow the window it cannot match the
// reference, and verify says why under its FAIL line.
TEST(RunErrors, VerifyExplainsWhyDenseFullDiffers) {
  const Result r = run_cli("verify --golden " + kTestdata + "/tiny --kv-backend dense-full --threads 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.ends_with("\nnote: dense-full never evicts, so it matches only cases whose stored frames all fit "
                              "their KV window; the reference evicts past it (use paged or dense)\n"))
      << r.out;
  const Result paged = run_cli("verify --golden " + kTestdata + "/tiny --threads 1");
  EXPECT_EQ(paged.exit_code, 0) << paged.out;
  EXPECT_EQ(paged.out.find("note: dense-full"), std::string::npos);
}

// A manifest that cannot be read is reported before the listing, not after it.
TEST(RunErrors, InspectRefusesABadManifestBeforeTheListing) {
  const fs::path bad = fresh_dir("inspect_manifest") / "bad.json";
  std::ofstream(bad) << "{not json";
  const Result r = run_cli("inspect " + kTinyModel + " --manifest " + bad.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  // The parser's own words follow ours: where the JSON broke.
  EXPECT_EQ(r.err, "error: manifest '" + bad.string() +
                       "' is not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 3: syntax "
                       "error while parsing object key - invalid literal; last read: '{no'; expected string literal\n");
}

}  // namespace
