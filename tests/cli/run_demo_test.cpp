// `lingbot-map run --demo`: the whole pipeline on the built-in random-weight model and generated
// frames. Every output file must exist and parse; Ctrl-C must leave valid files and exit 130.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "io/npy.h"
#include "run_test_util.h"

namespace {

using namespace run_test;
using nlohmann::json;

constexpr int kW = 112, kH = 70;

// Checks every file `run` writes for a run that completed `frames` frames.
void check_outputs(const fs::path& out, int64_t frames) {
  // poses.json: schema, frame order, c2w = inverse(w2c).
  const json poses = read_json(out / "poses.json");
  EXPECT_EQ(poses.at("format"), "lingbot-map poses");
  EXPECT_EQ(poses.at("version"), 1);
  EXPECT_EQ(poses.at("image_width"), kW);
  EXPECT_EQ(poses.at("image_height"), kH);
  const json& fr = poses.at("frames");
  EXPECT_EQ(static_cast<int64_t>(fr.size()), frames);
  for (size_t i = 0; i < fr.size(); ++i) {
    const json& f = fr[i];
    EXPECT_EQ(f.at("index"), static_cast<int64_t>(i));
    EXPECT_TRUE(f.at("keyframe").is_boolean());
    EXPECT_TRUE(f.at("source").is_string());
    EXPECT_TRUE(f.at("timestamp").is_number());
    const json &c2w = f.at("c2w"), &w2c = f.at("w2c"), &K = f.at("intrinsics");
    ASSERT_EQ(c2w.size(), 4u);
    ASSERT_EQ(w2c.size(), 3u);
    ASSERT_EQ(K.size(), 3u);
    for (int r = 0; r < 4; ++r) ASSERT_EQ(c2w[r].size(), 4u);
    for (int r = 0; r < 3; ++r) ASSERT_EQ(w2c[r].size(), 4u);
    for (int r = 0; r < 3; ++r) ASSERT_EQ(K[r].size(), 3u);
    EXPECT_DOUBLE_EQ(K[0][2].get<double>(), kW / 2.0);
    EXPECT_DOUBLE_EQ(K[1][2].get<double>(), kH / 2.0);
    // The demo model's camera is plausible: valid, focal lengths near the generated frames' own
    // (0.9 x width = 100.8 px), so the README's first run shows a sane frustum-shaped cloud.
    EXPECT_EQ(f.at("valid"), true);
    EXPECT_NEAR(K[0][0].get<double>(), 0.9 * kW, 15.0) << "frame " << i;
    EXPECT_NEAR(K[1][1].get<double>(), 0.9 * kW, 15.0) << "frame " << i;
    // w2c (as 4x4) times c2w is the identity.
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) {
        double s = 0;
        for (int k = 0; k < 4; ++k) s += w2c[r][k].get<double>() * c2w[k][c].get<double>();
        EXPECT_NEAR(s, r == c ? 1.0 : 0.0, 1e-5) << "frame " << i;
      }
  }

  // trajectory.tum: one line per frame, 8 numbers, timestamps = frame index (generated frames).
  const auto tum = read_lines(out / "trajectory.tum");
  EXPECT_EQ(static_cast<int64_t>(tum.size()), frames);
  for (size_t i = 0; i < tum.size(); ++i) {
    ASSERT_EQ(tum[i].size(), 8u) << "line " << i;
    EXPECT_DOUBLE_EQ(std::stod(tum[i][0]), static_cast<double>(i));
    // Translation = camera centre = c2w[:, 3].
    for (int k = 0; k < 3; ++k)
      EXPECT_NEAR(std::stod(tum[i][1 + k]), fr[i].at("c2w")[k][3].get<double>(), 1e-5);
  }

  // depth/: PNG (16-bit grey) + npy [H, W] for depth and confidence, nothing else.
  size_t depth_files = 0;
  for (const auto& e : fs::directory_iterator(out / "depth")) {
    (void)e;
    ++depth_files;
  }
  EXPECT_EQ(static_cast<int64_t>(depth_files), 4 * frames);
  for (int64_t i = 0; i < frames; ++i) {
    char stem[32];
    std::snprintf(stem, sizeof stem, "%06lld", static_cast<long long>(i));
    for (const std::string suffix : {"", "_conf"}) {
      const PngInfo png = parse_png_header(slurp(out / "depth" / (stem + suffix + ".png")));
      EXPECT_EQ(png.width, static_cast<uint32_t>(kW)) << stem << suffix;
      EXPECT_EQ(png.height, static_cast<uint32_t>(kH)) << stem << suffix;
      EXPECT_EQ(png.bit_depth, 16) << stem << suffix;
      EXPECT_EQ(png.colour_type, 0) << stem << suffix;
      const lingbot::io::NpyArray npy = lingbot::io::read_npy_f32(out / "depth" / (stem + suffix + ".npy"));
      EXPECT_EQ(npy.shape, (std::vector<int64_t>{kH, kW})) << stem << suffix;
      for (float v : npy.data) EXPECT_TRUE(std::isfinite(v) && v > 0) << stem << suffix;
    }
  }

