// CLI contract of the weights dtype (issue #16): `run --weights-dtype` (banner line, summary.json,
// unknown value -> one error line naming the choices, slow dtype -> one notice line), `verify
// --weights-dtype`, and `bench model` on the tiny demo model (CSV rows, summary keys, errors).
// Timings are not checked.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "kernels/cpu/ops.h"
#include "run_test_util.h"

namespace {

using namespace run_test;

int count_lines(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

TEST(WeightsDtypeCli, RunBannerAndSummary) {
  const fs::path out = fresh_dir("wd_run");
  const Result r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --weights-dtype bf16 --threads 1 --out " +
                           out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "weights: bf16 for the block linears (" +
                                  lingbot::kernels::gemm_path_description(lingbot::DType::BF16) + ")"))
      << r.out;
  const auto s = read_json(out / "summary.json");
  EXPECT_EQ(s["options"]["weights_dtype"], "bf16");
  EXPECT_GT(s["seconds"]["first_frame"].get<double>(), 0.0);
  EXPECT_LE(s["seconds"]["first_frame"].get<double>(), s["seconds"]["total"].get<double>());
}

// The defaults of `run` (docs/cli.md "Defaults"): bf16 KV cache; weights `auto` = bf16 where the CPU
// has a native bf16 GEMM. The oracle for "native" is the CPU's own flag list, not the engine.
bool cpu_has_native_bf16() {
  const std::string cpuinfo = slurp("/proc/cpuinfo");
  return contains(cpuinfo, " avx512_bf16") || contains(cpuinfo, " amx_bf16");
}

TEST(WeightsDtypeCli, RunDefaultsToBf16KvAndAutoWeights) {
  const fs::path out = fresh_dir("wd_defaults");
  const Result r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --threads 1 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string weights = cpu_has_native_bf16() ? "bf16" : "f32";
  const auto s = read_json(out / "summary.json");
  EXPECT_EQ(s["options"]["kv_dtype"], "bf16");
  EXPECT_EQ(s["options"]["weights_dtype"], weights);
  EXPECT_TRUE(contains(r.out, "weights: " + weights + " for the block linears")) << r.out;
  EXPECT_TRUE(contains(r.out, "; auto: " + weights + (weights == "bf16" ? " (native" : " (no native"))) << r.out;
  EXPECT_TRUE(contains(r.out, ", KV bf16,")) << r.out;
  EXPECT_EQ(r.err, "");  // auto never picks a dtype that needs a notice
}

// The attention: line says which path computes where. Oracle: the CPU's flag list again.
TEST(WeightsDtypeCli, RunBannerNamesTheAttentionPath) {
  const fs::path out = fresh_dir("wd_attention");
  const Result f = run_cli("run --demo --demo-frames 3 --scale-frames 2 --threads 1 --weights-dtype f32 --kv-dtype f32 --out " +
                           out.string());
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "\nattention: over the cache f32 (f32 K/V); encoder and frame blocks f32 (f32 weights); "
                              "camera head f32\n"))
      << f.out;
  const Result b = run_cli("run --demo --demo-frames 3 --scale-frames 2 --threads 1 --weights-dtype bf16 --kv-dtype bf16 --out " +
                           out.string());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  const std::string cpuinfo = slurp("/proc/cpuinfo");
  // The demo model's head_dim is not a multiple of 32, so never AMX here; f32 without AVX512_BF16.
  const std::string path = contains(cpuinfo, " avx512_bf16") ? "bf16 (vdpbf16ps)" : "f32";
  EXPECT_TRUE(contains(b.out, "\nattention: over the cache " + path + " (bf16 K/V); encoder and frame blocks " + path +
                                  " (bf16 weights); camera head f32\n"))
      << b.out;
}

