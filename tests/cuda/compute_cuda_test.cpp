// The CUDA compute backend (compute/cuda/cuda_backend.h) against the CPU backend (CpuBackend(2)):
// every Backend op on the same random inputs, run on both, outputs compared element by element.
// Each test needs a device and skips visibly without one; the constructor's error messages are
// checked everywhere. The CPU build also runs this file as Emulated.CudaComputeBackend.* against a
// host emulation of the CUDA runtime (tests/cuda_emulated/): there the backend's host code and the
// kernel bodies run for real on an emulated grid (tests/cuda_emulated/shim/), cuBLAS is the CPU's
// BLAS, and the ops designed to repeat the CPU's arithmetic give its bits (the others: below).
//
// Tolerances: |cuda − cpu| ≤ tol · max(1, |cpu|) unless said otherwise.
//   * Ops that repeat the CPU's arithmetic in its order (add, relu, layer_scale_add, add_transposed, add_axis_tables,
//     normalize_channels, modulate, RoPE, resizes, copies): 1e-6 (designed bit-identical; the slack
//     only covers a host compiler contracting differently).
//   * gelu / silu: 1e-6 (device erff / expf are within 2 ulp of libm).
//   * layer_norm, head_norm: 1e-5 (both accumulate statistics in double; 1/sqrt rounds differently).
//   * f32 GEMM ops (linear, conv2d, conv_transpose2d): 1e-5 (full f32 on both sides, different
//     summation order; K <= 128 here); patch_embed 3e-5 (K = 588: cuBLAS's split sums differ from
//     OpenBLAS's by more than 1e-5 on about 1 output in 10^4).
//   * attention, Simt kernel: 5e-5 (f32 math, different summation order and exp2); Auto on bf16
//     K/V with head_dim 64 (tensor cores, queries and probabilities rounded to bf16): 2^-8
//     (attention_tolerance in cuda_test_util.h says why).
//   * linear with f16 / bf16 weights: |cuda − cpu| ≤ u · Σ_k |x_k·W_k| + 1e-5 with u = 2^-10 (f16)
//     and 2^-8 (bf16), i.e. twice the unit roundoff of the weights dtype: the CUDA backend rounds
//     the activations to that dtype; the CPU backend does too on its oneDNN path and keeps them in
//     f32 on its panel path; the bound covers either.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "compute/cpu/cpu_backend.h"
#include "compute/cuda/cuda_backend.h"
#include "kernels/cpu/attention.h"
#include "core/error.h"
#include "cuda_test_util.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/device_support.h"
#include "lingbot/device.h"
#include "lingbot/dtype.h"

using namespace lingbot;
using namespace lingbot::compute;
using namespace lingbot::cuda::testing;
namespace k = lingbot::kernels;

namespace {

Tensor random_tensor(std::mt19937& rng, Shape shape, float scale = 1.f) {
  const auto v = random_vec(rng, static_cast<size_t>(shape_numel(shape)), -scale, scale);
  return Tensor::from_f32(std::move(shape), v);
}

// One array on each backend, filled with the same host values.
struct Pair {
  Array cpu, gpu;
  float* c() { return cpu.data(); }
  float* g() { return gpu.data(); }
};

// The two backends under comparison, and the parameters they read (declared first: a parameter must
// outlive every backend that has read it).
struct Dual {
  std::deque<Tensor> params;
  CpuBackend cpu{2};
  CudaBackend gpu;
  explicit Dual(CudaBackendOptions o = {}) : gpu(o) {}

  const Tensor& param(Tensor t) { return params.emplace_back(std::move(t)); }

  Pair put(const std::vector<float>& v) {
    Pair p{Array(cpu, {static_cast<int64_t>(v.size())}), Array(gpu, {static_cast<int64_t>(v.size())})};
    cpu.upload(p.c(), v.data(), v.size() * sizeof(float));
    gpu.upload(p.g(), v.data(), v.size() * sizeof(float));
    return p;
  }
  Pair filled(size_t n, float value) { return put(std::vector<float>(n, value)); }
  std::vector<float> get_cpu(const Pair& p) { return get(cpu, p.cpu); }
  std::vector<float> get_gpu(const Pair& p) { return get(gpu, p.gpu); }
  void compare(const Pair& p, double tol, const std::string& what) { expect_close(get_gpu(p), get_cpu(p), tol, what); }

 private:
  static std::vector<float> get(Backend& b, const Array& a) {
    std::vector<float> v(static_cast<size_t>(a.numel()));
    b.download(v.data(), a.data(), v.size() * sizeof(float));
    return v;
  }
};

MapView map(const float* d, int64_t c, int64_t h, int64_t w) { return MapView{d, c, h, w}; }

}  // namespace

// ---- construction (no device needed) ---------------------------------------------------------------