  // points.ply: binary little-endian, x y z float + r g b uchar; size = header + 15 bytes per vertex.
  const std::string ply = slurp(out / "points.ply");
  const PlyInfo info = parse_ply_header(ply);
  EXPECT_EQ(info.format, "binary_little_endian 1.0");
  EXPECT_EQ(info.properties, (std::vector<std::string>{"float x", "float y", "float z", "uchar red", "uchar green",
                                                        "uchar blue"}));
  EXPECT_GE(info.vertices, 0);
  EXPECT_EQ(ply.size(), info.header_bytes + static_cast<size_t>(info.vertices) * 15);
  // Every point finite and in front of the cameras (the demo cameras stay near the origin).
  EXPECT_GT(info.vertices, 0);
  for (int64_t v = 0; v < info.vertices; ++v) {
    float xyz[3];
    std::memcpy(xyz, ply.data() + info.header_bytes + static_cast<size_t>(v) * 15, 12);
    ASSERT_TRUE(std::isfinite(xyz[0]) && std::isfinite(xyz[1]) && std::isfinite(xyz[2])) << "vertex " << v;
    ASSERT_GT(xyz[2], 0.0f) << "vertex " << v;
  }

  // summary.json
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("format"), "lingbot-map run summary");
  EXPECT_EQ(summary.at("frames"), frames);
  EXPECT_EQ(summary.at("points"), info.vertices);
  EXPECT_EQ(summary.at("demo"), true);
  EXPECT_TRUE(summary.at("warning").is_string());
  EXPECT_EQ(summary.at("image_width"), kW);
  EXPECT_EQ(summary.at("image_height"), kH);
  int64_t keyframes = 0;
  for (const auto& f : fr) keyframes += f.at("keyframe").get<bool>() ? 1 : 0;
  EXPECT_EQ(summary.at("keyframes"), keyframes);
  EXPECT_GT(summary.at("peak_rss_bytes").get<int64_t>(), 0);
  EXPECT_TRUE(summary.at("device_peak_bytes").is_null());  // a CPU run has no device memory
  EXPECT_TRUE(summary.at("device_kv_cache_bytes").is_null());
  EXPECT_GE(summary.at("seconds").at("per_frame").get<double>(), 0.0);
  EXPECT_GE(summary.at("seconds").at("total").get<double>(), summary.at("seconds").at("inference").get<double>());
  EXPECT_GT(summary.at("cache").at("bytes_reserved").get<int64_t>(), 0);
  EXPECT_EQ(summary.at("options").at("image_size"), kW);
  EXPECT_EQ(summary.at("options").at("conf_threshold"), 1.5);
  EXPECT_EQ(summary.at("options").at("downsample"), 10);
  EXPECT_EQ(summary.at("warnings"), json::array());
}

