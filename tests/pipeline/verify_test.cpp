// `verify` on the golden cases through the public Session: every reference tensor (encoder output,
// every stored aggregator layer/frame, keyframe flags, RoPE time indices, KV-cache traces, poses,
// cameras, depth, confidence, world points) must match with the README's tolerances, for the paged
// and the dense backend.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/error.h"

#include "io/safetensors.h"
#include "bench/harness/verify.h"

namespace {

namespace fs = std::filesystem;
using namespace lingbot;

// checked: rows that must come out "ok" (every reference tensor but the input).
void expect_case_passes(const fs::path& dir, KVBackend backend, int expected_checked = 19) {
  VerifyOptions o;
  o.case_dir = dir.string();
  o.kv_backend = backend;
  o.threads = 1;  // 2 threads give bit-identical results (session_test)
  const VerifyReport r = run_verify(o);
  int checked = 0;
  for (const VerifyRow& row : r.rows) {
    if (row.status == "ok") ++checked;
    EXPECT_NE(row.status, "FAIL") << row.tensor << ": " << row.note;
  }
  // tiny: patch tokens, 4 aggregated layers, 2 per-frame traces, 4 cache traces, 8 head outputs
  EXPECT_EQ(checked, expected_checked) << format_verify_report(r);
  EXPECT_TRUE(r.passed());
  std::cout << dir.filename().string() << " [" << kv_backend_name(backend) << "]: peak RSS "
            << r.peak_rss_bytes / (1024 * 1024) << " MiB, streaming " << r.seconds << " s\n";
}

fs::path shared_case(const std::string& name) { return fs::path(LINGBOT_SHARED_GOLDEN_DIR) / name; }

}  // namespace

TEST(Verify, TinyPaged) { expect_case_passes(fs::path(LINGBOT_TESTDATA_DIR) / "tiny", KVBackend::Paged); }
TEST(Verify, TinyDense) { expect_case_passes(fs::path(LINGBOT_TESTDATA_DIR) / "tiny", KVBackend::Dense); }

TEST(Verify, SharedGoldenCasesBothBackends) {
  for (const std::string name : {"tiny-keyframes", "small-d24"}) {
    const fs::path dir = shared_case(name);
    if (!fs::exists(dir / "case.json")) {
      std::cout << "[ SKIPPED ] shared golden case " << dir << " not present\n";
      GTEST_SKIP() << "shared golden cases not present at " << LINGBOT_SHARED_GOLDEN_DIR;
    }
    for (KVBackend b : {KVBackend::Paged, KVBackend::Dense}) expect_case_passes(dir, b);
  }
}

// Flow keyframes and windowed mode (golden README "Windowed mode and flow keyframes"): cases without an
// `images` tensor (frames/*.png), per-frame flow values (1e-3 relative), every keyframe decision,
// window bounds, per-window Sim(3), raw window rows and per-step traces. Checked rows per case:
//   streaming-flow-tiny 21 = 8 head outputs + is_keyframe, frame_type, flow_magnitude, flow_keyframe,
//     rope_time_index + 4 cache traces + 4 step_* traces;
//   windowed-flow-tiny 30, windowed-tiny 26 (no flow tensors, no pose_enc_iters / rope_time_index).
// streaming-flow-tiny and windowed-flow-tiny are copied into testdata/; windowed-tiny is read from the
// shared golden folder when present.
TEST(Verify, FlowAndWindowedCasesBothBackends) {
  const std::vector<std::pair<fs::path, int>> cases = {
      {fs::path(LINGBOT_TESTDATA_DIR) / "streaming-flow-tiny", 21},
      {fs::path(LINGBOT_TESTDATA_DIR) / "windowed-flow-tiny", 30},
      {shared_case("windowed-tiny"), 26},
  };
  std::string missing;  // the shared case may be absent: the test then ends skipped, after the others
  for (const auto& [dir, checked] : cases) {
    if (!fs::exists(dir / "case.json")) {
      missing += (missing.empty() ? "" : ", ") + dir.string();
      continue;
    }
    for (KVBackend b : {KVBackend::Paged, KVBackend::Dense}) expect_case_passes(dir, b, checked);
  }
  if (!missing.empty()) GTEST_SKIP() << "checked the testdata cases only: golden case not present: " << missing;
}

