// Issue #16 acceptance: the accuracy contract of reduced-precision weights (ModelLoadOptions::
// weights_dtype) on every public golden case verify runs (tiny, tiny-keyframes, small-d24).
//
// What is rounded. With bf16 weights the qkv / proj / fc1 / fc2 weights of every encoder and
// aggregator block are stored in bf16; where the CPU has a native bf16 GEMM (oneDNN, AVX512_BF16 /
// AMX) the input activations of those layers are rounded to bf16 too (u = 2^-8 = 3.9e-3 relative per
// value), accumulation stays f32. Everything else is f32. Measured on this repository's AVX512_BF16
// machine (native path), max|Δ| / max|ref| per tensor: 0.4-1.5 u for the aggregated features, depth,
// points and pose_enc; extrinsic (world->camera, t' = -Rᵀt mixes rotation and translation error) up
// to 5.0 u (small-d24). The bound asserted is 12 u (~2.4x margin over the worst) for every compared
// float tensor, and the rounding must be visible (worst head error >= 0.1 u; f32 noise is ~1e-3 u).
// verify's own scaled tolerance for bf16 weights (x2000 on the README's f32 ones) must pass too.
//
// f16 weights: the public cases' checkpoints store f16, so f16 weights are exact; without a native
// f16 GEMM (oneDNN 2.6 has none on the CPU) the widened f32 panels hold the very values the f32 path
// multiplies, on the same tiles: the outputs must be bit-identical to f32 weights.
//
// Along the stream the error must not grow (last quarter <= 2x first quarter, as accuracy_stream_test
// does for the KV dtype), and a given dtype gives bit-identical results for any thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "bench/harness/verify.h"
#include "tests/pipeline/head_tensors.h"

namespace {

namespace fs = std::filesystem;
using namespace lingbot;

constexpr double kBf16RelBoundUnits = 12.0;    // measured worst 5.0 u (extrinsic, small-d24)
constexpr double kRoundingVisibleUnits = 0.1;  // measured worst head error >= 0.7 u
constexpr double kWeightsGrowthFactor = 2.0;
// Below a tenth of the f32 golden tolerance (1e-4 of max|ref|) an error is float32 noise: f16
// weights are bit-identical to f32 and their ~2e-6 errors moved 1.9e-6 -> 4.1e-6 (small-d24
// extrinsic, sanitizer build) with a change of GEMM tiles alone. bf16 errors are ~1e-2.
constexpr double kWeightsNoiseFloorRel = 1e-5;
const double kBf16Unit = std::ldexp(1.0, -8);

using lingbot_test::kHeadTensors;

VerifyReport run(const fs::path& dir, DType weights, int threads = 1) {
  VerifyOptions o;
  o.case_dir = dir.string();
  o.weights_dtype = weights;
  o.threads = threads;
  o.keep_outputs = true;
  return run_verify(o);
}

// testdata/tiny and the shared cases present; `missing` names the others (the test then ends
// skipped, after checking what it has, so a partial check never reads as a full pass).
std::vector<fs::path> public_cases(std::string* missing) {
  std::vector<fs::path> out{fs::path(LINGBOT_TESTDATA_DIR) / "tiny"};
  for (const char* name : {"tiny-keyframes", "small-d24"}) {
    const fs::path dir = fs::path(LINGBOT_SHARED_GOLDEN_DIR) / name;
    if (fs::exists(dir / "case.json")) out.push_back(dir);
    else *missing += (missing->empty() ? "" : ", ") + dir.string();
  }
  return out;
}
#define SKIP_IF_CASES_MISSING(missing) \
  if (!(missing).empty()) GTEST_SKIP() << "checked testdata/tiny only: shared golden cases not present: " << (missing)

// Last quarter of the frames' max error <= 2x the first quarter's (floor: f32 noise).
void expect_no_growth(const VerifyReport& r) {
  int checked = 0;
  for (const VerifyRow& row : r.rows) {
    if (row.frame_max_abs.empty() || (row.status != "ok" && row.status != "FAIL")) continue;
    const size_t S = row.frame_max_abs.size();
    ASSERT_GE(S, 4u) << row.tensor;
    // A quarter of the stream, but at least 3 frames: with 2-frame quarters (small-d24's 8 frames) the
    // max of two frames' errors follows those frames' magnitudes (world points read 1.9 in a release
    // build, 2.02 in the sanitizer build) more than any growth along the stream.
    const size_t q = std::max<size_t>((S + 3) / 4, 3);
    const double first = *std::max_element(row.frame_max_abs.begin(), row.frame_max_abs.begin() + q);
    const double last = *std::max_element(row.frame_max_abs.end() - q, row.frame_max_abs.end());
    const double max_ref = *std::max_element(row.frame_max_ref.begin(), row.frame_max_ref.end());
    const double bound = std::max(kWeightsGrowthFactor * first, kWeightsNoiseFloorRel * max_ref);
    char line[256];
    std::snprintf(line, sizeof line, "%-15s %-5s %-14s first %zu frames %.2e, last %zu frames %.2e (ratio %.2f)\n",
                  r.case_name.c_str(), r.weights_dtype.c_str(), row.tensor.c_str(), q, first, q, last,
                  first > 0 ? last / first : 0.0);
    std::cout << line;
    EXPECT_LE(last, bound) << r.case_name << " " << r.weights_dtype << " " << row.tensor;
    ++checked;
  }
  EXPECT_GE(checked, 5) << format_verify_report(r);
}

void expect_identical(const VerifyReport& a, const VerifyReport& b, const std::string& what) {
  for (const char* name : kHeadTensors) {
    ASSERT_TRUE(a.outputs.count(name) && b.outputs.count(name)) << what << " " << name;
    const auto& fa = a.outputs.at(name);
    const auto& fb = b.outputs.at(name);
    ASSERT_EQ(fa.size(), fb.size()) << what << " " << name;
    for (size_t f = 0; f < fa.size(); ++f) {
      ASSERT_EQ(fa[f].nbytes(), fb[f].nbytes()) << what << " " << name << " frame " << f;
      EXPECT_EQ(std::memcmp(fa[f].raw(), fb[f].raw(), fa[f].nbytes()), 0)
          << what << ": " << name << " frame " << f << " differs";
    }
  }
}

}  // namespace

