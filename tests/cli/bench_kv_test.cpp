// Smoke tests of `lingbot-map bench kv`: tiny shapes and few frames, so they run in a second or two.
// They check the output contract (CSV columns, summary keys, stop line, exit codes, error lines), not
// timings.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_report.h"
#include "run_test_util.h"
#include "sanitizer_build.h"
#include "test_tools.h"

namespace {

using namespace run_test;

// Tiny model shapes; 224 keeps the real 256 + 6 tokens per frame.
const std::string kBenchKvTiny =
    "bench kv --resolution 224 --blocks 2 --heads 2 --head-dim 16 --kv-window 4 --scale-frames 2 --threads 2 ";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  return lines;
}

bool is_number(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

TEST(BenchKv, SmokeRunWritesCsvAndSummary) {
  const auto csv = fresh_dir("bench_kv") / "smoke.csv";
  const Result r = run_cli(kBenchKvTiny + "--frames 14 --kv-dtype bf16 --keyframe-interval 2 --csv '" + csv.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("calibration: sgemm 1024x1024x1024"), std::string::npos) << r.out;

  const auto rows = lines_of(slurp(csv));
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0],
            "frame,kv_backend,mode,attended,queries,keys,attn_ms,maint_ms,gflops,kv_bytes_used,kv_bytes_reserved,"
            "patch_bytes_reserved,special_bytes_reserved,frames_stored,frames_resident,special_tokens,pool_pages,"
            "free_pages,special_pages,rss_bytes,peak_rss_bytes,attn_cpu_ms,maint_cpu_ms");
  // One scale-phase step (frames 1-2) + 12 single-frame steps, three backends each.
  EXPECT_EQ(rows.size(), 1u + 13u * 3u);
  EXPECT_EQ(rows[1].substr(0, rows[1].find(",", rows[1].find(",", 2) + 1)), "2,paged,scale");
  int nonkey = 0;
  for (const auto& row : rows) nonkey += row.find(",nonkey,") != std::string::npos;
  EXPECT_EQ(nonkey, 6 * 3);  // frames 4, 6, ..., 14 (after the scale phase, odd offsets)

  auto s = summary_of(r.out);
  for (const char* key :
       {"mem_ratio_paged_vs_densefull@320", "mem_ratio_paged_vs_dense@320", "lat_ratio_paged_vs_dense@14",
        "cpu_ratio_paged_vs_dense@14",
        "kernel_pct_of_sgemm", "special_bytes_per_frame", "paged_reserved_vs_min@320",
        "sgemm_gflops", "bandwidth_gbps", "kernel_gflops"})
    EXPECT_TRUE(s.count(key)) << key << " missing in " << r.out;
  EXPECT_EQ(s["mem_ratio_paged_vs_densefull@320"], "na");  // too short a run
  for (const auto& [key, value] : s) EXPECT_NE(key.rfind("drift_", 0), 0u) << key;  // no frame 100 to drift from
  EXPECT_TRUE(is_number(s["lat_ratio_paged_vs_dense@14"])) << s["lat_ratio_paged_vs_dense@14"];
  EXPECT_TRUE(is_number(s["kernel_pct_of_sgemm"])) << s["kernel_pct_of_sgemm"];
  EXPECT_GT(std::stod(s["sgemm_gflops"]), 0.0);
  // 6 specials x K,V x 2 heads x 16 dims x 2 bytes x 2 blocks.
  EXPECT_EQ(s["special_bytes_per_frame"], std::to_string(6 * 2 * 2 * 16 * 2 * 2));
}

