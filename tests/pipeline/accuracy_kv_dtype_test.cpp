// Issue #6 acceptance: with f16 and bf16 K/V storage the errors against the float32 reference are
// reported and stay within a stated bound; and the paged and dense backends, which store the same
// rounded K/V values, agree with each other 5-15x more tightly than either agrees with the reference.
//
// Why these bounds. Only the stored aggregator K/V are rounded (the camera-head cache is f32 by
// design); the attention computes in f32, except for bf16 K/V on a CPU with AVX512_BF16, where the
// kernel's native-bf16 path also rounds each query and the softmax probabilities to bf16 (u, the
// same order as the storage rounding; contract in kernels/cpu/attention.h). Rounding to f16 perturbs each stored value by at most u = 2^-11 (4.9e-4)
// relative, to bf16 by u = 2^-8 (3.9e-3). Attention averages the values (error <= u * max|V|) and the
// rounded keys shift the logits by about u * |q||k|, so each aggregator layer adds an error of order u
// relative to its activations, and the heads pass it on with O(1) gain. Measured on the public cases
// (tiny, tiny-keyframes, small-d24; paged and dense), max|Δ| / max|ref| per tensor is at most 0.15 u
// for both dtypes (f16 <= 6.9e-5 on tiny, bf16 <= 5.8e-4 on small-d24, both on extrinsic_c2w; bf16
// with native-bf16 attention: 6.0e-4 = 0.153 u, small-d24 extrinsic), and
// the bf16 errors are 4-11x the f16 ones (ratio of u: 8): the error is the storage rounding, propagated
// about linearly, not a semantic difference. The bound asserted is therefore
// max|Δ| <= 1.0 u * max|ref| for every compared float tensor (~6x margin over the measured 0.15 u):
// f16 4.9e-4 * max|ref|, bf16 3.9e-3 * max|ref| -- far below the 0.1-2 absolute change a wrong cache
// semantic causes (README). The test also asserts the rounding is in effect: the worst head-output
// error is >= 0.02 u (float32 noise alone is ~0.003 u for f16).
// The verify command's own scaled tolerances (x50 f16, x400 bf16 on the README's f32 ones, i.e. ~10 u:
// 5e-3 / 4e-2 relative or absolute) keep the README's ~100x margin over the measured error; the verify
// report must pass too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <utility>

#include "bench/harness/verify.h"
#include "kernels/cpu/attention.h"
#include "tests/pipeline/head_tensors.h"

namespace {

namespace fs = std::filesystem;
using namespace lingbot;

constexpr double kRelBoundPerUnit = 1.0;       // bound = 1 unit roundoff * max|ref| (measured <= 0.15)
constexpr double kRoundingVisiblePerUnit = 0.02;  // worst head error must show the rounding (measured >= 0.1)
// Paged vs dense: max|Δ| <= max(1e-5, 0.05 u) * max|ref| (f16 2.4e-5, bf16 2.0e-4). The backends store
// the same rounded K/V and differ only in float32 summation order (README noise floor ~1e-6); but that
// noise now and then moves an activation across a rounding boundary, so one stored value differs by one
// f16/bf16 step, and such flips accumulate with depth. Measured: tiny / tiny-keyframes <= 1.9e-6 (f16),
// <= 7.1e-6 (bf16); small-d24 (24 layers) 9.6e-6 = 0.02 u (f16), 3.9e-5 = 0.01 u (bf16): 5-15x below
// either backend's error vs the reference (0.1-0.15 u), so a backend that rounded differently (or not
// at all) would exceed it. With native-bf16 attention (bf16 K/V, AVX512_BF16) the roundings of the
// probabilities add such flips: small-d24 paged vs dense extrinsic measured 1.5e-4 = 0.039 u with AMX
// tiles (Xeon), 2.0e-4 = 0.051 u with vdpbf16ps alone (AMD Zen 5), against 0.11-0.16 u of either
// backend vs the reference; that case gets 0.08 u, still 1.4x below a backend that did not round.
double backend_agreement_rel(double u, bool native_bf16_attention) {
  return std::max(1e-5, (native_bf16_attention ? 0.08 : 0.05) * u);
}

double unit_roundoff(DType t) { return t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8); }

using lingbot_test::kHeadTensors;