TEST(CudaComputeBackend, ConstructionErrorsNameTheCause) {
  try {
    CudaBackend b(CudaBackendOptions{.device = -1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cuda backend: device must be >= 0, got -1");
  }
  // Device 1000 does not exist anywhere: the message depends only on how many devices are visible.
  std::string why_none;
  const int n = cuda::device_count(&why_none);
  const std::string want =
      n == 0 ? "cuda backend: no CUDA device is visible (cudaGetDeviceCount: " + why_none + ")"
             : "cuda backend: device 1000 requested but " + std::to_string(n) +
                   (n == 1 ? " CUDA device is visible" : " CUDA devices are visible");
  try {
    CudaBackend b(CudaBackendOptions{.device = 1000});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

TEST(CudaComputeBackend, WithoutADeviceTheDefaultConstructorThrows) {
  if (have_cuda_device()) GTEST_SKIP() << "a CUDA device is visible: the constructor succeeds (next test)";
  try {
    CudaBackend b;
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string why_none;
    ASSERT_EQ(cuda::device_count(&why_none), 0);
    EXPECT_FALSE(why_none.empty());  // the runtime's error: cudaErrorNoDevice, cudaErrorInsufficientDriver, ...
    EXPECT_EQ(std::string(e.what()), "cuda backend: no CUDA device is visible (cudaGetDeviceCount: " + why_none + ")");
  }
}

// A GPU older than every architecture the kernels were compiled for (a T4 under the default 80;90):
// the backend refuses it naming both, and device auto takes the CPU. Runs where such a device is
// device 0 (tests/CMakeLists.txt: the emulated device with LINGBOT_EMU_NO_KERNEL_IMAGE=1).
TEST(CudaComputeBackend, ADeviceTheKernelsDoNotRunOnIsRefused) {
  if (!have_cuda_device() || cuda::kernels_run_on(0)) GTEST_SKIP() << "the kernels run on device 0 (or none is visible)";
  const cuda::ComputeCapability cc = cuda::compute_capability(0);
  const std::string sm = std::to_string(cc.major) + std::to_string(cc.minor);
  try {
    CudaBackend b;
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cuda backend: device 0 is sm_" + sm + ", and this build's kernels are compiled for sm " +
                  cuda::built_architectures() + " only: run on the CPU, or add " + sm +
                  " to -DCMAKE_CUDA_ARCHITECTURES (below sm_80 the kernels take the SIMT attention and f32 "
                  "weights; not yet run on such a GPU)");
  }
  EXPECT_EQ(resolve_device(Device::Auto), Device::Cpu);
}

TEST(CudaComputeBackend, DescribesTheDeviceAndAllocatesDeviceMemory) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  CudaBackend b;
  EXPECT_EQ(b.device(), Device::Cuda);
  EXPECT_EQ(b.description().rfind("cuda:0 (", 0), 0u) << b.description();
  EXPECT_NE(b.description().find(", sm_"), std::string::npos) << b.description();
  EXPECT_EQ(b.allocator().kind(), MemoryKind::Device);
  Array a(b, {3, 5});
  cudaPointerAttributes attr{};
  LINGBOT_CUDA_CHECK(cudaPointerGetAttributes(&attr, a.data()));
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  std::printf("  %s\n", b.description().c_str());
}

// ---- memory ---------------------------------------------------------------------------------------------

TEST(CudaComputeBackend, UploadDownloadAndCopyRows) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(1);
  Dual d;
  const auto src = random_vec(rng, 7 * 12);
  Pair s = d.put(src);
  EXPECT_EQ(d.get_gpu(s), src);  // bit-exact round trip
  // 7 rows of 9 floats from a 12-float pitch into a 10-float pitch; the 10th float of each row keeps -1.
  Pair dst = d.filled(7 * 10, -1.f);
  for (Backend* b : {static_cast<Backend*>(&d.cpu), static_cast<Backend*>(&d.gpu)}) {
    float* to = b == &d.cpu ? dst.c() : dst.g();
    const float* from = b == &d.cpu ? s.c() : s.g();
    b->copy_rows(to, 10 * 4, from + 1, 12 * 4, 7, 9 * 4);
  }
  expect_close(d.get_gpu(dst), d.get_cpu(dst), 0.0, "copy_rows");
  EXPECT_EQ(d.get_gpu(dst)[9], -1.f);
  try {
    d.gpu.copy_rows(dst.g(), 8, s.g(), 12 * 4, 1, 9 * 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "copy_rows: 1 rows of 36 bytes do not fit pitches 8 / 48");
  }
  // Tensor round trip through the table helpers.
  const Tensor t = random_tensor(rng, {4, 6});
  const Tensor back = d.gpu.download_array(d.gpu.upload_array(t));
  ASSERT_EQ(back.shape(), t.shape());
  EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0);
}

TEST(CudaComputeBackend, ParametersAreUploadedOnce) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(2);
  Dual d;
  const Tensor& W = d.param(random_tensor(rng, {16, 32}));
  const auto x = random_vec(rng, 4 * 32);
  Pair xs = d.put(x), y = d.filled(4 * 16, 0.f);
  d.gpu.make_resident(W);
  const size_t after_resident = d.gpu.allocator().bytes_allocated();
  d.gpu.linear(xs.g(), 4, W, nullptr, y.g(), 0, 0);
  d.cpu.linear(xs.c(), 4, W, nullptr, y.c(), 0, 0);
  EXPECT_EQ(d.gpu.allocator().bytes_allocated(), after_resident);  // no second copy, no scratch for f32
  EXPECT_GE(d.gpu.peak_bytes(), after_resident);
  d.compare(y, 1e-5, "linear with a resident weight");
  // resident(): the device copy, the same one on every call; copy_rows reads it like an Array.
  const void* dev = d.gpu.resident(W);
  EXPECT_EQ(d.gpu.resident(W), dev);
  EXPECT_EQ(d.gpu.resident(Tensor()), nullptr);
  Pair row = d.filled(32, 0.f);
  d.gpu.copy_rows(row.g(), 32 * 4, dev, 32 * 4, 1, 32 * 4);
  const auto got = d.get_gpu(row);
  EXPECT_EQ(std::memcmp(got.data(), W.f32() + 0, 32 * sizeof(float)), 0);
}

// ---- dense ops ------------------------------------------------------------------------------------------