TEST(AccuracyWeightsDtype, Bf16WithinBoundNoGrowth) {
  std::cout << "bf16 GEMM: " << kernels::gemm_path_description(DType::BF16) << "\n";
  std::string missing;
  for (const fs::path& dir : public_cases(&missing)) {
    const VerifyReport r = run(dir, DType::BF16);
    EXPECT_TRUE(r.passed()) << format_verify_report(r);
    double worst = 0.0, worst_head = 0.0;
    for (const VerifyRow& row : r.rows) {
      if ((row.status != "ok" && row.status != "FAIL") || row.tolerance == "exact") continue;
      const double gain = row.max_rel / kBf16Unit;
      worst = std::max(worst, gain);
      if (!row.frame_max_abs.empty()) worst_head = std::max(worst_head, gain);
      char line[256];
      std::snprintf(line, sizeof line, "%-15s bf16 weights %-22s max abs %.2e  rel %.2e  (= %.2f u)\n",
                    r.case_name.c_str(), row.tensor.c_str(), row.max_abs, row.max_rel, gain);
      std::cout << line;
      EXPECT_LE(row.max_rel, kBf16RelBoundUnits * kBf16Unit) << r.case_name << " " << row.tensor;
    }
    std::cout << r.case_name << " bf16 weights: worst max|Δ|/max|ref| = " << worst << " u\n";
    EXPECT_GE(worst_head, kRoundingVisibleUnits) << r.case_name << ": bf16 rounding not in effect?";
    expect_no_growth(r);
  }
  SKIP_IF_CASES_MISSING(missing);
}

TEST(AccuracyWeightsDtype, F16StoredCheckpointsMatchF32Exactly) {
  if (kernels::gemm_path(DType::F16) != kernels::GemmPath::PanelSgemm)
    GTEST_SKIP() << "native f16 GEMM on this CPU: activations are rounded, not bit-identical to f32";
  std::string missing;
  for (const fs::path& dir : public_cases(&missing)) {
    const VerifyReport f32 = run(dir, DType::F32);
    const VerifyReport f16 = run(dir, DType::F16);
    EXPECT_TRUE(f16.passed()) << format_verify_report(f16);
    expect_identical(f32, f16, f16.case_name + " f16 vs f32 weights");
    expect_no_growth(f16);
  }
  SKIP_IF_CASES_MISSING(missing);
}

TEST(AccuracyWeightsDtype, Bf16IdenticalForAnyThreadCount) {
  const fs::path dir = fs::path(LINGBOT_TESTDATA_DIR) / "tiny";
  const VerifyReport one = run(dir, DType::BF16, 1);
  for (int threads : {2, 3}) expect_identical(one, run(dir, DType::BF16, threads), "bf16 threads 1 vs " + std::to_string(threads));
}
