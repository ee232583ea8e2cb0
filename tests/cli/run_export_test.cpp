// `lingbot-map run --export LIST` end to end on the committed tiny case, every export opened by the
// tool of its field: numpy + Open3D (tests/tools/check_exports.py), COLMAP 3.8 (model_converter,
// model_analyzer), the Khronos glTF validator (tests/tools/validate_gltf.cjs). Also the bad-input
// paths (unknown name, a sub-folder that cannot be created) and Ctrl-C mid-run.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "io/export.h"
#include "run_test_util.h"
#include "sanitizer_build.h"

namespace {

using namespace run_test;
using nlohmann::json;

const fs::path kRepo = fs::path(kTestdata).parent_path();
const fs::path kTinyDir = fs::path(kTestdata) / "tiny";
const std::string kExportArgs = " --model " + kTinyModel + kTinyRunArgs + " --keyframe-interval 1";

// Runs a shell command with stdout + stderr captured; a missing tool is exit code 127 (a failure).
Result shell(const std::string& command) {
  const fs::path d = fresh_dir("_shell");
  const int st = std::system((command + " >" + (d / "out").string() + " 2>&1").c_str());
  Result r;
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(d / "out");
  return r;
}

// Every export of a run of `frames` frames (all with finite geometry) is complete and opens in its
// tool with the counts summary.json reports.
void check_all_exports(const fs::path& out, int64_t frames) {
  const json summary = read_json(out / "summary.json");
  const json& ex = summary.at("exports");
  for (const char* name : {"poses", "tum", "depth", "ply", "depth-preview", "npz", "colmap", "glb", "bss"})
    EXPECT_TRUE(ex.contains(name)) << name;
  EXPECT_EQ(summary.at("frames"), frames);
  const int64_t points = summary.at("points").get<int64_t>();
  EXPECT_GT(points, 0);

  // numpy: every NPZ key with its shape, dtype and values (vs depth/*.npy, poses.json); Open3D: points.ply.
  Result r = shell("/usr/bin/python3 " + (kRepo / "tests" / "tools" / "check_exports.py").string() + " " +
                   out.string() + " npz ply");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "npz: " + std::to_string(frames) + " frames, 6 keys per frame, predictions.npz 8 keys: OK"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "ply: Open3D read " + std::to_string(points) + " points")) << r.out;

  // COLMAP reads the text model: one camera and image per frame, the points of points.ply.
  const fs::path bin = out.parent_path() / "colmap_bin";
  fs::remove_all(bin);
  fs::create_directories(bin);
  r = shell("QT_QPA_PLATFORM=offscreen colmap model_converter --input_path " + (out / "colmap").string() +
            " --output_path " + bin.string() + " --output_type BIN");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = shell("QT_QPA_PLATFORM=offscreen colmap model_analyzer --path " + bin.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "Cameras: " + std::to_string(frames) + "\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "Registered images: " + std::to_string(frames) + "\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "Points: " + std::to_string(points) + "\n")) << r.out;
  // ... and finds the picture of every image in colmap/images (it skips a missing one silently).
  const fs::path undistorted = out.parent_path() / "colmap_undistorted";
  fs::remove_all(undistorted);
  r = shell("QT_QPA_PLATFORM=offscreen colmap image_undistorter --image_path " + (out / "colmap" / "images").string() +
            " --input_path " + (out / "colmap").string() + " --output_path " + undistorted.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(static_cast<int64_t>(count_files(undistorted / "images", ".png")), frames) << r.out;
  EXPECT_EQ(static_cast<int64_t>(count_files(out / "colmap" / "images", ".png")), frames);

  // The Khronos validator: no errors, and the points, frustums and trajectory are there.
  r = shell("node " + (kRepo / "tests" / "tools" / "validate_gltf.cjs").string() + " " + (out / "scene.glb").string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json v = json::parse(r.out);
  EXPECT_EQ(v.at("numErrors"), 0) << r.out;
  EXPECT_EQ(v.at("info").at("drawCallCount"), 3) << r.out;
  const int64_t keyframes = summary.at("keyframes").get<int64_t>();
  EXPECT_EQ(v.at("info").at("totalVertexCount"), points + 16 * keyframes + frames) << r.out;

  // bss: one line per frame in each file; depth previews: one 8-bit RGB PNG per frame.
  const auto traj = read_lines(out / "bss" / "traj.txt"), intr = read_lines(out / "bss" / "intrinsics.txt");
  ASSERT_EQ(static_cast<int64_t>(traj.size()), frames);
  ASSERT_EQ(static_cast<int64_t>(intr.size()), frames);
  const json poses = read_json(out / "poses.json");
  for (int64_t i = 0; i < frames; ++i) {
    ASSERT_EQ(traj[i].size(), 13u);
    ASSERT_EQ(intr[i].size(), 7u);
    const json& c2w = poses["frames"][i]["c2w"];
    for (int k = 0; k < 12; ++k) EXPECT_NEAR(std::stod(traj[i][1 + k]), c2w[k / 4][k % 4].get<double>(), 1e-6);
    EXPECT_EQ(intr[i][5], std::to_string(poses.at("image_width").get<int>()));
  }
  EXPECT_EQ(static_cast<int64_t>(count_files(out / "depth_preview", ".png")), frames);
  const PngInfo png = parse_png_header(slurp(out / "depth_preview" / "000000.png"));
  EXPECT_EQ(png.bit_depth, 8);
  EXPECT_EQ(png.colour_type, 2);  // RGB
}

TEST(RunExport, TinyCaseEveryExportOpensInItsTool) {
  const fs::path out = fresh_dir("export_all") / "out";
  const Result r = run_cli("run --images " + (kTinyDir / "frames").string() + kExportArgs + " --export all --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  check_all_exports(out, 10);
  // A second run into the same folder with fewer exports leaves none of the first run's files.
  const Result r2 = run_cli("run --images " + (kTinyDir / "frames").string() + kExportArgs + " --export poses --out " + out.string());
  ASSERT_EQ(r2.exit_code, 0) << r2.out << r2.err;
  for (const char* gone : {"trajectory.tum", "points.ply", "scene.glb", "predictions.npz", "colmap/images.txt",
                           "bss/traj.txt", "predictions/meta.npz", "depth/000000.npy", "depth_preview/000000.png",
                           "viewer/000000.bin", "colmap/images/000000.png"})
    EXPECT_FALSE(fs::exists(out / gone)) << gone;
  EXPECT_EQ(read_json(out / "poses.json").at("frames").size(), 10u);
}

// --pipeline on (reader and writer threads, the default) and off (one thread) write the same bytes
// in every file of every export; summary.json differs only in the option and the measurements.
TEST(RunExport, PipelineOnAndOffWriteTheSameFiles) {
  const fs::path dir = fresh_dir("export_pipeline");
  for (const std::string p : {"on", "off"}) {
    const Result r = run_cli("run --images " + (kTinyDir / "frames").string() + kExportArgs + " --export all --pipeline " +
                             p + " --out " + (dir / p).string());
    ASSERT_EQ(r.exit_code, 0) << p << r.out << r.err;
  }
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "on")) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), dir / "on");
    ASSERT_TRUE(fs::exists(dir / "off" / rel)) << rel;
    ++files;
    if (rel == "summary.json") continue;
    EXPECT_TRUE(slurp(e.path()) == slurp(dir / "off" / rel)) << rel << " differs between --pipeline on and off";
  }
  EXPECT_GT(files, 40u);
  json a = read_json(dir / "on" / "summary.json"), b = read_json(dir / "off" / "summary.json");
  EXPECT_EQ(a["options"]["pipeline"], "on");
  EXPECT_EQ(b["options"]["pipeline"], "off");
  for (json* j : {&a, &b}) {
    for (const char* k : {"seconds", "peak_rss_bytes"}) j->erase(k);
    (*j)["options"].erase("pipeline");
  }
  EXPECT_EQ(a.dump(), b.dump());
}