TEST(CudaComputeBackend, LinearF32WithStridesAndBias) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(3);
  Dual d;
  const int64_t n = 37, in = 96, out = 80, xs = 100, ys = 85;
  const Tensor &W = d.param(random_tensor(rng, {out, in})), &b = d.param(random_tensor(rng, {out}));
  Pair x = d.put(random_vec(rng, n * xs));
  for (bool bias : {false, true}) {
    Pair y = d.filled(n * ys, 7.f);  // padding columns keep 7 on both
    d.cpu.linear(x.c(), n, W, bias ? &b : nullptr, y.c(), xs, ys);
    d.gpu.linear(x.g(), n, W, bias ? &b : nullptr, y.g(), xs, ys);
    d.compare(y, 1e-5, bias ? "linear f32 + bias" : "linear f32");
  }
}

TEST(CudaComputeBackend, LinearHalfWeightsWithinTheRoundingBound) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(4);
  Dual d;
  const int64_t n = 29, in = 128, out = 72, xs = 136, ys = 80;
  const Tensor W32 = random_tensor(rng, {out, in});
  const Tensor& b = d.param(random_tensor(rng, {out}));
  const auto xv = random_vec(rng, n * xs, -2.f, 2.f);
  Pair x = d.put(xv);
  for (DType t : {DType::BF16, DType::F16}) {
    const Tensor& W = d.param(W32.to(t));
    std::vector<float> wf(static_cast<size_t>(out * in));
    convert_to_f32(W.raw(), t, wf.data(), wf.size());
    Pair y = d.filled(n * ys, 0.f);
    d.cpu.linear(x.c(), n, W, &b, y.c(), xs, ys);
    d.gpu.linear(x.g(), n, W, &b, y.g(), xs, ys);
    const auto got = d.get_gpu(y), ref = d.get_cpu(y);
    const double u = t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -10);
    int bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double mag = 0;
        for (int64_t i = 0; i < in; ++i) mag += std::fabs(double(xv[r * xs + i]) * wf[o * in + i]);
        const double err = std::fabs(double(got[r * ys + o]) - ref[r * ys + o]);
        const double bound = u * mag + 1e-5;
        worst = std::max(worst, err / bound);
        if (!(err <= bound) && bad++ < 5)
          ADD_FAILURE() << dtype_name(t) << " row " << r << " out " << o << ": cuda " << got[r * ys + o] << " cpu "
                        << ref[r * ys + o] << " bound " << bound;
      }
    EXPECT_EQ(bad, 0);
    std::printf("  linear %s: max error %.3g of the bound\n", std::string(dtype_name(t)).c_str(), worst);
  }
}

// The fused epilogues: bias + GELU (fc1) and bias + LayerScale + residual (proj / fc2), with and
// without bias / gamma, equal to the device's own unfused ops (f32 and bf16 weights) and, with f32
// weights, to the CPU (whose defaults are the unfused ops).
TEST(CudaComputeBackend, FusedLinearEpiloguesAreTheUnfusedOps) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(15);
  Dual d;
  const int64_t n = 21, in = 64, out = 40;
  const Tensor W32 = random_tensor(rng, {out, in});
  const Tensor &b = d.param(random_tensor(rng, {out})), &g = d.param(random_tensor(rng, {out}));
  Pair x = d.put(random_vec(rng, n * in, -2.f, 2.f));
  const auto res0 = random_vec(rng, n * out);
  for (DType t : {DType::F32, DType::BF16}) {
    const Tensor& W = t == DType::F32 ? d.param(W32.clone()) : d.param(W32.to(t));
    for (const bool with_bias : {true, false}) {
      const Tensor* bp = with_bias ? &b : nullptr;
      const std::string what = std::string(dtype_name(t)) + (with_bias ? " bias" : " no bias");
      Pair y = d.filled(n * out, std::nanf("")), ref = d.filled(n * out, std::nanf(""));
      d.cpu.linear_gelu(x.c(), n, W, bp, y.c());
      d.gpu.linear_gelu(x.g(), n, W, bp, y.g());
      if (t == DType::F32) d.compare(y, 1e-5, "linear_gelu " + what);  // bf16: LinearHalfWeights* bounds linear
      d.gpu.linear(x.g(), n, W, bp, ref.g(), 0, 0);
      d.gpu.gelu_erf(ref.g(), n * out);
      expect_close(d.get_gpu(y), d.get_gpu(ref), 2e-6, "linear_gelu vs linear + gelu_erf on the device, " + what);
      for (const Tensor* gp : {&g, static_cast<const Tensor*>(nullptr)}) {
        Pair res = d.put(res0), res_ref = d.put(res0), tmp = d.filled(n * out, 0.f);
        d.cpu.linear_scale_add(x.c(), n, W, bp, gp, tmp.c(), res.c());
        d.gpu.linear_scale_add(x.g(), n, W, bp, gp, tmp.g(), res.g());
        const std::string w2 = what + (gp ? " gamma" : " no gamma");
        if (t == DType::F32) d.compare(res, 1e-5, "linear_scale_add " + w2);
        d.gpu.linear(x.g(), n, W, bp, tmp.g(), 0, 0);
        d.gpu.layer_scale_add(res_ref.g(), tmp.g(), gp, n, out);
        expect_close(d.get_gpu(res), d.get_gpu(res_ref), 0.0, "linear_scale_add vs linear + layer_scale_add, " + w2);
      }
    }
  }
}

