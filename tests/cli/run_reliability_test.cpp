// Reliability of `lingbot-map run` (issue: damaged inputs, non-finite outputs, late checks, exit
// codes, full disk). Every test reproduces one defect: a damaged video must not pass as completed,
// non-finite values never reach a geometric file, checks happen before anything is written, usage
// errors exit 2 with one error line, and a disk that fills up mid-run leaves valid files.
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "io/image.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "run_test_util.h"
#include "test_jpeg.h"
#include "test_video_writer.h"

namespace {

using namespace run_test;
using nlohmann::json;

const std::string kReliabilityArgs = kTinyRunArgs + " --keyframe-interval 1";

size_t stderr_lines(const Result& r) { return static_cast<size_t>(std::count(r.err.begin(), r.err.end(), '\n')); }

// The 10 tiny frames cycled to 40, as an H.264 MP4 (MPEG-4 part 2 without libx264), index in front.
bool write_tiny_mp4(const fs::path& path) {
  std::vector<lingbot::io::ImageU8> frames;
  const auto files = lingbot::io::list_image_files(kTinyFrames);
  for (int i = 0; i < 40; ++i) frames.push_back(lingbot::io::load_image(files[static_cast<size_t>(i) % files.size()]));
  const char* codec = avcodec_find_encoder_by_name("libx264") ? "libx264" : "mpeg4";
  return lingbot_test::write_test_video(path, codec, frames, 10, 0, "+faststart");
}

// Every file a run leaves is valid on its own: poses.json parses, each TUM line has 8 numbers, the
// PLY size matches its header, every depth file is complete. Returns the frames in poses.json.
size_t check_files_valid(const fs::path& out) {
  const json poses = read_json(out / "poses.json");
  for (const auto& line : read_lines(out / "trajectory.tum")) EXPECT_EQ(line.size(), 8u);
  const std::string ply = slurp(out / "points.ply");
  const PlyInfo info = parse_ply_header(ply);
  EXPECT_GE(info.vertices, 0);
  EXPECT_EQ(ply.size(), info.header_bytes + static_cast<size_t>(info.vertices) * 15);
  for (const auto& e : fs::directory_iterator(out / "depth")) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "temporary file left: " << name;
    if (e.path().extension() == ".npy") {
      EXPECT_EQ(lingbot::io::read_npy_f32(e.path()).data.size(), 70u * 112u) << name;
    } else if (e.path().extension() == ".png") {
      EXPECT_EQ(parse_png_header(slurp(e.path())).width, 112u) << name;
    }
  }
  return poses.at("frames").size();
}

// ---- exit codes ------------------------------------------------------------------------------

