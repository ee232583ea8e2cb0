#pragma once
// Helpers for the CUDA tests: skip with a visible reason when no device is present, and small RAII
// device arrays filled from host vectors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace lingbot::cuda::testing {

inline bool have_cuda_device() { return device_count() > 0; }

// testdata/ and the shared golden folder: the environment's LINGBOT_TESTDATA_DIR /
// LINGBOT_SHARED_GOLDEN_DIR where the binary runs away from its source tree (scripts/gpu_check.sh
// sets both for a bundle), else the build's own.
inline std::string dir_from_env(const char* var, const char* built_in) {
  const char* env = std::getenv(var);
  return env && *env ? env : built_in;
}
inline std::string testdata_dir() { return dir_from_env("LINGBOT_TESTDATA_DIR", LINGBOT_TESTDATA_DIR); }
inline std::string shared_golden_dir() {
  return dir_from_env("LINGBOT_SHARED_GOLDEN_DIR", LINGBOT_SHARED_GOLDEN_DIR);
}

// True under the host emulation of tests/cuda_emulated (its device is named so), where kernels run
// thousands of times slower: the largest shapes are scaled down there.
inline bool emulated_device() {
  cudaDeviceProp p{};
  return cudaGetDeviceProperties(&p, 0) == cudaSuccess && std::string(p.name) == "host emulation";
}

// Skips the calling test when no CUDA device is visible, saying so and why (the runtime's error) on
// stderr and in the skip reason; scripts/gpu_check.sh reports that reason.
#define LINGBOT_REQUIRE_CUDA_DEVICE()                                                                    \
  do {                                                                                                   \
    std::string lingbot_why_none_;                                                                       \
    if (::lingbot::cuda::device_count(&lingbot_why_none_) == 0) {                                        \
      std::fprintf(stderr, "no CUDA device: skipped %s (cudaGetDeviceCount: %s)\n",                      \
                   ::testing::UnitTest::GetInstance()->current_test_info()->name(), lingbot_why_none_.c_str()); \
      GTEST_SKIP() << "no CUDA device: skipped (cudaGetDeviceCount: " << lingbot_why_none_                \
                   << "; the CUDA build is compiled and linked, not run)";                               \
    }                                                                                                    \
  } while (0)

// n floats uniform in [lo, hi).
inline std::vector<float> random_vec(std::mt19937& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Every element of `got` within `tol` of `ref`, relative to max(1, |ref|) (NaN fails); the first 5
// misses are named, and the worst error is printed.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]) / std::max(1.0, std::fabs(static_cast<double>(ref[i])));
    worst = std::max(worst, err);
    if (!(err <= tol) && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements out of tolerance " << tol;
  std::printf("  %s: max rel error %.3g (tolerance %.3g)\n", what.c_str(), worst, tol);
}

// A device copy of host bytes, allocated through `alloc`.
inline Buffer to_device(Allocator& alloc, const void* host, size_t bytes) {
  Buffer b(alloc, bytes);
  if (bytes) LINGBOT_CUDA_CHECK(cudaMemcpy(b.data(), host, bytes, cudaMemcpyHostToDevice));
  return b;
}

template <typename T>
std::vector<T> to_host(const void* device, size_t n) {
  std::vector<T> v(n);
  if (n) LINGBOT_CUDA_CHECK(cudaMemcpy(v.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Error allowed of a CUDA attention output against the CPU kernel's f32 path, relative to
// max(1, |cpu|): the SIMT kernel keeps f32 through softmax. The tensor-core kernel follows the CPU
// bf16 contract (kernels/cpu/attention.h): q * scale * log2(e) rounded to the K/V dtype once, P
// rounded to it for P·V and summed as rounded, so each output is a convex combination of V rows
// whose weights are off by the dtype's rounding. Tolerance: one unit of the dtype at 1 (2^-8 bf16,
// 2^-11 f16). Measured over every tensor-core problem of the emulated suite before the sums used the
// rounded P (2026-12-06): 1.43e-3 bf16 (8 keys), 2.41e-4 f16.
inline double attention_tolerance(AttentionImpl impl, DType dt) {
  if (impl == AttentionImpl::Simt) return 5e-5;
  return dt == DType::F16 ? 0x1p-11 : 0x1p-8;
}

}  // namespace lingbot::cuda::testing