// The registry's folder of each export (io::ExportKind::folder, which --export-preprocessed must keep
// out of) is where that export's files really go, as its report in summary.json lists them.
TEST(RunExport, RegistryFoldersAreWhereEachExportWrites) {
  const fs::path out = fresh_dir("export_folders") / "out";
  const Result r = run_cli("run --demo --demo-frames 4 --scale-frames 2 --export all --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto exports = read_json(out / "summary.json")["exports"];
  for (const lingbot::io::ExportKind& kind : lingbot::io::export_kinds()) {
    const std::string name(kind.name), folder(kind.folder);
    ASSERT_TRUE(exports.contains(name)) << name;
    int in_folder = 0;
    for (const auto& [file, what] : exports[name]["files"].items()) {
      const size_t slash = file.find('/');
      if (slash == std::string::npos) continue;  // a file of the output folder itself (predictions.npz)
      EXPECT_EQ(file.substr(0, slash), folder) << name << ": " << file;
      ++in_folder;
    }
    EXPECT_EQ(in_folder > 0, !folder.empty()) << name << " declares folder '" << folder << "'";
  }
}

// A re-run with fewer exports takes the emptied folders of the exports it no longer writes (no empty
// bss/, colmap/, predictions/ left behind); a folder holding anything else stays, and an export
// folder that is a link (to another disk) stays a link.
TEST(RunExport, AReRunWithFewerExportsLeavesNoEmptyFolders) {
  const fs::path dir = fresh_dir("export_rerun");
  const fs::path out = dir / "out", elsewhere = dir / "depth-elsewhere";
  ASSERT_EQ(run_cli("run --demo --demo-frames 3 --scale-frames 2 --export all --out " + out.string()).exit_code, 0);
  write_file(out / "colmap" / "notes.txt", "mine");
  fs::create_directories(elsewhere);
  fs::rename(out / "depth", elsewhere / "depth");
  fs::create_directory_symlink(elsewhere / "depth", out / "depth");
  const Result r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(out / "bss"));
  EXPECT_FALSE(fs::exists(out / "predictions"));
  EXPECT_TRUE(fs::exists(out / "colmap" / "notes.txt"));  // not ours: the folder stays, only our files went
  EXPECT_FALSE(fs::exists(out / "colmap" / "cameras.txt"));
  EXPECT_TRUE(fs::is_symlink(out / "depth"));
  EXPECT_TRUE(fs::exists(elsewhere / "depth" / "000002.png"));
}