TEST(CudaComputeBackend, LayerNormAffineStridedAndInPlace) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(5);
  Dual d;
  const int64_t n = 19, dim = 1024, xs = 1030, ys = 1040;
  const Tensor &g = d.param(random_tensor(rng, {dim})), &be = d.param(random_tensor(rng, {dim}));
  Pair x = d.put(random_vec(rng, n * xs, -3.f, 5.f));
  Pair y = d.filled(n * ys, 0.f);
  d.cpu.layer_norm(x.c(), n, dim, &g, &be, 1e-6f, y.c(), xs, ys);
  d.gpu.layer_norm(x.g(), n, dim, &g, &be, 1e-6f, y.g(), xs, ys);
  d.compare(y, 1e-5, "layer_norm affine strided");
  d.cpu.layer_norm(x.c(), n, dim, nullptr, nullptr, 1e-5f, x.c(), xs, xs);
  d.gpu.layer_norm(x.g(), n, dim, nullptr, nullptr, 1e-5f, x.g(), xs, xs);
  d.compare(x, 1e-5, "layer_norm in place, no affine");
}

TEST(CudaComputeBackend, HeadNormOnPackedQkv) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(17);
  Dual d;
  const int64_t n_tokens = 31;
  const int heads = 4, head_dim = 64;
  const int64_t stride = 3 * heads * head_dim;  // q of a fused qkv row: k and v stay untouched
  const Tensor &g = d.param(random_tensor(rng, {head_dim})), &be = d.param(random_tensor(rng, {head_dim}));
  const auto xv = random_vec(rng, n_tokens * stride, -3.f, 5.f);
  for (bool affine : {true, false}) {
    Pair x = d.put(xv);
    d.cpu.head_norm(x.c(), n_tokens, heads, head_dim, stride, affine ? &g : nullptr, affine ? &be : nullptr, 1e-6f);
    d.gpu.head_norm(x.g(), n_tokens, heads, head_dim, stride, affine ? &g : nullptr, affine ? &be : nullptr, 1e-6f);
    d.compare(x, 1e-5, affine ? "head_norm affine" : "head_norm");
  }
}

TEST(CudaComputeBackend, ActivationsAndResiduals) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(6);
  Dual d;
  const int64_t rows = 33, dim = 200, n = rows * dim;
  const auto v = random_vec(rng, n, -6.f, 6.f);
  {
    Pair a = d.put(v);
    d.cpu.gelu_erf(a.c(), n);
    d.gpu.gelu_erf(a.g(), n);
    d.compare(a, 1e-6, "gelu_erf");
  }
  {
    Pair a = d.put(v);
    d.cpu.silu(a.c(), n);
    d.gpu.silu(a.g(), n);
    d.compare(a, 1e-6, "silu");
  }
  {
    Pair a = d.put(v);
    d.cpu.relu(a.c(), n);
    d.gpu.relu(a.g(), n);
    d.compare(a, 0.0, "relu");
  }
  const auto xv = random_vec(rng, n);
  Pair x = d.put(xv);
  {
    Pair y = d.put(v);
    d.cpu.add(y.c(), x.c(), n);
    d.gpu.add(y.g(), x.g(), n);
    d.compare(y, 1e-6, "add");
  }
  const Tensor& gamma = d.param(random_tensor(rng, {dim}));
  for (const Tensor* g : {&gamma, static_cast<const Tensor*>(nullptr)}) {
    Pair y = d.put(v);
    d.cpu.layer_scale_add(y.c(), x.c(), g, rows, dim);
    d.gpu.layer_scale_add(y.g(), x.g(), g, rows, dim);
    d.compare(y, 1e-6, g ? "layer_scale_add" : "layer_scale_add without gamma");
  }
  {
    Pair y = d.put(v);  // [dim, rows] planes += x [rows, dim]ᵀ
    d.cpu.add_transposed(y.c(), x.c(), rows, dim);
    d.gpu.add_transposed(y.g(), x.g(), rows, dim);
    d.compare(y, 1e-6, "add_transposed");
  }
  {
    const int64_t channels = 6, h = 5, w = 7;  // 3 column planes, 3 row planes
    Pair y = d.put(random_vec(rng, channels * h * w));
    Pair columns = d.put(random_vec(rng, channels / 2 * w)), rows_t = d.put(random_vec(rng, channels / 2 * h));
    d.cpu.add_axis_tables(y.c(), channels, h, w, columns.c(), rows_t.c());
    d.gpu.add_axis_tables(y.g(), channels, h, w, columns.g(), rows_t.g());
    d.compare(y, 1e-6, "add_axis_tables");
  }
}

TEST(CudaComputeBackend, NormalizeChannelsAndModulate) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(7);
  Dual d;
  const int64_t channels = 3, plane = 28 * 42;
  Pair img = d.put(random_vec(rng, channels * plane, 0.f, 1.f));
  const std::vector<float> mean{0.485f, 0.456f, 0.406f}, sd{0.229f, 0.224f, 0.225f};
  Pair out = d.filled(channels * plane, 0.f);
  d.cpu.normalize_channels(img.c(), channels, plane, mean, sd, out.c());
  d.gpu.normalize_channels(img.g(), channels, plane, mean, sd, out.g());
  d.compare(out, 1e-6, "normalize_channels");
  // In place, twice in a row with other statistics: the device copy of the first is not overwritten early.
  const std::vector<float> mean2{0.5f, 0.25f, 0.125f}, sd2{2.f, 4.f, 8.f};
  for (Backend* b : {static_cast<Backend*>(&d.cpu), static_cast<Backend*>(&d.gpu)}) {
    float* p = b == &d.cpu ? img.c() : img.g();
    b->normalize_channels(p, channels, plane, mean, sd, p);
    b->normalize_channels(p, channels, plane, mean2, sd2, p);
  }
  d.compare(img, 1e-6, "normalize_channels in place, twice");
  try {
    d.gpu.normalize_channels(img.g(), 2, plane, mean, sd, img.g());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "normalize_channels: 3 means and 3 deviations for 2 channels");
  }

  const int64_t n = 21, dim = 96;
  Pair x = d.filled(n * dim, 0.f), a = d.put(random_vec(rng, n * dim)), t = d.put(random_vec(rng, n * dim));
  Pair mod = d.put(random_vec(rng, n * 3 * dim));
  d.cpu.modulate(x.c(), a.c(), t.c(), mod.c(), n, dim);
  d.gpu.modulate(x.g(), a.g(), t.g(), mod.g(), n, dim);
  d.compare(x, 1e-6, "modulate");
}

