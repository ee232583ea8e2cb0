// kernels::linear with reduced-precision weights (issue #16): the oneDNN bf16 path against a double
// reference on the same rounded operands, the f32-panel path against f32 linear (bit-identical: the
// panel holds exactly the widened weights, multiplied on the same tiles), thread-count independence,
// and the weights-dtype parser's messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "sanitizer_build.h"
#include "kernels/cpu/ops.h"
#include "lingbot/dtype.h"

namespace lingbot::kernels {
namespace {

struct Problem {
  int64_t n, in, out, x_stride, y_stride;
  std::vector<float> x, b;
  std::vector<float> w;  // f32 values, already representable in `dt`
  std::vector<uint16_t> w16;
};

// Remainder tiles on both axes (n, out not multiples of the tiles), strided rows, bias.
Problem make_problem(DType dt, int64_t n = 300, int64_t in = 70, int64_t out = 530) {
  Problem p{n, in, out, in + 3, out + 5, {}, {}, {}, {}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  p.x.resize(static_cast<size_t>(n * p.x_stride));
  for (float& v : p.x) v = u(rng);
  p.b.resize(static_cast<size_t>(out));
  for (float& v : p.b) v = u(rng);
  p.w.resize(static_cast<size_t>(out * in));
  for (float& v : p.w) v = u(rng);
  p.w16.resize(p.w.size());
  convert_from_f32(p.w.data(), p.w16.data(), dt, p.w.size());
  convert_to_f32(p.w16.data(), dt, p.w.data(), p.w.size());
  return p;
}

std::vector<float> run(const Problem& p, DType dt, int threads) {
  std::vector<float> y(static_cast<size_t>(p.n * p.y_stride), -7.0f);
  linear(p.x.data(), p.n, p.in, WeightView{p.w16.data(), dt}, p.b.data(), p.out, y.data(), threads, p.x_stride,
         p.y_stride);
  return y;
}

TEST(GemmWeights, Bf16NativeMatchesDoubleReferenceOnRoundedOperands) {
  if (gemm_path(DType::BF16) != GemmPath::DnnlNative) GTEST_SKIP() << "no native bf16 GEMM on this CPU";
  const Problem p = make_problem(DType::BF16);
  const std::vector<float> y = run(p, DType::BF16, 2);
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t c = 0; c < p.out; ++c) {
      double ref = p.b[static_cast<size_t>(c)], mag = std::abs(ref);
      for (int64_t k = 0; k < p.in; ++k) {
        const double xr = bf16_to_f32(f32_to_bf16(p.x[static_cast<size_t>(r * p.x_stride + k)]));
        const double t = xr * p.w[static_cast<size_t>(c * p.in + k)];
        ref += t;
        mag += std::abs(t);
      }
      // f32 accumulation of 70 products: a few f32 ulps of the sum of magnitudes.
      ASSERT_NEAR(y[static_cast<size_t>(r * p.y_stride + c)], ref, 1e-6 * mag + 1e-7) << r << "," << c;
    }
    // Padding between rows is untouched.
    for (int64_t c = p.out; c < p.y_stride; ++c) ASSERT_EQ(y[static_cast<size_t>(r * p.y_stride + c)], -7.0f);
  }
}

TEST(GemmWeights, F32SingleRowMatchesDoubleReference) {
  // n = 1 runs as tiled matrix-vector products (the camera head's token).
  const Problem p = make_problem(DType::BF16, 1, 700, 530);  // p.w: f32 values (bf16-representable)
  std::vector<float> y(static_cast<size_t>(p.y_stride), -7.0f);
  linear(p.x.data(), 1, p.in, p.w.data(), p.b.data(), p.out, y.data(), 2);
  for (int64_t c = 0; c < p.out; ++c) {
    double ref = p.b[static_cast<size_t>(c)], mag = std::abs(ref);
    for (int64_t k = 0; k < p.in; ++k) {
      const double t = double(p.x[static_cast<size_t>(k)]) * p.w[static_cast<size_t>(c * p.in + k)];
      ref += t;
      mag += std::abs(t);
    }
    ASSERT_NEAR(y[static_cast<size_t>(c)], ref, 1e-6 * mag + 1e-7) << c;
  }
  for (int64_t c = p.out; c < p.y_stride; ++c) EXPECT_EQ(y[static_cast<size_t>(c)], -7.0f);
}

TEST(GemmWeights, PanelPathIsBitIdenticalToF32OnWidenedWeights) {
  for (DType dt : {DType::F16, DType::BF16}) {
    if (gemm_path(dt) != GemmPath::PanelSgemm) continue;  // native here: covered above
    for (int64_t n : {300, 1}) {  // n = 1: the matrix-vector path of both
      const Problem p = make_problem(dt, n);
      const std::vector<float> y = run(p, dt, 2);
      std::vector<float> ref(y.size(), -7.0f);
      linear(p.x.data(), p.n, p.in, p.w.data(), p.b.data(), p.out, ref.data(), 2, p.x_stride, p.y_stride);
      EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0) << dtype_name(dt) << " n " << n;
    }
  }
}

