// `verify --device cuda` as a test: golden cases (upstream's outputs on random-weight models)
// through a device-cuda Session with f32 weights and f32 K/V must pass the same f32 tolerances as
// the CPU (tests/pipeline/verify_test.cpp): every reference tensor "ok", none "FAIL"; with bf16
// weights and K/V, the documented bf16 tolerances (tiny: the worst row measured under the emulation
// is extrinsic at 0.02 against 0.24). Needs a device; the CPU build runs it under the host emulation (Emulated.CudaVerify.*).
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "bench/harness/verify.h"
#include "cuda_test_util.h"
#include "tests/sanitizer_build.h"

namespace {

namespace fs = std::filesystem;
using namespace lingbot;

// checked: rows that must come out "ok" (the counts of tests/pipeline/verify_test.cpp).
void expect_case_passes_on_cuda(const fs::path& dir, int expected_checked, DType dtype = DType::F32) {
  VerifyOptions o;
  o.case_dir = dir.string();
  o.kv_backend = KVBackend::Paged;
  o.kv_dtype = dtype;
  o.weights_dtype = dtype;
  o.threads = 2;
  o.device = Device::Cuda;
  const VerifyReport r = run_verify(o);
  int checked = 0;
  for (const VerifyRow& row : r.rows) {
    if (row.status == "ok") ++checked;
    EXPECT_NE(row.status, "FAIL") << dir.filename() << " " << row.tensor << ": " << row.note;
  }
  EXPECT_EQ(checked, expected_checked) << format_verify_report(r);
  EXPECT_TRUE(r.passed()) << format_verify_report(r);
  std::cout << dir.filename().string() << " [cuda, " << dtype_name(dtype) << "]: " << checked << " tensors ok, streaming " << r.seconds << " s\n";
}

// Under the emulation in a sanitizer build these two tests would take minutes of CI (the release
// build's run covers them, and the CudaSession tests run the same host code under ASan here).
#if LINGBOT_ASAN_BUILD
#define LINGBOT_SKIP_UNDER_EMULATED_ASAN()                                                             \
  if (cuda::testing::emulated_device())                                                                \
  GTEST_SKIP() << "emulated device in a sanitizer build: run by the release build's Emulated.CudaVerify"
#else
#define LINGBOT_SKIP_UNDER_EMULATED_ASAN() (void)0
#endif

}  // namespace

// The cases in testdata/: streaming, windowed with flow keyframes, streaming with flow keyframes
// (the last on a device only: under the emulation windowed-flow-tiny covers flow keyframes).
TEST(CudaVerify, TestdataGoldenCasesPassTheF32Tolerances) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  LINGBOT_SKIP_UNDER_EMULATED_ASAN();
  const fs::path root(cuda::testing::testdata_dir());
  expect_case_passes_on_cuda(root / "tiny", 19);
  expect_case_passes_on_cuda(root / "windowed-flow-tiny", 30);
  if (!cuda::testing::emulated_device()) expect_case_passes_on_cuda(root / "streaming-flow-tiny", 21);
}

// The shared cases (../shared/golden, beside the checkout): keyframes by motion, windowed mode, a
// deeper model. Under the emulation only tiny-keyframes (each kernel runs thousands of times slower).
TEST(CudaVerify, SharedGoldenCasesPassTheF32Tolerances) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  LINGBOT_SKIP_UNDER_EMULATED_ASAN();
  const fs::path root(cuda::testing::shared_golden_dir());
  if (!fs::exists(root / "tiny-keyframes" / "case.json"))
    GTEST_SKIP() << "shared golden cases not present at " << root;
  expect_case_passes_on_cuda(root / "tiny-keyframes", 19);
  if (cuda::testing::emulated_device()) return;  // windowed mode: windowed-flow-tiny above
  expect_case_passes_on_cuda(root / "windowed-tiny", 26);
  expect_case_passes_on_cuda(root / "small-d24", 19);
}

// bf16 weights and K/V (what `run --device cuda` uses by default on sm_80+): the documented bf16
// tolerances (verify_tolerance_scale). The bf16 GEMMs round activations and the tensor-core
// attention (the encoder's head_dim 64) rounds queries and probabilities, as on a device.
TEST(CudaVerify, TestdataGoldenCasesPassTheBf16Tolerances) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  LINGBOT_SKIP_UNDER_EMULATED_ASAN();
  const fs::path root(cuda::testing::testdata_dir());
  expect_case_passes_on_cuda(root / "tiny", 19, DType::BF16);
}