TEST(RunExport, DefaultSetIsDocumented) {
  const fs::path out = fresh_dir("export_default") / "out";
  const Result r = run_cli("run --demo --demo-frames 3 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json ex = read_json(out / "summary.json").at("exports");
  std::vector<std::string> names;
  for (const auto& [k, v] : ex.items()) names.push_back(k);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"depth", "depth-preview", "ply", "poses", "tum", "viewer"}));
  EXPECT_EQ(count_files(out / "depth_preview", ".png"), 3u);
  EXPECT_FALSE(fs::exists(out / "colmap"));
  const Result help = run_cli("run --help");
  EXPECT_TRUE(contains(help.out, "--export")) << help.out;
  EXPECT_TRUE(contains(help.out, "poses,tum,depth,ply,depth-preview,viewer")) << help.out;
}

// The point count of the summary and the closing line is that of whichever export keeps points
// (they all keep the same ones; scene.glb before its budget), and "no point export" without one.
TEST(RunExport, PointCountComesFromAnyPointExport) {
  const fs::path dir = fresh_dir("export_points");
  int64_t ply_points = -1;
  for (const std::string list : {"ply", "glb", "colmap", "viewer", "poses,depth"}) {
    const fs::path out = dir / list;
    const Result r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --export " + list + " --out " + out.string());
    ASSERT_EQ(r.exit_code, 0) << list << r.err;
    const json summary = read_json(out / "summary.json");
    if (list == "poses,depth") {
      EXPECT_TRUE(summary.at("points").is_null());
      EXPECT_TRUE(contains(r.out, "completed: 3 frames (3 keyframes), no point export, ")) << r.out;
      continue;
    }
    const int64_t points = summary.at("points").get<int64_t>();
    if (list == "ply") ply_points = points;
    EXPECT_GT(points, 0) << list;
    EXPECT_EQ(points, ply_points) << list;
    EXPECT_TRUE(contains(r.out, "completed: 3 frames (3 keyframes), " + std::to_string(points) + " points, ")) << r.out;
  }
}

// Empty point clouds are valid files, but some tools refuse them: the run says why they are empty.
TEST(RunExport, NoPointKeptIsNoticed) {
  const fs::path out = fresh_dir("export_no_points") / "out";
  const Result r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --export ply --conf-threshold 1e9 --out " +
                           out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "notice: no point passed --conf-threshold 1e+09: the point clouds are empty (a lower "
                              "threshold keeps points)\n")) << r.out;
  EXPECT_EQ(read_json(out / "summary.json").at("points"), 0);
  const Result kept = run_cli("run --demo --demo-frames 3 --scale-frames 2 --export ply --out " + out.string());
  ASSERT_EQ(kept.exit_code, 0) << kept.out << kept.err;
  EXPECT_FALSE(contains(kept.out, "notice: no point")) << kept.out;
}