// Starts `run --demo` on a million frames, waits for `min_frames` TUM lines, sends `sig`.
// Returns the wait status; the log is in dir/log.
// `times` 2: the signal sent again once the first is taken (as timeout(1) signals the process, then its group).
int run_demo_and_signal(const fs::path& dir, const fs::path& out, int sig, size_t min_frames, int times = 1) {
  const pid_t pid = ::fork();
  EXPECT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open((dir / "log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string pre = (dir / "pre").string();
    ::execl(LINGBOT_CLI_PATH, LINGBOT_CLI_PATH, "run", "--demo", "--demo-frames", "1000000", "--out", out.c_str(),
            "--export-preprocessed", pre.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(out / "trajectory.tum") && read_lines(out / "trajectory.tum").size() >= min_frames) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, sig);
  if (times == 2) {
    // A signal sent while the same one is still pending is merged into it: the second goes once the
    // first has been taken (its bit cleared in SigPnd and ShdPnd), well within the 1 s of one interrupt.
    const auto sent = std::chrono::steady_clock::now();
    const auto pending = [&] {
      std::ifstream st("/proc/" + std::to_string(pid) + "/status");
      const uint64_t bit = uint64_t{1} << (sig - 1);
      for (std::string line; std::getline(st, line);)
        if ((line.starts_with("SigPnd:") || line.starts_with("ShdPnd:")) && (std::stoull(line.substr(7), nullptr, 16) & bit))
          return true;
      return false;
    };
    while (pending()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    ::kill(pid, sig);
    EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::milliseconds(500)) << "not at once";
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

TEST(RunDemo, WritesEveryFileAndTheyParse) {
  const fs::path out = fresh_dir("demo") / "out";  // created by run
  const Result r = run_cli("run --demo --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "MEANINGLESS")) << r.out;
  EXPECT_TRUE(contains(r.out, "completed: 12 frames (12 keyframes)")) << r.out;
  // Plain progress lines when not on a terminal: the frame index (as the files name it), the count done.
  EXPECT_TRUE(contains(r.out, "\nframe 0 (1/12, scale frame)  ")) << r.out;
  EXPECT_TRUE(contains(r.out, "\nframe 11 (12/12, keyframe)  ")) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
  check_outputs(out, 12);
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_EQ(summary.at("interrupted"), false);
  EXPECT_FALSE(summary.contains("error"));
  EXPECT_EQ(summary.at("keyframes"), 12);  // 8 scale frames + 4 with interval 1
  EXPECT_GT(summary.at("points").get<int64_t>(), 0) << "confidence filter removed every point";
}

// Past 320 frames the keyframe interval defaults to ceil(frames / 320) (upstream demo.py), which
// bounds the frames the cache stores; the per-frame keyframe flags follow it after the scale phase.
TEST(RunDemo, AutomaticKeyframeIntervalAbove320Frames) {
  const fs::path out = fresh_dir("demo_auto_kf") / "out";
  // The smallest input (4x4 patches) and poses only: the test is about the keyframe schedule.
  const Result r = run_cli("run --demo --demo-frames 321 --image-size 56 --export poses --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "keyframe interval 2 selected automatically (321 frames > 320)")) << r.out;
  // 8 scale frames, then every 2nd of the remaining 313 frames: 8 + 157 = 165.
  EXPECT_TRUE(contains(r.out, "completed: 321 frames (165 keyframes)")) << r.out;
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("options").at("keyframe_interval"), 2);
  EXPECT_EQ(summary.at("keyframes"), 165);
  EXPECT_EQ(summary.at("cache").at("frames_stored"), 165);
  EXPECT_EQ(summary.at("cache").at("frames_resident"), 8 + 64);
  EXPECT_TRUE(summary.at("options").at("export_preprocessed").is_null());  // not given: null, as fps (it was "")
  const json poses = read_json(out / "poses.json");
  const json& fr = poses.at("frames");
  ASSERT_EQ(fr.size(), 321u);
  for (size_t i = 0; i < fr.size(); ++i)
    EXPECT_EQ(fr[i].at("keyframe").get<bool>(), i < 8 || (i - 8) % 2 == 0) << "frame " << i;
}

TEST(RunDemo, ResultsDoNotDependOnThreadsAndRerunReplacesOutputs) {
  const fs::path dir = fresh_dir("demo_threads");
  const Result a = run_cli("run --demo --threads 1 --keyframe-interval 2 --out " + (dir / "a").string());
  const Result b =
      run_cli("run --demo --threads 2 --keyframe-interval 2 --out " + (dir / "b").string());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  check_outputs(dir / "a", 12);
  // Bit-identical for any thread count (fixed reduction order); compared without printing bytes.
  for (const char* file : {"poses.json", "trajectory.tum", "points.ply", "depth/000011.npy", "depth/000011_conf.png"})
    EXPECT_TRUE(slurp(dir / "a" / file) == slurp(dir / "b" / file)) << file << " differs between 1 and 2 threads";
  // Keyframes: 8 scale frames, then frames 8 and 10 of 8..11.
  const json poses = read_json(dir / "a" / "poses.json");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(poses["frames"][i]["keyframe"], i < 8 || i == 8 || i == 10) << i;

  // A shorter run into the same folder leaves only its own files.
  const Result c = run_cli("run --demo --demo-frames 3 --out " + (dir / "a").string());
  ASSERT_EQ(c.exit_code, 0) << c.err;
  check_outputs(dir / "a", 3);  // 3 < 8 scale frames: the whole stream is one scale phase at finish
}

// SIGTERM (what service managers and `timeout` send) is handled like Ctrl-C: exit code 143.
TEST(RunDemo, SigtermLeavesSummaryAndValidFilesAndExits143) {
  const fs::path dir = fresh_dir("demo_sigterm");
  const int status = run_demo_and_signal(dir, dir / "out", SIGTERM, 10);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(dir / "log");
  EXPECT_EQ(WEXITSTATUS(status), 143) << slurp(dir / "log");
  const json summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary.at("status"), "interrupted");
  EXPECT_EQ(summary.at("signal"), "SIGTERM");
  check_outputs(dir / "out", summary.at("frames").get<int64_t>());
}

// kill -9 (or a second Ctrl-C) ends the process at once: no summary.json, but every per-frame file
// on disk is valid for the frames it holds (they differ by at most the frame being written).
TEST(RunDemo, KillNineLeavesEveryPerFrameFileValid) {
  const fs::path dir = fresh_dir("demo_sigkill");
  const fs::path out = dir / "out";
  const int status = run_demo_and_signal(dir, out, SIGKILL, 12);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(fs::exists(out / "summary.json"));
  const json poses = read_json(out / "poses.json");  // parses: the trailer is rewritten on each frame
  const int64_t frames = static_cast<int64_t>(poses.at("frames").size());
  const auto tum = read_lines(out / "trajectory.tum");
  for (const auto& line : tum) ASSERT_EQ(line.size(), 8u);
  EXPECT_GE(static_cast<int64_t>(tum.size()), frames - 1);
  EXPECT_LE(static_cast<int64_t>(tum.size()), frames);
  const std::string ply = slurp(out / "points.ply");
  const PlyInfo info = parse_ply_header(ply);
  ASSERT_GE(info.vertices, 0);
  // The vertex data may run ahead of the header's count by the frame being written, never behind.
  EXPECT_GE(ply.size(), info.header_bytes + static_cast<size_t>(info.vertices) * 15);
  int64_t complete = 0;
  for (int64_t i = 0; i < frames + 1; ++i) {
    char stem[32];
    std::snprintf(stem, sizeof stem, "%06lld", static_cast<long long>(i));
    int present = 0;
    for (const std::string suffix : {".npy", ".png", "_conf.npy", "_conf.png"}) {
      const fs::path p = out / "depth" / (stem + suffix);
      if (!fs::exists(p)) continue;
      ++present;
      if (suffix.ends_with(".npy")) {
        EXPECT_EQ(lingbot::io::read_npy_f32(p).data.size(), static_cast<size_t>(kW * kH)) << p;
      } else {
        EXPECT_EQ(parse_png_header(slurp(p)).height, static_cast<uint32_t>(kH)) << p;
      }
    }
    if (present == 4) ++complete;
  }
  EXPECT_GE(complete, frames - 1);
  EXPECT_GE(frames, 12);
}

// Ctrl-C: stop the step in progress, finalise the files, summary "interrupted", exit code 130.
TEST(RunDemo, InterruptLeavesValidFilesAndExits130) {
  const fs::path dir = fresh_dir("demo_sigint");
  const fs::path out = dir / "out";
  const int status = run_demo_and_signal(dir, out, SIGINT, 10);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(dir / "log");
  EXPECT_EQ(WEXITSTATUS(status), 130) << slurp(dir / "log");
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "interrupted");
  EXPECT_EQ(summary.at("interrupted"), true);
  EXPECT_EQ(summary.at("signal"), "SIGINT");
  const int64_t frames = summary.at("frames").get<int64_t>();
  EXPECT_GE(frames, 10);
  EXPECT_LT(frames, 1000000);
  check_outputs(out, frames);
  // --export-preprocessed wrote exactly the frames the model got, not the reader's read-ahead.
  size_t pngs = 0;
  for (const auto& e : fs::directory_iterator(dir / "pre")) pngs += e.path().extension() == ".png";
  EXPECT_EQ(static_cast<int64_t>(pngs), summary.at("frames_pushed").get<int64_t>());
  EXPECT_EQ(summary.at("options").at("export_preprocessed"), (dir / "pre").string());
}

// The same interrupt delivered twice at once (`timeout -s INT` without --foreground signals the process,
// then its process group) is one Ctrl-C: the run stops cleanly. It ended at once, without summary.json.
TEST(RunDemo, AnInterruptDeliveredTwiceAtOnceIsOneCtrlC) {
  const fs::path dir = fresh_dir("demo_sigint_twice");
  const fs::path out = dir / "out";
  const int status = run_demo_and_signal(dir, out, SIGINT, 10, 2);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(dir / "log");
  EXPECT_EQ(WEXITSTATUS(status), 130) << slurp(dir / "log");
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "interrupted");
  EXPECT_FALSE(contains(slurp(dir / "log"), "second interrupt"));
  check_outputs(out, summary.at("frames").get<int64_t>());
}

}  // namespace