// A reference tensor the engine does not produce is a failure, never silently skipped.
TEST(Verify, UnknownReferenceTensorFails) {
  const fs::path src = fs::path(LINGBOT_TESTDATA_DIR) / "tiny";
  const fs::path dir = fs::temp_directory_path() / ("lingbot_verify_unknown_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(src / "case.json", dir / "case.json", fs::copy_options::overwrite_existing);
  fs::copy_file(src / "weights.safetensors", dir / "weights.safetensors", fs::copy_options::overwrite_existing);
  {
    auto reader = io::SafetensorsReader::open((src / "reference.safetensors").string());
    io::TensorMap t;
    t.emplace("images", reader.read("images"));
    t.emplace("mystery_output", Tensor({2, 2}));
    io::write_safetensors((dir / "reference.safetensors").string(), t);
  }
  VerifyOptions o;
  o.case_dir = dir.string();
  o.threads = 1;
  VerifyReport r = run_verify(o);
  EXPECT_FALSE(r.passed());
  bool found = false;
  for (const VerifyRow& row : r.rows)
    if (row.tensor == "mystery_output") {
      found = true;
      EXPECT_EQ(row.status, "FAIL");
      EXPECT_EQ(row.note, "not implemented");
    }
  EXPECT_TRUE(found);
  EXPECT_NE(format_verify_report(r).find("mystery_output"), std::string::npos);
  // Excluding it explicitly with --only patterns lists it as SKIP and no longer fails.
  o.only = {"images", "patch_*"};
  r = run_verify(o);
  EXPECT_TRUE(r.passed());
  for (const VerifyRow& row : r.rows) {
    if (row.tensor == "mystery_output") {
      EXPECT_EQ(row.status, "SKIP");
    }
  }
  fs::remove_all(dir);
}

// A typo in --only would otherwise "pass" with nothing checked; a case.json path is not the case folder.
TEST(Verify, OnlyThatSelectsNothingAndNonFolderCasesAreErrors) {
  const fs::path tiny = fs::path(LINGBOT_TESTDATA_DIR) / "tiny";
  const auto error_of = [](const VerifyOptions& o) -> std::string {
    try {
      run_verify(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  VerifyOptions o;
  o.case_dir = tiny.string();
  o.only = {"nomatch*"};
  EXPECT_EQ(error_of(o), "verify: the --only list (Python: only=) selects no tensor of " + tiny.string() +
                             " (names as listed in its report, e.g. depth, pose_enc*)");
  o.only = {};
  o.case_dir = (tiny / "case.json").string();
  EXPECT_EQ(error_of(o), "verify: '" + o.case_dir + "' is not a folder (give the case folder, the one holding case.json)");
  o.case_dir = (tiny / "missing").string();
  EXPECT_EQ(error_of(o), "verify: golden case folder not found: " + o.case_dir);
  const fs::path loop = fs::temp_directory_path() / ("lingbot_verify_loop_" + std::to_string(::getpid()));
  fs::remove_all(loop);
  fs::create_directories(loop);
  fs::create_symlink(loop / "b", loop / "a");
  fs::create_symlink(loop / "a", loop / "b");
  o.case_dir = (loop / "a").string();
  EXPECT_EQ(error_of(o), "verify: case directory '" + o.case_dir +
                             "' is a symbolic link loop (Too many levels of symbolic links)");
  fs::remove_all(loop);
}

TEST(Verify, UnsupportedScenarioFailsLoudly) {
  const fs::path dir = fs::temp_directory_path() / ("lingbot_verify_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "case.json") << R"({"scenario": {"num_scale_frames": 2, "kv_cache_scale_frames": 3,
      "kv_cache_sliding_window": 3}, "weights_file": "w.safetensors"})";
  }
  VerifyOptions o;
  o.case_dir = dir.string();
  try {
    run_verify(o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "case.json: scenario.kv_cache_scale_frames (3) != num_scale_frames (2) is not supported: the engine "
              "uses one value for both");
  }
  fs::remove_all(dir);
}