// Past its budget scene.glb is a sample: the console says so (only summary.json's counts did).
TEST(RunExport, AGlbPastItsPointBudgetIsSaidToBeASample) {
  if (LINGBOT_ASAN_BUILD) GTEST_SKIP() << "2 million points at 518 px take half a minute under AddressSanitizer; the glb "
                                          "writer's paths are the smaller runs'";
  const fs::path out = fresh_dir("export_glb_budget") / "out";
  const Result r = run_cli("run --demo --image-size 518 --demo-frames 12 --downsample 1 --conf-threshold 0 "
                           "--export glb --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json glb = read_json(out / "summary.json").at("exports").at("glb");
  const int64_t seen = glb.at("points_before_budget");
  ASSERT_GT(seen, 2000000);
  EXPECT_EQ(glb.at("points"), 2000000);
  EXPECT_TRUE(contains(r.out, "glb: scene.glb holds a uniform random sample of 2000000 of the " + std::to_string(seen) +
                                  " points (its budget)\n")) << r.out;
  const Result small = run_cli("run --demo --demo-frames 3 --scale-frames 2 --export glb --out " + out.string());
  ASSERT_EQ(small.exit_code, 0) << small.out << small.err;
  EXPECT_FALSE(contains(small.out, "glb: ")) << small.out;
}

TEST(RunExport, UnknownNameIsOneErrorLineAndWritesNothing) {
  const fs::path out = fresh_dir("export_unknown") / "out";
  const Result r = run_cli("run --demo --export poses,colmp --out " + out.string());
  EXPECT_EQ(r.exit_code, 2);  // a word that is not one of the option's (docs/cli.md "Exit codes and errors")
  EXPECT_EQ(r.err,
            "error: --export: unknown export 'colmp' (choose from poses, tum, depth, ply, depth-preview, viewer, npz, "
            "colmap, glb, bss, all)\nRun 'lingbot-map run --help' for usage.\n");
  EXPECT_FALSE(fs::exists(out));
}

// --export may be repeated: the lists are joined.
TEST(RunExport, RepeatedExportOptionsAreJoined) {
  const fs::path out = fresh_dir("export_repeated") / "out";
  const Result r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --export poses --export tum,ply --out " +
                           out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json exports = read_json(out / "summary.json").at("exports");
  EXPECT_EQ(exports.size(), 3u) << exports.dump();
  for (const char* name : {"poses", "tum", "ply"}) EXPECT_TRUE(exports.contains(name)) << name;
}

TEST(RunExport, SubFolderThatCannotBeCreatedFailsBeforeWriting) {
  const fs::path out = fresh_dir("export_badsub") / "out";
  fs::create_directories(out);
  std::ofstream(out / "colmap") << "a file where the colmap folder goes";
  const Result r = run_cli("run --demo --demo-frames 2 --export all --out " + out.string());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.err, "error: cannot create folder " + (out / "colmap").string() + ": Not a directory\n");
  // Nothing half-written: no output file at all (only the empty folders of the exports before it).
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) {
      EXPECT_EQ(e.path(), out / "colmap");
    }
}

TEST(RunExport, ReadOnlySubFolderFailsBeforeWriting) {
  // Root writes into a mode-0555 folder: as root (CI) the run goes as nobody, in folders of nobody's.
  const bool root = ::geteuid() == 0;
  const fs::path dir = fresh_dir("export_ro"), out = dir / "out";
  fs::create_directories(out / "bss");
  if (root) {
    for (const fs::path& p : {out, out / "bss"}) {
      ASSERT_EQ(::chown(p.c_str(), kNobody, kNobody), 0) << p;
    }
  }
  fs::permissions(out / "bss", fs::perms::owner_read | fs::perms::owner_exec);
  const Result r = run_cli_unprivileged("run --demo --demo-frames 2 --export poses,bss --out " + out.string(), dir);
  fs::permissions(out / "bss", fs::perms::owner_all);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "error: folder " + (out / "bss").string() + " is not writable: Permission denied\n");
  EXPECT_FALSE(fs::exists(out / "poses.json"));
}

// Ctrl-C mid-run: every chosen export is complete and valid for the frames done.
TEST(RunExport, InterruptLeavesEveryExportValid) {
  const fs::path dir = fresh_dir("export_sigint");
  const fs::path frames = dir / "frames", out = dir / "out";
  fs::create_directories(frames);
  constexpr int kFrames = 80;  // the tiny case's 10 frames, repeated: long enough to interrupt
  for (int i = 0; i < kFrames; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "%06d.png", i);
    fs::copy_file(kTinyDir / "frames" / (std::string("00000") + std::to_string(i % 10) + ".png"), frames / name);
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open((dir / "log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string model = (kTinyDir / "model.pt").string();
    ::execl(LINGBOT_CLI_PATH, LINGBOT_CLI_PATH, "run", "--images", frames.c_str(), "--model", model.c_str(),
            "--image-size", "112", "--scale-frames", "2", "--kv-window", "3", "--keyframe-interval", "2",
            "--export", "all", "--out", out.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(out / "bss" / "traj.txt") && read_lines(out / "bss" / "traj.txt").size() >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(dir / "log");
  EXPECT_EQ(WEXITSTATUS(status), 130) << slurp(dir / "log");
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "interrupted");
  const int64_t done = summary.at("frames").get<int64_t>();
  EXPECT_GE(done, 4);
  EXPECT_LT(done, kFrames) << "the run ended before the interrupt: make it longer";
  check_all_exports(out, done);
}

}  // namespace