// ---- RoPE -------------------------------------------------------------------------------------------------

TEST(CudaComputeBackend, Rope2dAnd3dOnStridedTokens) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(8);
  Dual d;
  const int64_t n_tokens = 45;
  const int heads = 4, head_dim = 64;
  const int64_t stride = 3 * heads * head_dim;  // q of a fused qkv row: k and v stay untouched
  std::vector<int32_t> row(n_tokens), col(n_tokens), ph(n_tokens), pw(n_tokens);
  std::vector<int64_t> pt(n_tokens);
  for (int64_t i = 0; i < n_tokens; ++i) {
    row[i] = static_cast<int32_t>(i / 9);
    col[i] = static_cast<int32_t>(i % 9);
    pt[i] = 1000 + i / 15;
    ph[i] = static_cast<int32_t>((i % 15) / 5);
    pw[i] = static_cast<int32_t>(i % 5);
  }
  const auto xv = random_vec(rng, n_tokens * stride);
  {
    const RopeTable tc = d.cpu.rope2d_table(row, col, head_dim, 100.f);
    const RopeTable tg = d.gpu.rope2d_table(row, col, head_dim, 100.f);
    Pair x = d.put(xv);
    d.cpu.rope2d(x.c(), n_tokens, heads, stride, tc);
    d.gpu.rope2d(x.g(), n_tokens, heads, stride, tg);
    d.compare(x, 1e-6, "rope2d");
  }
  {
    const std::array<int, 3> dims{16, 24, 24};
    const RopeTable tc = d.cpu.rope3d_table(pt, ph, pw, head_dim, dims, 10000.0);
    const RopeTable tg = d.gpu.rope3d_table(pt, ph, pw, head_dim, dims, 10000.0);
    Pair x = d.put(xv);
    d.cpu.rope3d(x.c(), n_tokens, heads, stride, tc);
    d.gpu.rope3d(x.g(), n_tokens, heads, stride, tg);
    d.compare(x, 1e-6, "rope3d");
    try {
      d.gpu.rope3d(x.g(), n_tokens - 1, heads, stride, tg);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "rope3d: table has 45 tokens, input has 44");
    }
  }
}

// ---- attention --------------------------------------------------------------------------------------------

namespace {

// K/V of `tokens` tokens in dtype t on both backends (the CPU's in host memory), tokens `stride` apart.
struct DualKV {
  std::vector<unsigned char> k_host, v_host;
  Buffer k_dev, v_dev;
  DType dtype;
  int n;
  int64_t stride;
  DualKV(std::mt19937& rng, Allocator& dev, DType t, int tokens, int64_t stride_)
      : dtype(t), n(tokens), stride(stride_) {
    const auto kf = random_vec(rng, static_cast<size_t>(tokens * stride)),
               vf = random_vec(rng, static_cast<size_t>(tokens * stride));
    k_host.resize(kf.size() * dtype_size(t));
    v_host.resize(vf.size() * dtype_size(t));
    convert_from_f32(kf.data(), k_host.data(), t, kf.size());
    convert_from_f32(vf.data(), v_host.data(), t, vf.size());
    k_dev = to_device(dev, k_host.data(), k_host.size());
    v_dev = to_device(dev, v_host.data(), v_host.size());
  }
  k::KVSpan host() const { return {k_host.data(), v_host.data(), dtype, n, stride}; }
  k::KVSpan device() const { return {k_dev.data(), v_dev.data(), dtype, n, stride}; }
};

k::QueryView qview(const float* data, int n, int heads, int hd, int64_t stride) { return {data, n, heads, hd, stride}; }

}  // namespace

TEST(CudaComputeBackend, DenseAttentionOverSeveralSpans) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(9);
  const int heads = 4, hd = 64, n_q = 23;
  const int64_t row = heads * hd, q_stride = 3 * row;
  const float scale = 1.0f / std::sqrt(float(hd));
  for (auto [impl, t, tol] : {std::tuple{cuda::AttentionImpl::Simt, DType::F32, 5e-5},
                              std::tuple{cuda::AttentionImpl::Simt, DType::BF16, 5e-5},
                              std::tuple{cuda::AttentionImpl::Auto, DType::BF16, 0x1p-8}}) {
    Dual d(CudaBackendOptions{.device = 0, .attention = impl});
    Pair q = d.put(random_vec(rng, n_q * q_stride, -2.f, 2.f));
    const DualKV a(rng, d.gpu.allocator(), t, 37, row), b(rng, d.gpu.allocator(), t, 11, 2 * row);
    const std::vector<k::KVSpan> hs{a.host(), b.host()}, ds{a.device(), b.device()};
    Pair out = d.filled(n_q * row, 0.f);
    // The reference is the CPU kernel's f32 path: the CPU backend would take its bf16 path on bf16
    // K/V where the CPU has AVX512_BF16 (Q rounded to bf16), the SIMT kernel computes in f32.
    k::dense_attention(qview(q.c(), n_q, heads, hd, q_stride), hs, out.c(),
                       k::AttentionParams{scale, 2, k::AttentionCompute::F32});
    d.gpu.attention_dense(qview(q.g(), n_q, heads, hd, q_stride), ds, out.g(), scale);
    d.compare(out, tol,
              std::string("attention_dense ") + cuda::attention_impl_name(impl) + " " + std::string(dtype_name(t)));
  }
}