TEST(GemmWeights, IdenticalForAnyThreadCount) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    // Large enough for several tiles of every path (256-row / 256-column oneDNN tiles).
    const Problem p = make_problem(dt == DType::F32 ? DType::BF16 : dt, 700, 96, 600);
    auto go = [&](int threads) {
      if (dt != DType::F32) return run(p, dt, threads);
      std::vector<float> y(static_cast<size_t>(p.n * p.y_stride));
      linear(p.x.data(), p.n, p.in, WeightView{p.w.data(), DType::F32}, p.b.data(), p.out, y.data(), threads,
             p.x_stride, p.y_stride);
      return y;
    };
    const std::vector<float> one = go(1);
    for (int threads : {2, 3, 8}) {
      const std::vector<float> y = go(threads);
      EXPECT_EQ(std::memcmp(y.data(), one.data(), y.size() * sizeof(float)), 0)
          << dtype_name(dt) << " threads " << threads;
    }
  }
}

TEST(GemmWeights, AutoPicksANativeGemm) {
  EXPECT_NE(gemm_path(auto_weights_dtype()), GemmPath::PanelSgemm);  // auto never picks a slow dtype
  EXPECT_EQ(gemm_path(DType::F32), GemmPath::Sgemm);
  EXPECT_EQ(gemm_path_description(DType::F32), "OpenBLAS sgemm");
}

}  // namespace
}  // namespace lingbot::kernels

namespace lingbot::kernels {
namespace {

// An empty inner dimension: C = beta * C, and beta 0 overwrites C (BLAS's rule: C need not hold numbers
// then); it kept NaN from uninitialised memory.
TEST(GemmWeights, EmptyInnerDimensionScalesOrOverwritesC) {
  const float nan = std::nanf("");
  std::vector<float> c = {nan, 2.0f, 3.0f, nan};
  gemm(nullptr, 0, nullptr, 2, false, c.data(), 2, 2, 2, 0, 0.0f, 1);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
  c = {1.0f, 2.0f, 3.0f, 4.0f};
  gemm(nullptr, 0, nullptr, 2, false, c.data(), 2, 2, 2, 0, 0.5f, 1);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
}

// A buffer that cannot be allocated inside the threads of a reduced-precision linear (the f32 panel
// of a block of weights) reaches the caller as std::bad_alloc: an exception may not leave an OpenMP
// region, and it ended the process (std::terminate, no message).
TEST(GemmWeights, AFailedAllocationInsideTheThreadsReachesTheCaller) {
  if (LINGBOT_ASAN_BUILD) GTEST_SKIP() << "AddressSanitizer reports an allocation this size instead of failing it";
  const int64_t n = 2, in = int64_t{1} << 40, out = 4096;  // a panel of in x (up to) 256 floats: petabytes
  const std::vector<float> x(16);
  const std::vector<uint16_t> w(16);
  int panel_paths = 0;
  for (DType dt : {DType::F16, DType::BF16}) {
    panel_paths += gemm_path(dt) == GemmPath::PanelSgemm;
    std::vector<float> y(static_cast<size_t>(n * out));
    // Neither operand is read before the allocation: the native path fails on its rounded copy of x.
    EXPECT_THROW(linear(x.data(), n, in, WeightView{w.data(), dt}, nullptr, out, y.data(), 2), std::bad_alloc)
        << dtype_name(dt);
  }
  if (panel_paths == 0) GTEST_SKIP() << "every reduced dtype has a native GEMM on this CPU: no panel to allocate";
}

}  // namespace
}  // namespace lingbot::kernels