VerifyReport run(const fs::path& dir, KVBackend backend, DType dt) {
  VerifyOptions o;
  o.case_dir = dir.string();
  o.kv_backend = backend;
  o.kv_dtype = dt;
  o.threads = 1;  // bit-identical for any thread count; 1 avoids oversubscribing a loaded machine
  o.keep_outputs = true;
  return run_verify(o);
}

void check_case(const fs::path& dir) {
  for (DType dt : {DType::F16, DType::BF16}) {
    const double u = unit_roundoff(dt);
    std::map<KVBackend, VerifyReport> reports;
    for (KVBackend b : {KVBackend::Paged, KVBackend::Dense}) {
      VerifyReport r = run(dir, b, dt);
      EXPECT_TRUE(r.passed()) << format_verify_report(r);
      double worst_gain = 0.0, worst_head_gain = 0.0;
      for (const VerifyRow& row : r.rows) {
        if (row.status != "ok" && row.status != "FAIL") continue;
        if (row.tolerance == "exact") continue;  // integer traces: exact, checked by verify
        const double gain = row.max_rel / u;
        worst_gain = std::max(worst_gain, gain);
        if (!row.frame_max_abs.empty()) worst_head_gain = std::max(worst_head_gain, gain);
        char line[256];
        std::snprintf(line, sizeof line, "%-15s %-6s %-5s %-36s max abs %.2e  rel %.2e  (= %.2f u)\n",
                      r.case_name.c_str(), r.backend.c_str(), r.kv_dtype.c_str(), row.tensor.c_str(), row.max_abs,
                      row.max_rel, gain);
        std::cout << line;
        EXPECT_LE(row.max_rel, kRelBoundPerUnit * u) << r.case_name << " " << r.backend << " " << r.kv_dtype << " "
                                                     << row.tensor;
      }
      std::cout << r.case_name << " " << r.backend << " " << r.kv_dtype << ": worst max|Δ|/max|ref| = "
                << worst_gain << " u\n";
      EXPECT_GE(worst_head_gain, kRoundingVisiblePerUnit) << r.case_name << " " << r.backend << " " << r.kv_dtype
                                                          << ": K/V rounding not in effect?";
      reports.emplace(b, std::move(r));
    }
    // Paged vs dense: same rounded K/V, only the summation order of the attention differs.
    const VerifyReport& p = reports.at(KVBackend::Paged);
    const VerifyReport& d = reports.at(KVBackend::Dense);
    for (const char* name : kHeadTensors) {
      ASSERT_TRUE(p.outputs.count(name) && d.outputs.count(name)) << name;
      const auto& pf = p.outputs.at(name);
      const auto& df = d.outputs.at(name);
      ASSERT_EQ(pf.size(), df.size()) << name;
      double max_abs = 0.0, max_val = 0.0;
      for (size_t f = 0; f < pf.size(); ++f) {
        ASSERT_EQ(pf[f].numel(), df[f].numel()) << name << " frame " << f;
        for (int64_t i = 0; i < pf[f].numel(); ++i) {
          const double a = pf[f].f32()[i], b = df[f].f32()[i];
          max_abs = std::max(max_abs, std::isnan(a - b) ? INFINITY : std::abs(a - b));
          max_val = std::max(max_val, std::abs(b));
        }
      }
      char line[200];
      std::snprintf(line, sizeof line, "%-15s paged vs dense %-5s %-14s max abs %.2e  rel %.2e\n",
                    p.case_name.c_str(), p.kv_dtype.c_str(), name, max_abs, max_val > 0 ? max_abs / max_val : 0.0);
      std::cout << line;
      const bool native = dt == DType::BF16 && kernels::native_bf16_attention();
      EXPECT_LE(max_abs, backend_agreement_rel(u, native) * max_val) << p.case_name << " " << p.kv_dtype << " " << name;
    }
  }
}

}  // namespace

TEST(AccuracyKvDtype, TinyF16Bf16WithinBoundAndBackendsAgree) { check_case(fs::path(LINGBOT_TESTDATA_DIR) / "tiny"); }

TEST(AccuracyKvDtype, SharedCasesF16Bf16WithinBoundAndBackendsAgree) {
  for (const char* name : {"tiny-keyframes", "small-d24"}) {
    const fs::path dir = fs::path(LINGBOT_SHARED_GOLDEN_DIR) / name;
    if (!fs::exists(dir / "case.json")) {
      std::cout << "[ SKIPPED ] shared golden case " << dir << " not present\n";
      GTEST_SKIP() << "shared golden case not present at " << dir;
    }
    check_case(dir);
  }
}