TEST(CudaComputeBackend, GroupedAttentionPerFrame) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(10);
  Dual d(CudaBackendOptions{.device = 0, .attention = cuda::AttentionImpl::Simt});
  const int heads = 2, hd = 32, group = 13, groups = 3, n = group * groups;
  const int64_t row = heads * hd, stride = 3 * row;  // q, k, v of one fused qkv buffer
  const auto qkv = random_vec(rng, n * stride, -2.f, 2.f);
  Pair buf = d.put(qkv);
  const auto kv_of = [&](float* base) { return k::KVSpan{base + row, base + 2 * row, DType::F32, n, stride}; };
  Pair out = d.filled(n * row, 0.f);
  d.cpu.attention_grouped(qview(buf.c(), n, heads, hd, stride), kv_of(buf.c()), group, out.c(), 0.2f, compute::AttentionPrecision::F32);
  d.gpu.attention_grouped(qview(buf.g(), n, heads, hd, stride), kv_of(buf.g()), group, out.g(), 0.2f, compute::AttentionPrecision::F32);
  d.compare(out, 5e-5, "attention_grouped");
  // The grouping itself: group g of the CPU result is dense attention of its queries over its own keys.
  const auto grouped = d.get_cpu(out);
  Pair one = d.filled(group * row, 0.f);
  for (int g = 0; g < groups; ++g) {
    float* base = buf.c() + g * group * stride;
    const k::KVSpan own{base + row, base + 2 * row, DType::F32, group, stride};
    d.cpu.attention_dense(qview(base, group, heads, hd, stride), std::span<const k::KVSpan>(&own, 1), one.c(), 0.2f);
    const auto ref = d.get_cpu(one);
    expect_close(std::vector<float>(grouped.begin() + g * group * row, grouped.begin() + (g + 1) * group * row), ref,
                 0.0, "attention_grouped group " + std::to_string(g) + " vs dense");
  }
  try {
    d.gpu.attention_grouped(qview(buf.g(), n, heads, hd, stride), kv_of(buf.g()), 7, out.g(), 0.2f, compute::AttentionPrecision::F32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "grouped attention: 39 tokens are not a multiple of the group size 7");
  }
}

// AttentionPrecision::Bf16 (the encoder and frame blocks of a bf16 model): f32 K/V are rounded to bf16
// and the default impl runs on them (the tensor-core kernel at head_dim 64 on sm_80+). Within the
// tensor-core bound of the CPU's bf16 attention (native bf16 where the CPU has it, else f32), and not
// the f32 result: the rounding happened.
TEST(CudaComputeBackend, Bf16GroupedAttentionRoundsKeysAndValues) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(13);
  Dual d;  // AttentionImpl::Auto
  const int heads = 2, hd = 64, group = 13, groups = 3, n = group * groups;
  const int64_t row = heads * hd, stride = 3 * row;
  const float scale = 1.0f / std::sqrt(float(hd));
  Pair buf = d.put(random_vec(rng, n * stride, -2.f, 2.f));
  const auto kv_of = [&](float* base) { return k::KVSpan{base + row, base + 2 * row, DType::F32, n, stride}; };
  Pair out = d.filled(n * row, 0.f), f32 = d.filled(n * row, 0.f);
  const auto bf16 = compute::AttentionPrecision::Bf16;
  d.cpu.attention_grouped(qview(buf.c(), n, heads, hd, stride), kv_of(buf.c()), group, out.c(), scale, bf16);
  d.gpu.attention_grouped(qview(buf.g(), n, heads, hd, stride), kv_of(buf.g()), group, out.g(), scale, bf16);
  // Values in [-2, 2): a unit of bf16 at 2 for each side's rounding of P and of Q (the CPU's native
  // bf16 path rounds both too): 2^-6; measured 6.2e-3 (emulated, AVX512_BF16 CPU).
  d.compare(out, 0x1p-6, "attention_grouped bf16");
  d.gpu.attention_grouped(qview(buf.g(), n, heads, hd, stride), kv_of(buf.g()), group, f32.g(), scale,
                          compute::AttentionPrecision::F32);
  const auto a = d.get_gpu(out), b = d.get_gpu(f32);
  double maxdiff = 0;
  for (size_t i = 0; i < a.size(); ++i) maxdiff = std::max(maxdiff, double(std::fabs(a[i] - b[i])));
  EXPECT_GT(maxdiff, 0.0) << "bf16 precision gave the f32 result";
  std::printf("  attention_grouped bf16 vs f32: max abs difference %.3g\n", maxdiff);
  EXPECT_LT(maxdiff, 0x1p-5);  // K and V rounded to bf16 too
}