TEST(RunReliability, UsageErrorsExit2WithOneErrorLineAndAHelpHint) {
  const fs::path out = fresh_dir("usage") / "out";
  const std::string o = " --out " + out.string();
  struct Case {
    std::string args, error, help;
  };
  const Case cases[] = {
      {"foo", "error: unknown subcommand 'foo' (subcommands: version, inspect, convert, verify, bench, run, view)",
       "lingbot-map"},
      // No subcommand where one is needed: named (it was CLI11's "A subcommand is required").
      {"", "error: lingbot-map needs a subcommand: version, inspect, convert, verify, bench, run, view", "lingbot-map"},
      {"bench", "error: lingbot-map bench needs a subcommand: kv, model, soak, gpu", "lingbot-map bench"},
      {"run --demo --bogus" + o, "error: The following argument was not expected: --bogus", "lingbot-map run"},
      {"run --demo --fps nan" + o, "error: --fps: 'nan' is not a finite number", "lingbot-map run"},
      {"run --demo --conf-threshold inf" + o, "error: --conf-threshold: 'inf' is not a finite number", "lingbot-map run"},
      {"run --demo --keyframe-interval flow --flow-threshold nan" + o,
       "error: --flow-threshold: 'nan' is not a finite number", "lingbot-map run"},
      {"run --demo --threads abc" + o, "error: --threads: 'abc' is not an integer", "lingbot-map run"},
      {"run --demo --threads 99999999999" + o, "error: --threads: '99999999999' is out of range", "lingbot-map run"},
      // A word that is not one of an option's choices does not parse either.
      {"run --demo --mode stretch" + o,
       "error: --mode: must be streaming or windowed (crop | pad: the deprecated spelling of --preprocess), got "
       "'stretch'",
       "lingbot-map run"},
      {"run --demo --preprocess stretch" + o, "error: --preprocess: must be crop or pad, got 'stretch'", "lingbot-map run"},
      {"run --demo --keyframe-interval sometimes" + o,
       "error: --keyframe-interval: must be a number >= 1, auto (or 0) or flow, got 'sometimes'", "lingbot-map run"},
      {"run --demo --keyframe-interval 10000000" + o, "error: --keyframe-interval: must be at most 1000000, got '10000000'",
       "lingbot-map run"},
      {"run --demo --keyframe-interval 00" + o,
       "error: --keyframe-interval: must be a number >= 1, auto (or 0) or flow, got '00'", "lingbot-map run"},
      {"run --demo --kv-backend flash" + o, "error: --kv-backend: must be paged, dense or dense-full, got 'flash'",
       "lingbot-map run"},
      {"run --demo --attention flash" + o,  // the old spelling (no validator of its own)
       "notice: --attention is deprecated, use --kv-backend\nerror: --kv-backend: unknown KV backend 'flash' (expected "
       "paged, dense or dense-full)",
       "lingbot-map run"},
      {"run --demo --kv-dtype f64" + o, "error: --kv-dtype: must be f32, f16 or bf16, got 'f64'", "lingbot-map run"},
      {"run --demo --weights-dtype f8" + o, "error: --weights-dtype: must be auto, f32, f16 or bf16, got 'f8'",
       "lingbot-map run"},
      {"run --demo --set aggregator.num_heads" + o, "error: --set: expects key=value, got 'aggregator.num_heads'",
       "lingbot-map run"},
      {"run --demo --progress loud" + o, "error: --progress: must be auto, bar or lines, got 'loud'", "lingbot-map run"},
      {"run --demo", "error: --out is required", "lingbot-map run"},
      // A misspelt option was reported as the one it missed ("--out is required").
      {"run --demo --output " + out.string(),
       "error: The following arguments were not expected: --output " + out.string() + " (and --out is required)",
       "lingbot-map run"},
      // An empty item of an export list (CLI11 dropped it: `ply,,glb` ran as `ply,glb`, and a lone `,` took --out
      // as its value).
      {"run --demo --export ply,,glb" + o,
       "error: --export: empty export name in 'ply,,glb' (choose from poses, tum, depth, ply, depth-preview, viewer, npz, "
       "colmap, glb, bss, all)",
       "lingbot-map run"},
      {"run --demo --export ," + o,
       "error: --export: empty export name in ',' (choose from poses, tum, depth, ply, depth-preview, viewer, npz, "
       "colmap, glb, bss, all)",
       "lingbot-map run"},
      // An option given twice ("--fps: At Most 1 required but received 2").
      {"run --demo --fps 5 --fps 6" + o, "error: --fps is given more than once (give it once)", "lingbot-map run"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err, c.error + "\nRun '" + c.help + " --help' for usage.\n") << c.args;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  // --help and --version are not errors.
  EXPECT_EQ(run_cli("--help").exit_code, 0);
  EXPECT_EQ(run_cli("run --help").exit_code, 0);
}

// Values out of range are bad input (exit 1), found before anything is written.
TEST(RunReliability, OutOfRangeValuesExit1BeforeAnythingIsWritten) {
  const fs::path dir = fresh_dir("ranges");
  write_file(dir / "a_file", "x");
  const std::string demo = "run --demo --demo-frames 2";
  struct Case {
    std::string args, error;
  };
  const Case cases[] = {
      {demo + " --image-size 0", "error: --image-size must be in 1..4096, got 0"},
      {demo + " --image-size 100002", "error: --image-size must be in 1..4096, got 100002"},
      {demo + " --kv-window 2147483647", "error: --kv-window must be at most 1048576, got 2147483647"},
      {demo + " --scale-frames 5000", "error: --scale-frames must be at most 1024, got 5000"},
      {demo + " --camera-iterations 1000", "error: --camera-iterations must be at most 64, got 1000"},
      // Its sum with the KV window overflowed, and the camera head named internals ("keep_recent -9223...").
      {demo + " --max-special-frames 9223372036854775807",
       "error: --max-special-frames must be in 0..1073741824 (0 = keep all), got 9223372036854775807"},
      {demo + " --export-preprocessed " + (dir / "a_file").string(),
       "error: --export-preprocessed " + (dir / "a_file").string() + " exists and is not a folder"},
  };
  for (const Case& c : cases) {
    const fs::path out = dir / "out";
    const Result r = run_cli(c.args + " --out " + out.string());
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err, c.error + "\n") << c.args;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  const Result r = run_cli(demo + " --out " + (dir / "a_file").string());
  EXPECT_EQ(r.err, "error: --out " + (dir / "a_file").string() + " exists and is not a folder\n");
}

// The KV cache of a huge window at a large image size cannot fit: refused up front, naming the option.
TEST(RunReliability, InfeasibleMemoryIsRefusedBeforeAnythingIsWritten) {
  const fs::path out = fresh_dir("memory") / "out";
  const Result r = run_cli("run --demo --demo-frames 3 --image-size 4088 --kv-window 1000000 --out " + out.string());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: the run needs at least ", 0), 0u) << r.err;
  // bf16 K/V (run's default): the window and the frame size are what lower the KV cache. Three frames
  // make few pages resident, but the pool is reserved whole at the start: more than any machine has.
  EXPECT_TRUE(contains(r.err, " of memory to reserve its KV cache up front (weights ")) << r.err;
  EXPECT_TRUE(r.err.ends_with(" of memory and swap: lower --kv-window or --scale-frames (the KV cache keeps the window's and "
                             "the scale frames) or --image-size\n"))
      << r.err;
  EXPECT_EQ(stderr_lines(r), 1u);
  EXPECT_FALSE(fs::exists(out));
  // In one log of both streams (`2>&1 | tee`), what run printed before the error stays before it (the
  // error came first: standard output was still in its buffer).
  const Result merged = run_command("sh -c '" + std::string(LINGBOT_CLI_PATH) +
                                    " run --demo --demo-frames 700 --image-size 4088 --kv-window 1000000 --out " +
                                    out.string() + " 2>&1'");
  const size_t error_at = merged.out.find("error: the run needs at least ");
  ASSERT_NE(error_at, std::string::npos) << merged.out;
  EXPECT_EQ(merged.out.rfind("keyframe interval 3 selected automatically (700 frames > 320)\n", 0), 0u) << merged.out;
  EXPECT_EQ(merged.out.find('\n', error_at), merged.out.size() - 1) << merged.out;  // the last line
  EXPECT_FALSE(fs::exists(out));
}

TEST(RunReliability, SymlinkLoopIsReportedAsSuch) {
  const fs::path dir = fresh_dir("loop");
  fs::create_symlink(dir / "b", dir / "a");
  fs::create_symlink(dir / "a", dir / "b");
  const Result r = run_cli("run --images " + (dir / "a").string() + " --model " + kTinyModel + " --out " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: image folder " + (dir / "a").string() +
                       " is a symbolic link loop (Too many levels of symbolic links)\n");
  const Result v = run_cli("run --video " + (dir / "a").string() + " --model " + kTinyModel + " --out " + (dir / "out").string());
  EXPECT_EQ(v.err, "error: video file " + (dir / "a").string() +
                       " is a symbolic link loop (Too many levels of symbolic links)\n");
  const Result m = run_cli("run --images " + kTinyFrames + " --model " + (dir / "a").string() + " --out " + (dir / "out").string());
  EXPECT_EQ(m.err, "error: model file " + (dir / "a").string() +
                       " is a symbolic link loop (Too many levels of symbolic links)\n");
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// ---- damaged video ---------------------------------------------------------------------------

// The issue's reproduction: a 40-frame MP4 (index in front) cut in half.
TEST(RunReliability, VideoCutInHalfIsReportedDamagedNotCompleted) {
  const fs::path dir = fresh_dir("cut_video");
  ASSERT_TRUE(write_tiny_mp4(dir / "clip.mp4"));
  fs::resize_file(dir / "clip.mp4", fs::file_size(dir / "clip.mp4") / 2);
  const std::string args = "run --video " + (dir / "clip.mp4").string() + " --fps 0 --model " + kTinyModel + kReliabilityArgs;
  const Result r = run_cli(args + " --out " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "warning: input damaged: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "error: the input video is damaged (")) << r.err;
  json summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary.at("status"), "damaged");
  const json& w = summary.at("warnings");
  ASSERT_EQ(w.size(), 1u) << w.dump();
  EXPECT_EQ(w[0].at("kind"), "input_damaged");
  EXPECT_EQ(w[0].at("truncated"), true);
  const int64_t frames = summary.at("frames").get<int64_t>();
  const int64_t lost = w[0].at("lost_frames").get<int64_t>();
  EXPECT_GT(frames, 0);
  EXPECT_EQ(frames + lost, 40) << w.dump();
  ASSERT_EQ(static_cast<int64_t>(w[0].at("lost").size()), lost);
  // Labels and timestamps follow the stream: frame_<n> at n / 10 s; lost positions are the rest.
  std::set<int64_t> positions;
  const json poses = read_json(dir / "out" / "poses.json");
  for (const json& f : poses.at("frames")) {
    const std::string source = f.at("source");
    const int64_t n = std::stoll(source.substr(6));
    EXPECT_NEAR(f.at("timestamp").get<double>(), 0.1 * static_cast<double>(n), 1e-9) << source;
    positions.insert(n);
  }
  for (const json& p : w[0].at("lost")) positions.insert(p.at("position").get<int64_t>());
  EXPECT_EQ(positions.size(), 40u);
  EXPECT_EQ(*positions.rbegin(), 39);

  // --allow-damaged: completed, exit 0, the damage still listed.
  const Result ok = run_cli(args + " --stride 8 --allow-damaged --out " + (dir / "out2").string());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  summary = read_json(dir / "out2" / "summary.json");
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_EQ(summary.at("warnings").size(), 1u);
  EXPECT_TRUE(contains(ok.err, "warning: input damaged: ")) << ok.err;
}

// A JPEG of the folder that libjpeg decodes with lost data (grey blocks where it was) is a damaged
// frame, as a concealed video frame is: processed, listed, exit 3 unless --allow-damaged.
TEST(RunReliability, AFolderJpegWithLostDataIsReportedDamaged) {
  const fs::path dir = fresh_dir("corrupt_jpeg");
  fs::create_directories(dir / "frames");
  const std::vector<uint8_t> good = lingbot_test::encode_jpeg(lingbot_test::textured_rgb(64, 48), 64, 48, 3);
  for (const std::string name : {"f0.jpg", "f1.jpg", "f2.jpg", "f3.jpg"})
    write_file(dir / "frames" / name, name == "f2.jpg" ? lingbot_test::cut_scan_jpeg(good) : good);
  const std::string args = "run --images " + (dir / "frames").string() + " --model " + kTinyModel + kReliabilityArgs;
  const Result r = run_cli(args + " --out " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  const std::string what = "1 frame decoded with errors (positions 2; f2.jpg: Corrupt JPEG data: premature end of data segment)";
  EXPECT_TRUE(contains(r.err, "warning: input damaged: " + what + "\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "error: the input images are damaged (" + what + "); libjpeg concealed the lost data in "
                              "those frames, which were processed and written as decoded. Pass --allow-damaged"))
      << r.err;
  json summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary.at("status"), "damaged");
  EXPECT_EQ(summary.at("frames"), 4);
  const json& w = summary.at("warnings");
  ASSERT_EQ(w.size(), 1u) << w.dump();
  EXPECT_EQ(w[0].at("kind"), "input_damaged");
  EXPECT_EQ(w[0].at("damaged_frames"), 1);
  EXPECT_EQ(w[0].at("damaged"), json::parse(R"([{"position": 2, "timestamp": 2.0, "file": "f2.jpg",
                                                  "problem": "Corrupt JPEG data: premature end of data segment"}])"));

  const Result ok = run_cli(args + " --allow-damaged --out " + (dir / "out2").string());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  summary = read_json(dir / "out2" / "summary.json");
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_EQ(summary.at("warnings").size(), 1u);
}

TEST(RunReliability, IntactVideoHasNoWarnings) {
  const fs::path dir = fresh_dir("intact_video");
  ASSERT_TRUE(write_tiny_mp4(dir / "clip.mp4"));
  const Result r = run_cli("run --video " + (dir / "clip.mp4").string() + " --fps 0 --first-k 12 --model " + kTinyModel +
                           kReliabilityArgs + " --out " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_EQ(summary.at("warnings"), json::array());
}

// ---- non-finite outputs ----------------------------------------------------------------------

// The tiny checkpoint with one bias changed: `edit` gets the tensor to modify.
fs::path edited_model(const fs::path& dir, const std::string& name, float value, int64_t first, int64_t count) {
  const auto ref = lingbot::io::SafetensorsReader::open(kTestdata + "/tiny/weights.safetensors");
  lingbot::io::TensorMap weights = ref.read_all(lingbot::DType::F32);
  lingbot::Tensor& t = weights.at(name);
  for (int64_t i = first; i < first + count; ++i) t.f32()[i] = value;
  const fs::path path = dir / "model.safetensors";
  lingbot::io::write_safetensors(path.string(), weights);
  return path;
}

// A zero field of view (FoV channels of the pose encoding clipped to 0 by their ReLU) gives an
// infinite focal length: the frames keep depth files but have no geometry anywhere.
TEST(RunReliability, NonFiniteIntrinsicsLeaveFramesOutOfEveryGeometricFile) {
  const fs::path dir = fresh_dir("nonfinite_camera");
  const fs::path model = edited_model(dir, "camera_head.pose_branch.fc2.bias", -1e4f, 7, 2);
  const Result r = run_cli("run --images " + kTinyFrames + " --model " + model.string() + kReliabilityArgs + " --first-k 4 --out " +
                           (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "warning: frame 0: non-finite values in intrinsic (2); the frame has no geometry")) << r.err;
  const fs::path out = dir / "out";
  const std::string poses_text = slurp(out / "poses.json");
  EXPECT_EQ(poses_text.find("null"), std::string::npos);
  const json poses = json::parse(poses_text);
  ASSERT_EQ(poses.at("frames").size(), 4u);
  for (const json& f : poses["frames"]) {
    EXPECT_EQ(f.at("valid"), false);
    EXPECT_FALSE(f.contains("intrinsics"));
    EXPECT_FALSE(f.contains("c2w"));
  }
  EXPECT_TRUE(read_lines(out / "trajectory.tum").empty());
  EXPECT_EQ(parse_ply_header(slurp(out / "points.ply")).vertices, 0);
  EXPECT_TRUE(fs::exists(out / "depth" / "000003.npy"));  // raw arrays are kept
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("frames_without_geometry"), 4);
  ASSERT_EQ(summary.at("warnings").size(), 4u);
  const json& w = summary["warnings"][2];
  EXPECT_EQ(w.at("kind"), "non_finite");
  EXPECT_EQ(w.at("frame"), 2);
  EXPECT_EQ(w.at("geometry"), false);
  EXPECT_EQ(w.at("fields").at("intrinsic"), 2);
}

// NaN depth: the .npy keeps it, the PNG stores 0, no point comes from it; the cameras stay valid.
TEST(RunReliability, NonFiniteDepthIsInvalidInPngsAndPointsButKeptInNpy) {
  const fs::path dir = fresh_dir("nonfinite_depth");
  const fs::path model = edited_model(dir, "depth_head.scratch.output_conv2.2.bias", std::nanf(""), 0, 1);
  const Result r = run_cli("run --images " + kTinyFrames + " --model " + model.string() + kReliabilityArgs + " --first-k 3 --out " +
                           (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path out = dir / "out";
  const json poses = read_json(out / "poses.json");
  for (const json& f : poses.at("frames")) EXPECT_EQ(f.at("valid"), true);
  EXPECT_EQ(read_lines(out / "trajectory.tum").size(), 3u);
  EXPECT_EQ(parse_ply_header(slurp(out / "points.ply")).vertices, 0);
  const auto npy = lingbot::io::read_npy_f32(out / "depth" / "000001.npy");
  EXPECT_TRUE(std::all_of(npy.data.begin(), npy.data.end(), [](float v) { return std::isnan(v); }));
  // The 16-bit PNG: every sample 0 (IDAT of a constant image compresses to a few bytes; decode it).
  const lingbot::io::ImageU8 png = lingbot::io::load_image(out / "depth" / "000001.png");
  EXPECT_TRUE(std::all_of(png.rgb.begin(), png.rgb.end(), [](uint8_t v) { return v == 0; }));
  const json summary = read_json(out / "summary.json");
  ASSERT_EQ(summary.at("warnings").size(), 3u);
  EXPECT_EQ(summary["warnings"][0].at("fields").at("depth"), 70 * 112);
  EXPECT_EQ(summary["warnings"][0].at("geometry"), true);
  EXPECT_EQ(summary.at("frames_without_geometry"), 0);
}

// ---- full disk -------------------------------------------------------------------------------

// After a run that failed part way every export holds the same frames (the one a write failed on is
// taken back from all of them, io::ExportSet): poses.json, TUM, depth/, depth_preview/, viewer/,
// COLMAP, BSS, the GLB's cameras, and points.ply has the points of COLMAP. Returns that count.
size_t check_exports_agree(const fs::path& out) {
  const size_t frames = check_files_valid(out);
  EXPECT_EQ(read_lines(out / "trajectory.tum").size(), frames);
  EXPECT_EQ(count_files(out / "depth", "_conf.npy"), frames);
  EXPECT_EQ(count_files(out / "depth", ".npy"), 2 * frames);
  EXPECT_EQ(count_files(out / "depth", ".png"), 2 * frames);
  EXPECT_EQ(count_files(out / "depth_preview", ".png"), frames);
  EXPECT_EQ(count_files(out / "viewer", ".bin"), frames);
  size_t images = 0, points = 0;
  for (const auto& l : read_lines(out / "colmap" / "images.txt"))  // the image lines, not their POINTS2D lines
    images += l[0] != "#" && l.back().ends_with(".png");
  for (const auto& l : read_lines(out / "colmap" / "points3D.txt")) points += l[0] != "#";
  EXPECT_EQ(images, frames);
  EXPECT_EQ(static_cast<int64_t>(points), parse_ply_header(slurp(out / "points.ply")).vertices);
  EXPECT_EQ(read_lines(out / "bss" / "traj.txt").size(), frames);
  EXPECT_EQ(read_lines(out / "bss" / "intrinsics.txt").size(), frames);
  if (fs::exists(out / "scene.glb")) {  // GLB's header states the file's length: a cut file is invalid
    const std::string glb = slurp(out / "scene.glb");
    uint32_t length = 0;
    if (glb.size() >= 12) std::memcpy(&length, glb.data() + 8, 4);
    EXPECT_EQ(length, glb.size()) << "scene.glb is cut short (TinyGLTF's file writer did not say)";
  }
  if (fs::exists(out / "summary.json")) {
    const json summary = read_json(out / "summary.json");
    EXPECT_EQ(summary.at("frames"), frames);
    EXPECT_EQ(summary.at("exports").at("glb").at("cameras"), frames);
    EXPECT_EQ(summary.at("points"), points);
  }
  return frames;
}

// Runs `run` with the output on a 256 KiB tmpfs (root), else with a 96 KiB file size limit
// (RLIMIT_FSIZE: a write past it fails with EFBIG, as a full disk fails with ENOSPC). Every export
// but npz (whose per-frame arrays would fill the tmpfs at the first frame).
TEST(RunReliability, DiskFullMidRunGivesAClearErrorAndValidFiles) {
  const fs::path dir = fresh_dir("disk_full");
  const fs::path mnt = dir / "small";
  fs::create_directories(mnt);
  const bool tmpfs = ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") == 0;
  const fs::path out = mnt / "out";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!tmpfs) {
      ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal; survives exec
      const rlimit lim{96 * 1024, 96 * 1024};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    const std::string log = (dir / "log").string();
    std::freopen(log.c_str(), "w", stderr);
    std::freopen((dir / "stdout").c_str(), "w", stdout);
    ::execl(LINGBOT_CLI_PATH, LINGBOT_CLI_PATH, "run", "--demo", "--demo-frames", "40", "--out", out.c_str(),
            "--export", "poses,tum,depth,ply,depth-preview,viewer,colmap,glb,bss", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string err = slurp(dir / "log");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << err;
  const std::string reason = tmpfs ? "No space left on device" : "File too large";
  EXPECT_EQ(err.rfind("error: cannot write " + out.string(), 0), 0u) << err;
  EXPECT_TRUE(contains(err, reason)) << err;
  EXPECT_FALSE(contains(err, "could not be taken back")) << err;
  const size_t frames = check_exports_agree(out);
  EXPECT_GT(frames, 0u);
  EXPECT_LT(frames, 40u);
  if (fs::exists(out / "summary.json")) {
    const json summary = read_json(out / "summary.json");
    EXPECT_EQ(summary.at("status"), "failed");
    EXPECT_TRUE(contains(summary.at("error").get<std::string>(), reason));
  } else {
    EXPECT_TRUE(contains(err, "(and cannot write " + (out / "summary.json").string())) << err;
  }
  if (tmpfs) ::umount(mnt.c_str());
  RecordProperty("fault", tmpfs ? "tmpfs 256k" : "RLIMIT_FSIZE 96k");
  RecordProperty("frames", static_cast<int>(frames));
}

// ---- Ctrl-C / SIGTERM during a long step ----------------------------------------------------

// Starts `lingbot-map ARGS` in a child process, its stdout in dir/stdout and stderr in dir/log, for a
// test to signal; the child's pid (< 0 when fork failed).
pid_t spawn_cli(const fs::path& dir, std::vector<std::string> args, bool ignore_sighup = false) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::signal(SIGHUP, ignore_sighup ? SIG_IGN : SIG_DFL);  // as `nohup` starts it, or as a terminal does (whatever ran the tests)
  std::freopen((dir / "log").c_str(), "w", stderr);
  std::freopen((dir / "stdout").c_str(), "w", stdout);
  std::vector<char*> argv{const_cast<char*>(LINGBOT_CLI_PATH)};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(LINGBOT_CLI_PATH, argv.data());
  ::_exit(127);
}

// Waits until a spawn_cli child's stdout holds `text`, at most `limit` (the test's checks then say
// what is missing).
void wait_for_stdout(const fs::path& dir, const std::string& text, std::chrono::seconds limit) {
  const auto start = std::chrono::steady_clock::now();
  while (!contains(slurp(dir / "stdout"), text) && std::chrono::steady_clock::now() - start < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// SIGTERM during the scale phase ends it at the next block, not after it (at 896 px and 32 scale
// frames the demo model's scale phase took 153 s on a 2-core machine; a supervisor's SIGTERM waited
// all of it). Here the signal comes once the run says the scale phase (16 frames at 560 px, about
// 20 s in a release build) has begun: no frame has a result (the old behaviour gave all 16), all 16
// were given to the model, the run says interrupted, exits 143 and leaves valid files.
TEST(RunReliability, SigtermDuringTheScalePhaseEndsItAtOnce) {
  const fs::path dir = fresh_dir("stop_scale_phase");
  const fs::path out = dir / "out";
  const pid_t pid = spawn_cli(dir, {"run", "--demo", "--demo-frames", "16", "--scale-frames", "16", "--image-size",
                                    "560", "--threads", "2", "--export", "poses,tum,depth,ply", "--out", out.string()});
  ASSERT_GE(pid, 0);
  const std::string announced = "scale phase: frames 0-15 together, no result until it ends\n";
  wait_for_stdout(dir, announced, std::chrono::minutes(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the step
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double stop_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  const std::string log = slurp(dir / "stdout") + slurp(dir / "log");
  ASSERT_TRUE(contains(log, announced)) << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 143) << log;
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "interrupted");
  EXPECT_EQ(summary.at("signal"), "SIGTERM");
  EXPECT_EQ(summary.at("frames"), 0) << "the scale phase ran to its end before the signal was obeyed";
  EXPECT_EQ(summary.at("frames_pushed"), 16);
  EXPECT_EQ(summary.at("frames_without_result"), 16);
  EXPECT_EQ(check_files_valid(out), 0u);
  EXPECT_TRUE(contains(log, "interrupted: 0 frames (0 keyframes), 0 points")) << log;
  RecordProperty("seconds_from_sigterm_to_exit", std::to_string(stop_seconds));
}

// A closed terminal or ssh session (SIGHUP) ends the run as SIGTERM does: status interrupted, the
// signal named, exit 129, valid files (it killed the run without a summary). A standard output that
// goes away (`| head`) does not stop the run (SIGPIPE killed it, exit 141, no summary): it completes
// and exits 1 saying its output could not be written.
TEST(RunReliability, SighupEndsTheRunCleanlyAndAClosedStandardOutputDoesNotStopIt) {
  const fs::path dir = fresh_dir("sighup");
  const fs::path out = dir / "out";
  const pid_t pid = spawn_cli(dir, {"run", "--demo", "--demo-frames", "400", "--demo-pace", "0.02", "--scale-frames",
                                    "2", "--threads", "1", "--progress", "lines", "--out", out.string()});
  ASSERT_GE(pid, 0);
  wait_for_stdout(dir, "frame 5 ", std::chrono::minutes(2));
  ::kill(pid, SIGHUP);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string log = slurp(dir / "stdout") + slurp(dir / "log");
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << "\n" << log;
  EXPECT_EQ(WEXITSTATUS(status), 129) << log;
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "interrupted");
  EXPECT_EQ(summary.at("signal"), "SIGHUP");
  EXPECT_GE(summary.at("frames").get<int>(), 6);
  EXPECT_LT(summary.at("frames").get<int>(), 400);
  EXPECT_GT(check_files_valid(out), 0u);

  // Started with SIGHUP ignored (`nohup lingbot-map run ...`): the run goes on after the terminal
  // closes (it stopped, as the old handler replaced nohup's disposition); SIGTERM still stops it.
  const fs::path kept = dir / "nohup";
  fs::create_directories(kept);
  const pid_t nohup = spawn_cli(kept, {"run", "--demo", "--demo-frames", "400", "--demo-pace", "0.02", "--scale-frames",
                                      "2", "--threads", "1", "--progress", "lines", "--out", (kept / "out").string()},
                                /*ignore_sighup=*/true);
  ASSERT_GE(nohup, 0);
  wait_for_stdout(kept, "frame 5 ", std::chrono::minutes(2));
  ::kill(nohup, SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(::waitpid(nohup, &status, WNOHANG), 0) << "SIGHUP ended a run started with it ignored";
  ::kill(nohup, SIGTERM);
  ASSERT_EQ(::waitpid(nohup, &status, 0), nohup);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  EXPECT_EQ(read_json(kept / "out" / "summary.json").at("signal"), "SIGTERM");

  const fs::path piped = dir / "piped";
  const Result r = run_command("bash -c '" + std::string(LINGBOT_CLI_PATH) + " run --demo --demo-frames 30 --scale-frames 2 "
                               "--threads 1 --progress lines --export poses --out " + piped.string() +
                               " | head -2; exit ${PIPESTATUS[0]}'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "error: cannot write the standard output")) << r.err;
  const json completed = read_json(piped / "summary.json");
  EXPECT_EQ(completed.at("status"), "completed");
  EXPECT_EQ(completed.at("frames"), 30);
}

// File and folder names that are not UTF-8 (Latin-1 archives, camera cards, SMB shares): the run
// completes and its JSON files hold U+FFFD where the bytes were (they used to fail the run at the
// first such frame, or lose summary.json).
TEST(RunReliability, NamesThatAreNotUtf8AreWrittenWithReplacementCharacters) {
  const fs::path dir = fresh_dir("latin1") / "caf\xe9";
  fs::create_directories(dir);
  const char* names[] = {"000000.png", "000001.png", "00000\xe9.png"};
  for (int i = 0; i < 3; ++i) fs::copy_file(fs::path(kTinyFrames) / ("00000" + std::to_string(i) + ".png"), dir / names[i]);
  const fs::path out = dir.parent_path() / "out";
  const Result r = run_cli("run --images '" + dir.string() + "' --model " + kTinyModel + kTinyRunArgs +
                           " --export poses,tum --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_EQ(summary.at("input").at("path"), (dir.parent_path() / "caf\xEF\xBF\xBD").string());
  const json poses = read_json(out / "poses.json");
  ASSERT_EQ(poses.at("frames").size(), 3u);
  EXPECT_EQ(poses.at("frames")[2].at("source"), "00000\xEF\xBF\xBD.png");
}

// Frames in another image format in the folder (.webp, .tif, ...) are not read, as upstream; the run
// says how many, so a sequence missing every other frame is not a surprise.
TEST(RunReliability, InputNoticesNameUnreadFilesAndUnpaddedNumbers) {
  const fs::path dir = fresh_dir("other_formats") / "frames";
  fs::create_directories(dir);
  for (int i = 0; i < 3; ++i)
    fs::copy_file(fs::path(kTinyFrames) / ("00000" + std::to_string(i) + ".png"), dir / ("a" + std::to_string(i) + ".png"));
  for (const char* name : {"b0.webp", "b1.WEBP", "c0.tif", "notes.txt", ".hidden.tif"}) write_file(dir / name, "x");
  const Result r = run_cli("run --images " + dir.string() + " --model " + kTinyModel + kTinyRunArgs +
                           " --export poses --out " + (dir.parent_path() / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "notice: 3 image files of another format in the folder are not read (1 .tif, 2 .webp): "
                              "frames are .jpg, .jpeg, .png and .bmp files\n"))
      << r.out;
  const Result plain = run_cli("run --images " + kTinyFrames + " --model " + kTinyModel + kTinyRunArgs +
                               " --export poses --out " + (dir.parent_path() / "out2").string());
  EXPECT_FALSE(contains(plain.out, "notice: ")) << plain.out;
  // Numbers that are not zero-padded: byte order (upstream's), and a notice naming the first pair.
  const fs::path unpadded = dir.parent_path() / "unpadded";
  fs::create_directories(unpadded);
  for (int i : {1, 2, 10}) fs::copy_file(fs::path(kTinyFrames) / "000000.png", unpadded / ("img" + std::to_string(i) + ".png"));
  const Result order = run_cli("run --images " + unpadded.string() + " --model " + kTinyModel + kTinyRunArgs +
                               " --export poses --out " + (dir.parent_path() / "out3").string());
  ASSERT_EQ(order.exit_code, 0) << order.out << order.err;
  EXPECT_TRUE(contains(order.out, "notice: frames are read in byte order of their names, as upstream sorts them: "
                                  "img10.png comes before img2.png. If the numbers count the capture order, zero-pad "
                                  "them to one width (img002.png, img010.png)\n"))
      << order.out;
}

}  // namespace