TEST(WeightsDtypeCli, UnknownDtypeIsOneErrorLine) {
  const fs::path out = fresh_dir("wd_bad");
  // A single value that is not one of the choices: a usage error (exit 2) with the command's help.
  for (const std::string& command : {std::string("run"), std::string("verify")}) {
    const std::string cmd = command == "run" ? "run --demo --weights-dtype int8 --out " + out.string()
                                             : "verify --golden " + kTestdata + "/tiny --weights-dtype int8";
    const Result r = run_cli(cmd);
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_EQ(r.err, "error: --weights-dtype: must be auto, f32, f16 or bf16, got 'int8'\nRun 'lingbot-map " + command +
                         " --help' for usage.\n")
        << cmd;
  }
  // An item of bench model's lists: a usage error too.
  const Result r = run_cli("bench model --model-size demo --weights-dtype f32,int8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: --weights-dtype: unknown weights dtype 'int8' (expected auto, f32, f16 or bf16)\nRun "
                   "'lingbot-map bench model --help' for usage.\n");
  const Result kv = run_cli("bench model --model-size demo --kv-dtype bf16,f64");
  EXPECT_EQ(kv.exit_code, 2);
  EXPECT_EQ(kv.err, "error: --kv-dtype: unknown dtype 'f64' (expected f32, f16 or bf16)\nRun 'lingbot-map bench model "
                    "--help' for usage.\n");
}