TEST(CudaComputeBackend, CachedAttentionOverPagedAndSpanKeys) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  Dual d(CudaBackendOptions{.device = 0, .attention = cuda::AttentionImpl::Simt});
  const int heads = 2, hd = 64, n_q = 9, page_size = 8, num_pages = 5;
  const int64_t row = heads * hd;
  Pair q = d.put(random_vec(rng, n_q * row, -2.f, 2.f));
  // Pool f32 [num_pages, 2, page_size, heads, hd]; the table covers parts of three pages out of order.
  const auto pool = random_vec(rng, static_cast<size_t>(num_pages * 2 * page_size * row));
  Buffer pool_dev = to_device(d.gpu.allocator(), pool.data(), pool.size() * sizeof(float));
  const std::vector<int32_t> ids{3, 0, 4}, start{0, 2, 1}, len{8, 5, 6};
  const k::PageTableView host_table{ids.data(), start.data(), len.data(), 3};
  cuda::DevicePageTable dev_table(d.gpu.allocator());
  dev_table.upload(host_table, num_pages, page_size, d.gpu.stream());
  const DualKV extra(rng, d.gpu.allocator(), DType::F32, 10, row);
  const k::KVSpan extra_h = extra.host(), extra_d = extra.device();

  k::VisibleKV hk;
  hk.layout = k::KeyLayout::Paged;
  hk.heads = heads;
  hk.head_dim = hd;
  hk.pool = {pool.data(), DType::F32, num_pages, page_size, heads, hd};
  hk.table = host_table;
  hk.table_keys = 19;
  hk.spans = std::span<const k::KVSpan>(&extra_h, 1);
  k::VisibleKV dk = hk;
  dk.pool.data = pool_dev.data();
  dk.table = dev_table.view();
  dk.spans = std::span<const k::KVSpan>(&extra_d, 1);

  Pair out = d.filled(n_q * row, 0.f);
  d.cpu.attention_cached(qview(q.c(), n_q, heads, hd, row), hk, out.c(), 0.125f);
  d.gpu.attention_cached(qview(q.g(), n_q, heads, hd, row), dk, out.g(), 0.125f);
  d.compare(out, 5e-5, "attention_cached paged");

  // Layout Spans (a dense cache): the extra span alone.
  k::VisibleKV hs, ds;
  hs.heads = ds.heads = heads;
  hs.head_dim = ds.head_dim = hd;
  hs.spans = hk.spans;
  ds.spans = dk.spans;
  d.cpu.attention_cached(qview(q.c(), n_q, heads, hd, row), hs, out.c(), 0.125f);
  d.gpu.attention_cached(qview(q.g(), n_q, heads, hd, row), ds, out.g(), 0.125f);
  d.compare(out, 5e-5, "attention_cached spans");
}

// ---- images and feature maps ------------------------------------------------------------------------------

TEST(CudaComputeBackend, Conv2dShapes) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(12);
  Dual d;
  struct Case {
    int64_t c_in, h, w, c_out, kh, kw;
    ConvParams p;
    bool bias;
  };
  for (const Case& c : {Case{8, 17, 23, 16, 3, 3, {1, 1}, true}, Case{8, 17, 23, 12, 1, 1, {1, 0}, true},
                        Case{6, 20, 15, 10, 3, 3, {2, 1}, false}, Case{5, 9, 11, 7, 5, 3, {1, 2}, true}}) {
    const Tensor &W = d.param(random_tensor(rng, {c.c_out, c.c_in, c.kh, c.kw})),
                 &b = d.param(random_tensor(rng, {c.c_out}));
    Pair x = d.put(random_vec(rng, c.c_in * c.h * c.w));
    const int64_t ho = conv2d_out_size(c.h, c.kh, c.p), wo = conv2d_out_size(c.w, c.kw, c.p);
    Pair y = d.filled(c.c_out * ho * wo, std::nanf(""));  // output memory is not assumed zero
    d.cpu.conv2d(map(x.c(), c.c_in, c.h, c.w), W, c.bias ? &b : nullptr, c.p, y.c());
    d.gpu.conv2d(map(x.g(), c.c_in, c.h, c.w), W, c.bias ? &b : nullptr, c.p, y.g());
    d.compare(y, 1e-5,
              "conv2d " + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " s" + std::to_string(c.p.stride) +
                  " p" + std::to_string(c.p.padding) + (c.bias ? " bias" : ""));
  }
}

// bf16 conv weights (a bf16 model's DPT head): the im2col matrix rounded to bf16, tensor-core GEMM.
// Against the CPU within u·Σ|x·w| + 1e-5 per output (u = 2^-8, one bf16 rounding of each activation;
// the CPU's oneDNN path rounds them too, its panel path does not), Σ|x·w| being the conv of |x| with
// |w|; and f16 weights (widened to f32 on the device) within f32 rounding of the CPU.
TEST(CudaComputeBackend, Conv2dBf16WeightsWithinTheRoundingBound) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(14);
  Dual d;
  const int64_t c_in = 16, h = 13, w = 19, c_out = 24;
  for (const int64_t k : {3, 1}) {
    const ConvParams p{1, k == 3 ? 1 : 0};
    const Tensor W32 = random_tensor(rng, {c_out, c_in, k, k});
    const Tensor& W = d.param(W32.to(DType::BF16));
    const Tensor& b = d.param(random_tensor(rng, {c_out}));
    const auto xv = random_vec(rng, c_in * h * w, -2.f, 2.f);
    Pair x = d.put(xv);
    const int64_t n_out = c_out * h * w;
    Pair y = d.filled(n_out, std::nanf(""));
    d.cpu.conv2d(map(x.c(), c_in, h, w), W, &b, p, y.c());
    d.gpu.conv2d(map(x.g(), c_in, h, w), W, &b, p, y.g());
    // Σ|x·w| per output: the CPU conv of |x| with |w| (bf16 values, widened exactly).
    Tensor Wabs = W.to(DType::F32);
    for (int64_t i = 0; i < Wabs.numel(); ++i) Wabs.f32()[i] = std::fabs(Wabs.f32()[i]);
    std::vector<float> xa(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) xa[i] = std::fabs(xv[i]);
    std::vector<float> mag(static_cast<size_t>(n_out));
    CpuBackend(1).conv2d(map(xa.data(), c_in, h, w), Wabs, nullptr, p, mag.data());
    const auto got = d.get_gpu(y), ref = d.get_cpu(y);
    int bad = 0;
    double worst = 0, max_err = 0;
    for (int64_t i = 0; i < n_out; ++i) {
      const double bound = std::ldexp(1.0, -8) * mag[i] + 1e-5, err = std::fabs(double(got[i]) - ref[i]);
      worst = std::max(worst, err / bound);
      max_err = std::max(max_err, err);
      if (!(err <= bound) && bad++ < 5)
        ADD_FAILURE() << k << "x" << k << " output " << i << ": cuda " << got[i] << " cpu " << ref[i] << " bound " << bound;
    }
    std::printf("  conv2d bf16 weights %lldx%lld: max |cuda - cpu| %.3g, worst error / bound %.3f\n",
                static_cast<long long>(k), static_cast<long long>(k), max_err, worst);
    // f16 weights: widened to f32 on the device, as the CPU's panel path widens them.
    const Tensor& W16 = d.param(W32.to(DType::F16));
    Pair y16 = d.filled(n_out, std::nanf(""));
    d.cpu.conv2d(map(x.c(), c_in, h, w), W16, &b, p, y16.c());
    d.gpu.conv2d(map(x.g(), c_in, h, w), W16, &b, p, y16.g());
    d.compare(y16, 1e-4, "conv2d f16 weights " + std::to_string(k) + "x" + std::to_string(k));
  }
}

