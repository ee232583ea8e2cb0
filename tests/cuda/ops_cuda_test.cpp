// CUDA dense ops against the CPU ops (kernels/cpu/ops.h) on random data.
// Tolerances: linear 1e-4 relative to max(1, |cpu|) (f32 SGEMM both sides, different summation
// order); layer_norm 1e-5 (both accumulate statistics in double); gelu 1e-6 (erff vs the CPU's erf);
// store_rows bit-exact (both round to nearest even).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops_cuda.h"
#include "lingbot/dtype.h"

using namespace lingbot;
using namespace lingbot::cuda;
using namespace lingbot::cuda::testing;

TEST(CudaOps, LinearMatchesCpuWithStridesAndBias) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(3);
  CudaAllocator alloc;
  CudaContext ctx;
  const int64_t n = 37, in = 96, out = 80, xs = 100, ys = 85;
  const auto x = random_vec(rng, n * xs), W = random_vec(rng, out * in), b = random_vec(rng, out);
  for (bool bias : {false, true}) {
    std::vector<float> ref(n * ys, 0.f);
    kernels::linear(x.data(), n, in, W.data(), bias ? b.data() : nullptr, out, ref.data(), 1, xs, ys);
    Buffer xd = to_device(alloc, x.data(), x.size() * 4), Wd = to_device(alloc, W.data(), W.size() * 4),
           bd = to_device(alloc, b.data(), b.size() * 4), yd(alloc, ref.size() * 4);
    linear(ctx, static_cast<const float*>(xd.data()), n, in, static_cast<const float*>(Wd.data()),
           bias ? static_cast<const float*>(bd.data()) : nullptr, out, static_cast<float*>(yd.data()), xs, ys);
    auto got = to_host<float>(yd.data(), ref.size());
    for (int64_t r = 0; r < n; ++r)  // padding columns are not compared
      for (int64_t c = out; c < ys; ++c) got[r * ys + c] = ref[r * ys + c];
    expect_close(got, ref, 1e-4, bias ? "linear+bias" : "linear");
  }
}

TEST(CudaOps, LayerNormAndGeluMatchCpu) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(4);
  CudaAllocator alloc;
  CudaContext ctx;
  const int64_t n = 19, dim = 1024;
  const auto x = random_vec(rng, n * dim, -3.f, 3.f), g = random_vec(rng, dim), be = random_vec(rng, dim);
  std::vector<float> ref(n * dim);
  kernels::layer_norm(x.data(), n, dim, g.data(), be.data(), 1e-6f, ref.data(), 1);
  Buffer xd = to_device(alloc, x.data(), x.size() * 4), gd = to_device(alloc, g.data(), g.size() * 4),
         bd = to_device(alloc, be.data(), be.size() * 4), yd(alloc, ref.size() * 4);
  layer_norm(ctx, static_cast<const float*>(xd.data()), n, dim, static_cast<const float*>(gd.data()),
             static_cast<const float*>(bd.data()), 1e-6f, static_cast<float*>(yd.data()));
  expect_close(to_host<float>(yd.data(), ref.size()), ref, 1e-5, "layer_norm");

  std::vector<float> gel = x;
  kernels::gelu_erf(gel.data(), static_cast<int64_t>(gel.size()), 1);
  gelu_erf(ctx, static_cast<float*>(xd.data()), static_cast<int64_t>(x.size()));
  expect_close(to_host<float>(xd.data(), x.size()), gel, 1e-6, "gelu_erf");
}

TEST(CudaOps, StoreRowsRoundsLikeTheHostConversion) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(5);
  CudaAllocator alloc;
  const int64_t tokens = 13, row = 40, src_stride = 45, dst_stride = 48;
  auto x = random_vec(rng, tokens * src_stride, -70000.f, 70000.f);  // includes f16 overflow to inf
  x[0] = 1e-8f;                                             // f16 subnormal
  Buffer xd = to_device(alloc, x.data(), x.size() * 4);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const size_t es = dtype_size(t);
    Buffer dd(alloc, tokens * dst_stride * es);
    store_rows(static_cast<const float*>(xd.data()), src_stride, dd.data(), t, dst_stride, tokens, row, nullptr);
    const auto got = to_host<unsigned char>(dd.data(), tokens * dst_stride * es);
    std::vector<unsigned char> want(row * es);
    for (int64_t r = 0; r < tokens; ++r) {
      convert_from_f32(x.data() + r * src_stride, want.data(), t, row);
      EXPECT_EQ(std::memcmp(got.data() + r * dst_stride * es, want.data(), row * es), 0)
          << dtype_name(t) << " token " << r;
    }
  }
}