TEST(BenchKv, AttentionAbTimesBothPathsOnTheSameKeys) {
  // bf16 K/V: the default path is native bf16 where the CPU has AVX512_BF16 (the header line says
  // which), and its outputs differ from the f32 path's by bf16 rounding only.
  const Result r = run_cli(kBenchKvTiny + "--frames 8 --kv-dtype bf16 --calibrate off --kv-backends paged --attention-ab on");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const bool native = r.out.find("cpu attention compute for bf16 K/V: bf16 (CPU has AVX512_BF16") != std::string::npos;
  if (native) {
    EXPECT_TRUE(r.out.find("(CPU has AVX512_BF16, no AMX)\n") != std::string::npos ||
                r.out.find("(CPU has AVX512_BF16 and AMX: AMX tiles where head_dim % 32 == 0)\n") != std::string::npos)
        << r.out;
  }
  if (!native) {
    EXPECT_NE(r.out.find("cpu attention compute for bf16 K/V: f32 (CPU lacks AVX512_BF16)\n"), std::string::npos) << r.out;
  }
  auto s = summary_of(r.out);
  EXPECT_EQ(s["ab_auto_compute"], native ? "bf16" : "f32");
  EXPECT_GT(std::stod(s["ab_kernel_ms_auto"]), 0.0);
  EXPECT_GT(std::stod(s["ab_kernel_ms_f32"]), 0.0);
  EXPECT_TRUE(is_number(s["ab_speedup_auto_vs_f32"])) << s["ab_speedup_auto_vs_f32"];
  EXPECT_TRUE(is_number(s["ab_speedup_median_call"])) << s["ab_speedup_median_call"];
  const double diff = std::stod(s["ab_max_abs_diff"]);
  if (native) {
    // Uniform random q/k/v in [-1, 1): outputs are means of V rows; bf16 rounding of q and of the
    // probabilities moves them by ~1e-4, far below the values' spread.
    EXPECT_GT(diff, 0.0);
    EXPECT_LT(diff, 1e-2);
  } else {
    EXPECT_EQ(diff, 0.0);
  }
  // f32 K/V: both runs take the f32 path, bit for bit.
  const Result f = run_cli(kBenchKvTiny + "--frames 6 --kv-dtype f32 --calibrate off --kv-backends paged --attention-ab on");
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  auto sf = summary_of(f.out);
  EXPECT_EQ(sf["ab_auto_compute"], "f32");
  EXPECT_EQ(sf["ab_max_abs_diff"], "0");
}

TEST(BenchKv, MemoryCapStopsOneBackendCleanly) {
  // f32, 2 blocks: a frame is 262 tokens x 256 B x 2 blocks = 134 KB; dense-full passes 2 MiB well
  // before frame 40, while the paged cache (7 patch pages + specials) stays near 1 MiB.
  const Result r =
      run_cli(kBenchKvTiny + "--frames 40 --kv-dtype f32 --calibrate off --attention off --mem-cap-gb 0.002");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto pos = r.out.find("stop: backend dense-full stopped at frame ");
  ASSERT_NE(pos, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("stop: backend paged"), std::string::npos) << r.out;
  const int frame = std::atoi(r.out.c_str() + pos + std::string("stop: backend dense-full stopped at frame ").size());
  EXPECT_GT(frame, 2);
  EXPECT_LT(frame, 40);
  auto s = summary_of(r.out);
  EXPECT_EQ(s["stopped_densefull_at_frame"], std::to_string(frame));
  EXPECT_EQ(s["sgemm_gflops"], "na");
  EXPECT_EQ(s["paged_patch_reserved_const_after_6"], "yes");
  // The stopped backend first in the list, another one going on after it (this crashed: the stopped
  // cache outlived its allocator; the sanitizer build reports such a use-after-free).
  const Result first =
      run_cli(kBenchKvTiny + "--frames 40 --kv-dtype f32 --calibrate off --attention on --attend-every 10 "
                             "--mem-cap-gb 0.002 --kv-backends dense-full,paged");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("stop: backend dense-full stopped at frame " + std::to_string(frame) + ":"), std::string::npos)
      << first.out;
  EXPECT_EQ(summary_of(first.out)["stopped_densefull_at_frame"], std::to_string(frame));
}

TEST(BenchKv, AttentionOffReportsConstantPatchMemory) {
  const Result r = run_cli(kBenchKvTiny + "--frames 30 --calibrate off --attention off --kv-backends paged");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto s = summary_of(r.out);
  EXPECT_EQ(s["paged_patch_reserved_const_after_6"], "yes");
  EXPECT_EQ(s["mem_ratio_paged_vs_dense@320"], "na");
  EXPECT_EQ(s["special_bytes_per_frame"], std::to_string(6 * 2 * 2 * 16 * 2 * 2));
}