TEST(CudaComputeBackend, ConvTranspose2dOverlappingTaps) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(13);
  Dual d;
  struct Case {
    int64_t c_in, h, w, c_out, k;
    ConvParams p;
    bool bias;
  };
  for (const Case& c : {Case{8, 9, 13, 6, 4, {2, 1}, true}, Case{8, 9, 13, 6, 2, {2, 0}, false},
                        Case{5, 7, 6, 4, 3, {1, 1}, true}, Case{4, 5, 5, 3, 4, {4, 0}, true}}) {
    const Tensor &W = d.param(random_tensor(rng, {c.c_in, c.c_out, c.k, c.k})),
                 &b = d.param(random_tensor(rng, {c.c_out}));
    Pair x = d.put(random_vec(rng, c.c_in * c.h * c.w));
    const int64_t ho = conv_transpose2d_out_size(c.h, c.k, c.p), wo = conv_transpose2d_out_size(c.w, c.k, c.p);
    Pair y = d.filled(c.c_out * ho * wo, std::nanf(""));
    d.cpu.conv_transpose2d(map(x.c(), c.c_in, c.h, c.w), W, c.bias ? &b : nullptr, c.p, y.c());
    d.gpu.conv_transpose2d(map(x.g(), c.c_in, c.h, c.w), W, c.bias ? &b : nullptr, c.p, y.g());
    d.compare(y, 1e-5,
              "conv_transpose2d k" + std::to_string(c.k) + " s" + std::to_string(c.p.stride) + " p" +
                  std::to_string(c.p.padding) + (c.bias ? " bias" : ""));
  }
}

TEST(CudaComputeBackend, ResizeBilinearAlignCorners) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(14);
  Dual d;
  const int64_t c = 5, h = 13, w = 19;
  Pair x = d.put(random_vec(rng, c * h * w));
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{37, 54}, {7, 9}, {1, 1}, {13, 19}}) {
    Pair y = d.filled(c * oh * ow, 0.f);
    d.cpu.resize_bilinear(map(x.c(), c, h, w), oh, ow, y.c());
    d.gpu.resize_bilinear(map(x.g(), c, h, w), oh, ow, y.g());
    d.gpu.resize_bilinear(map(x.g(), c, h, w), oh, ow, y.g());  // second call: cached tables
    d.compare(y, 1e-6, "resize_bilinear " + std::to_string(oh) + "x" + std::to_string(ow));
  }
}

TEST(CudaComputeBackend, ResizeBicubicAntialiased) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(15);
  Dual d;
  const int64_t c = 6, h = 37, w = 37;
  Pair x = d.put(random_vec(rng, c * h * w));
  // Down in both, up in both, height only, width only, unchanged (a copy).
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{27, 20}, {50, 61}, {20, 37}, {37, 45}, {37, 37}}) {
    Pair y = d.filled(c * oh * ow, 0.f);
    d.cpu.resize_bicubic_aa(map(x.c(), c, h, w), oh, ow, y.c());
    d.gpu.resize_bicubic_aa(map(x.g(), c, h, w), oh, ow, y.g());
    d.compare(y, 1e-6, "resize_bicubic_aa " + std::to_string(oh) + "x" + std::to_string(ow));
  }
}

TEST(CudaComputeBackend, PatchEmbed) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(16);
  Dual d;
  const int64_t channels = 3, H = 28, W = 42, k = 14, out_ch = 64;
  const Tensor &weight = d.param(random_tensor(rng, {out_ch, channels, k, k})),
               &bias = d.param(random_tensor(rng, {out_ch}));
  Pair img = d.put(random_vec(rng, channels * H * W));
  Pair out = d.filled((H / k) * (W / k) * out_ch, 0.f);
  d.cpu.patch_embed(map(img.c(), channels, H, W), k, weight, bias, out.c());
  d.gpu.patch_embed(map(img.g(), channels, H, W), k, weight, bias, out.g());
  d.compare(out, 3e-5, "patch_embed");  // K = 3 x 14 x 14 = 588: see the tolerances above
}