TEST(WeightsDtypeCli, SlowDtypeIsAcceptedWithOneNotice) {
  using lingbot::DType;
  for (DType dt : {DType::F16, DType::BF16}) {
    const std::string name(lingbot::dtype_name(dt));
    const bool slow = lingbot::kernels::gemm_path(dt) == lingbot::kernels::GemmPath::PanelSgemm;
    const fs::path out = fresh_dir("wd_notice_" + name);
    const Result r = run_cli("run --demo --demo-frames 3 --scale-frames 2 --threads 1 --weights-dtype " + name +
                             " --out " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(count_lines(r.out, "notice: no native " + name + " GEMM on this CPU"), slow ? 1 : 0) << r.out;
  }
}

TEST(WeightsDtypeCli, VerifyTakesTheWeightsDtype) {
  const Result r = run_cli("verify --golden " + kTestdata + "/tiny --weights-dtype bf16 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "weights dtype bf16")) << r.out;
  EXPECT_TRUE(contains(r.out, "x2000 (bf16 weights)")) << r.out;
  EXPECT_TRUE(contains(r.out, "PASS:")) << r.out;
  // run's default precision (bf16 weights and bf16 K/V) against the reference, on every public case.
  for (const char* c : {"tiny", "streaming-flow-tiny", "windowed-flow-tiny"}) {
    const Result both = run_cli("verify --golden " + kTestdata + "/" + c + " --weights-dtype bf16 --kv-dtype bf16 --threads 1");
    EXPECT_EQ(both.exit_code, 0) << c << "\n" << both.out << both.err;
    EXPECT_TRUE(contains(both.out, "(bf16 K/V, bf16 weights)")) << c << "\n" << both.out;
  }
}

TEST(WeightsDtypeCli, BenchModelCsvAndSummary) {
  const fs::path d = fresh_dir("bench_model");
  const Result r = run_cli("bench model --model-size demo --resolution 112x70 --frames 4 --scale-frames 2 --threads 1 "
                           "--weights-dtype f32,bf16 --kv-dtype f32 --csv " + (d / "m.csv").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string csv = slurp(d / "m.csv");
  std::istringstream is(csv);
  std::string header, line;
  std::getline(is, header);
  EXPECT_EQ(header,
            "config,weights_dtype,kv_dtype,push,results,wall_ms,cpu_ms,encoder_ms,frame_blocks_ms,global_blocks_ms,"
            "camera_ms,dpt_ms,writers_ms,rss_bytes,peak_rss_bytes,device_peak_bytes");
  int rows = 0, scale_rows = 0;
  std::map<std::string, double> scale_cpu_ms;  // config -> CPU ms of its scale frames' pushes
  while (std::getline(is, line)) {
    ++rows;
    std::istringstream ls(line);
    std::string f[7];
    for (auto& x : f) std::getline(ls, x, ',');
    if (f[4] == "2") ++scale_rows;  // the scale phase push returns both scale frames
    if (f[3] == "1" || f[3] == "2") scale_cpu_ms[f[0]] += std::stod(f[6]);
    EXPECT_EQ(line.back(), ',') << line;  // device_peak_bytes: empty on the CPU
  }
  EXPECT_EQ(rows, 2 * 4);       // 2 configurations x 4 pushes
  EXPECT_EQ(scale_rows, 2);     // one scale-phase push per configuration
  // The scale phase's CPU time: both scale frames' pushes (the first encodes its frame), per config.
  ASSERT_EQ(scale_cpu_ms.size(), 2u);
  for (const auto& [config, ms] : scale_cpu_ms) {
    const size_t at = r.out.find("\n" + config + ": ");
    ASSERT_NE(at, std::string::npos) << config << "\n" << r.out;
    const size_t scale = r.out.find("scale phase ", at);
    ASSERT_NE(scale, std::string::npos) << r.out;
    EXPECT_NEAR(std::stod(r.out.substr(scale + 12)), ms, 1.0) << config << "\n" << r.out;
  }
  const auto s = summary_of(r.out);
  for (const char* k : {"model", "size", "threads", "load_avg_start", "sgemm_gflops_per_cpu_s", "bf16_gemm_gflops_per_cpu_s",
                        "bf16_gemm_vs_sgemm_cpu", "wf32_kvf32_frame_cpu_ms", "wbf16_kvf32_frame_cpu_ms",
                        "wbf16_kvf32_peak_rss_gib", "wbf16_kvf32_vs_wf32_kvf32_frame_cpu"})
    EXPECT_TRUE(s.count(k)) << k << "\n" << r.out;
  EXPECT_EQ(s.at("size"), "112x70");
  // One thread: the calibration's CPU seconds are its wall seconds, give or take, never twice them
  // (OpenBLAS's idle worker threads busy-wait their first second: they were counted, 38 vs 77 GFLOP/s).
  // A loaded machine only stretches wall time, so per CPU-second can only read higher.
  EXPECT_GE(std::stod(s.at("sgemm_gflops_per_cpu_s")), 0.75 * std::stod(s.at("sgemm_gflops"))) << r.out;
  EXPECT_FALSE(s.count("wf32_kvf32_device_peak_bytes")) << "device memory keys are for device runs only\n" << r.out;
}

// Ctrl-C ends bench model at the push in progress and keeps the pushes measured: the table, the CSV
// (a row a push), no summary line, exit 130. It printed nothing before.
TEST(WeightsDtypeCli, BenchModelCtrlCKeepsTheTableAndCsv) {
  const fs::path csv = fresh_dir("bench_model_ctrl_c") / "model.csv";
  const auto [r, pushes] = interrupted_bench(3, "bench model --model-size demo --resolution 112x70 --frames 100000 "
                                                "--scale-frames 2 --threads 1 --weights-dtype f32 --kv-dtype f32 "
                                                "--calibrate off --csv " + csv.string(), 100000);
  ASSERT_GE(pushes, 0);
  EXPECT_TRUE(contains(r.out, "csv: " + csv.string() + " (" + std::to_string(pushes) + " rows)\n")) << r.out;
}

TEST(WeightsDtypeCli, BenchModelRejectsBadOptions) {
  Result r = run_cli("bench model --model-size demo --resolution 100x70");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: --resolution 100x70 must be multiples of the patch size 14\n");
  r = run_cli("bench model --model-size demo --frames 2 --scale-frames 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "error: --frames must exceed --scale-frames (2) so that single-frame steps are measured, got 2\n");
  // The session's bounds, named as the flags, before the model is made (the full-size model took 15 s
  // and 3 GB before "threads must be at most 4096").
  for (const auto& [args, error] : {std::pair<std::string, std::string>{"--threads 5000", "--threads must be at most 4096, got 5000"},
                                    {"--kv-window 2000000", "--kv-window must be at most 1048576, got 2000000"},
                                    {"--scale-frames 2000 --frames 2001", "--scale-frames must be at most 1024, got 2000"}}) {
    r = run_cli("bench model --model-size full --calibrate off " + args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, "error: " + error + "\n") << args;
    EXPECT_EQ(r.out, "") << args;
  }
  r = run_cli("bench model --model-size huge");
  EXPECT_EQ(r.exit_code, 2);  // not one of the option's words: a usage error
  EXPECT_EQ(r.err, "error: --model-size: must be full or demo, got 'huge'\nRun 'lingbot-map bench model --help' for usage.\n");
  for (const char* bad : {"112", "112x", "x70", "112x-70", "112x70x3", "0x70"}) {
    r = run_cli(std::string("bench model --model-size demo --resolution ") + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(r.err, std::string("error: --resolution: must be 224, 518 or WxH (positive integers), got '") + bad +
                         "'\nRun 'lingbot-map bench model --help' for usage.\n");
  }
  r = run_cli("bench model --model-size demo --calibrate maybe");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: --calibrate: must be on or off, got 'maybe'\nRun 'lingbot-map bench model --help' for usage.\n");
}

}  // namespace