TEST(BenchKv, PlotWritesPng) {
  LINGBOT_SKIP_WITHOUT_TOOL(std::system("command -v gnuplot >/dev/null 2>&1") == 0,
                            "gnuplot is not installed (Debian package gnuplot-nox, in scripts/setup.sh)");
  const auto png = fresh_dir("bench_kv") / "plot.png";
  const Result r = run_cli(kBenchKvTiny + "--frames 10 --calibrate off --plot '" + png.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string bytes = slurp(png);
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
}

// Unusable output files are refused before the run, and an existing file is left as it was.
TEST(BenchKv, BadOutputFilesAreRefusedBeforeTheRunAndLeaveExistingFiles) {
  const fs::path dir = fresh_dir("bench_kv_outputs");
  const std::string csv = (dir / "keep.csv").string();
  std::ofstream(csv) << "keep\n";
  const std::string args = "bench kv --resolution 224 --frames 10 --blocks 1 --calibrate off --csv " + csv;
  const Result folder = run_cli(args + " --plot " + dir.string());
  EXPECT_EQ(folder.exit_code, 1);
  EXPECT_EQ(folder.err, "error: cannot write " + dir.string() + ": it is a directory\n");
  const Result same = run_cli(args + " --plot " + (dir / "." / "keep.csv").string());
  EXPECT_EQ(same.err, "error: --csv and --plot name the same file '" + csv + "'\n");
  // gnuplot writes PNG whatever the name: another extension would hold PNG bytes.
  const Result jpg = run_cli(args + " --plot " + (dir / "k.jpg").string());
  EXPECT_EQ(jpg.exit_code, 1);
  EXPECT_EQ(jpg.err, "error: --plot writes a PNG image: name the file .png, got '" + (dir / "k.jpg").string() + "'\n");
  const Result missing = run_cli("bench kv --csv " + (dir / "no" / "x.csv").string());
  EXPECT_EQ(missing.err, "error: cannot write " + (dir / "no" / "x.csv").string() + ": folder " + (dir / "no").string() +
                             " does not exist\n");
  EXPECT_EQ(slurp(csv), "keep\n");
}

// A cap no backend fits in measures nothing: exit 1, and the summary says where each stopped.
TEST(BenchKv, EveryBackendStoppedExits1) {
  const Result r = run_cli("bench kv --resolution 224 --frames 10 --blocks 1 --calibrate off --mem-cap-gb 0.001");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto s = summary_of(r.out);
  EXPECT_EQ(s["stopped_paged_at_frame"], "1");
  EXPECT_EQ(s["peak_rss_bytes"], "na");
  EXPECT_NE(r.err.find("\nerror: bench kv: every backend stopped ("), std::string::npos) << r.err;  // after progress
}

// Step buffers larger than the machine's memory are refused before the run, naming the options.
TEST(BenchKv, StepBuffersBeyondMemoryAreRefused) {
  const Result r = run_cli("bench kv --resolution 518 --scale-frames 1024 --frames 1025 --heads 256 --head-dim 1024 "
                           "--blocks 1 --kv-backends paged --calibrate off --mem-cap-gb 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.err.starts_with("error: bench kv: the step buffers (q, k, v and output of 1029120 tokens x 256 heads x "
                                "1024 head_dim, f32) need 4020.00 GiB, more than the "))
      << r.err;
  EXPECT_TRUE(r.err.ends_with(" available: lower --scale-frames, --heads or --head-dim\n")) << r.err;
}

// An allocation that fails anyway (here under a 1.3 GB address-space limit: the paged cache's 0.5 GB
// fits, the scale phase's 1 GB of step buffers does not) says what happened, not "std::bad_alloc".
TEST(BenchKv, AFailedAllocationIsNamedOutOfMemory) {
  if (LINGBOT_ASAN_BUILD) GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: ulimit -v cannot apply";
  const Result r = run_command("ulimit -v 1300000; " + std::string(LINGBOT_CLI_PATH) +
                               " bench kv --resolution 518 --scale-frames 64 --frames 65 --blocks 1 --kv-backends paged "
                               "--calibrate off --mem-cap-gb 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: out of memory: an allocation failed (smaller sizes in the options, or more free memory, would "
                   "let it run)\n");
}

// Ctrl-C ends the run at the next step and keeps what it measured: the table, the CSV (a row a step:
// the scale phase's 2 frames, then one a frame), no summary line, exit 130. It printed nothing before.
TEST(BenchKv, CtrlCKeepsTheTableAndCsv) {
  const fs::path csv = fresh_dir("bench_kv_ctrl_c") / "kv.csv";
  const auto [r, frames] = interrupted_bench(2, kBenchKvTiny + "--frames 1000000 --attention off --kv-backends paged "
                                                "--calibrate off --csv " + csv.string(), 1000000);
  ASSERT_GT(frames, 2);
  EXPECT_EQ(lines_of(slurp(csv)).size(), static_cast<size_t>(1 + frames - 1)) << "header + scale step + one row a frame";
  EXPECT_TRUE(contains(r.out, "csv: " + csv.string() + " (" + std::to_string(frames - 1) + " rows)\n")) << r.out;
}

// Ctrl-C within the scale phase (64 frames, 24 blocks: about 0.4 s a block here, 9 s in all) ends it
// within a block; the plot has no single-frame step to show and is said not to be written (gnuplot
// failed on the empty panel: exit 1 instead of the interrupted line).
TEST(BenchKv, CtrlCInTheScalePhaseWritesNoPlot) {
  const fs::path dir = fresh_dir("bench_kv_ctrl_c_plot");
  const auto [r, frames] = interrupted_bench(1, "bench kv --resolution 224 --blocks 24 --heads 1 --scale-frames 64 "
                                                "--frames 400 --threads 1 --calibrate off --kv-backends paged --plot " +
                                                (dir / "k.png").string() + " --csv " + (dir / "k.csv").string(), 400);
  EXPECT_EQ(frames, 0);
  EXPECT_TRUE(contains(r.out, "plot: " + (dir / "k.png").string() + " not written (nothing measured to plot)\n")) << r.out;
  EXPECT_FALSE(fs::exists(dir / "k.png"));
}

TEST(BenchKv, InvalidValuesGiveOneErrorLine) {
  // A value that does not parse is a usage error: exit 2, and the help of `bench kv` (docs/cli.md: Exit codes).
  const std::string help = "Run 'lingbot-map bench kv --help' for usage.\n";
  const std::vector<std::pair<std::string, std::string>> usage = {
      {"--resolution abc", "error: --resolution: must be 224 or 518, got 'abc'\n" + help},
      {"--resolution 300", "error: --resolution: must be 224 or 518, got '300'\n" + help},
      {"--threads abc", "error: --threads: 'abc' is not an integer\n" + help},  // as run's
      {"--mem-cap-gb lots", "error: --mem-cap-gb: must be auto or a number of GiB, got 'lots'\n" + help},
      {"--seed -3", "error: --seed: must be a non-negative integer, got '-3'\n" + help},
      {"--attention maybe", "error: --attention: must be on or off, got 'maybe'\n" + help},
      {"--attention-ab maybe", "error: --attention-ab: must be on or off, got 'maybe'\n" + help},
      {"--kv-dtype f8", "error: --kv-dtype: unknown dtype 'f8' (expected f32, f16 or bf16)\n" + help},
      {"--dtype f8",  // the old spelling
       "notice: --dtype is deprecated, use --kv-dtype\nerror: --kv-dtype: unknown dtype 'f8' (expected f32, f16 or "
       "bf16)\n" + help},
      {"--kv-backends paged,flat",
       "error: --kv-backends: unknown KV backend 'flat' (expected paged, dense or dense-full)\n" + help},
      {"--device tpu", "error: --device: must be cpu, cuda or auto, got 'tpu'\n" + help},
      {"--bogus", "error: The following argument was not expected: --bogus\n" + help},
      {"--kv-backends ''", "error: --kv-backends needs at least one of paged, dense, dense-full\n" + help},
  };
  for (const auto& [args, expected] : usage) {
    const Result r = run_cli("bench kv " + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err, expected) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  // Values out of range: bad input, exit 1.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--frames 0", "error: --frames must be >= 1, got 0\n"},
      // Only the scale phase: nothing single-frame measured (every figure was na), as bench model refuses.
      {"--frames 2 --scale-frames 2",
       "error: --frames must exceed --scale-frames (2) so that single-frame steps are measured, got 2\n"},
      // Sizes no run can use: refused, not a std::bad_alloc part way (--frames 2e9 grew to 2.6 GB first).
      {"--heads 100000", "error: --heads must be at most 256, got 100000\n"},
      {"--head-dim 100000", "error: --head-dim must be at most 1024, got 100000\n"},
      {"--blocks 5000", "error: --blocks must be at most 1024, got 5000\n"},
      {"--frames 2000000000", "error: --frames must be at most 1000000, got 2000000000\n"},
      {"--kv-window 2000000", "error: --kv-window must be at most 1048576, got 2000000\n"},
      {"--attention-ab on --attention off", "error: --attention-ab needs --attention on\n"},
      {"--attend-every 5 --attention off", "error: --attend-every needs --attention on (nothing is attended)\n"},
      {"--attention-ab on --kv-backends dense", "error: --attention-ab needs the paged backend in --kv-backends\n"},
      {"--attention-ab on --device cuda --kv-backends paged", "error: --attention-ab needs --device cpu\n"},
      {"--mem-cap-gb -1", "error: --mem-cap-gb must be >= 0, got -1\n"},
      {"--kv-backends paged,paged", "error: --kv-backends lists 'paged' twice\n"},
      {"--threads -1", "error: --threads must be >= 0 (0 = all cores), got -1\n"},
      {"--device cuda --kv-backends paged,dense",
       "error: --kv-backends: 'dense' is not available with --device cuda (CUDA has only the 'paged' cache)\n"},
  };
  for (const auto& [args, expected] : cases) {
    const Result r = run_cli("bench kv " + args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, expected) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  // Without a usable GPU, --device cuda is one error line naming why (build or device), before any work.
  const Result version = run_cli("version");
  const bool cuda_build = version.out.find("cuda") != std::string::npos;
  const Result cuda = run_cli(kBenchKvTiny + "--frames 3 --device cuda");
  if (!cuda_build) {
    EXPECT_NE(cuda.exit_code, 0);
    EXPECT_EQ(cuda.err, "error: --device cuda: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)\n");
    EXPECT_EQ(cuda.out, "");
  } else if (cuda.exit_code != 0) {
    EXPECT_EQ(cuda.err.rfind("error: --device cuda: no CUDA device is visible", 0), 0u) << cuda.err;
  }
}

}  // namespace

namespace spinning_warning {

// Process CPU time counts waiting OpenMP threads' spinning: the warning names the load and the
// remedies exactly when the machine was oversubscribed, the run threaded and the wait policy active.
TEST(BenchCpuTime, SpinningWarningOnlyWhenOversubscribedThreadedAndActive) {
  const std::string w = lingbot::bench::spinning_cpu_time_warning(8.5, 2, 2, nullptr);
  EXPECT_EQ(w, "load average 8.50 on 2 cores: waiting OpenMP threads spin, so the CPU times above include time "
               "spent waiting for cores other processes held; for load-proof CPU times run with "
               "OMP_WAIT_POLICY=passive or fewer --threads");
  EXPECT_EQ(lingbot::bench::spinning_cpu_time_warning(8.5, 2, 2, "ACTIVE"), w);
  EXPECT_EQ(lingbot::bench::spinning_cpu_time_warning(8.5, 2, 2, "Passive"), "");
  EXPECT_EQ(lingbot::bench::spinning_cpu_time_warning(8.5, 2, 1, nullptr), "");  // no team, no spinning
  EXPECT_EQ(lingbot::bench::spinning_cpu_time_warning(2.0, 2, 2, nullptr), "");  // not over the cores
}

}  // namespace spinning_warning
