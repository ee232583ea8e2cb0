// conv2d / conv_transpose2d / bilinear resize against direct double-precision definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm_dnnl.h"
#include "kernels/cpu/ops.h"

namespace lingbot::kernels {
namespace {

Tensor random_tensor(Shape shape, uint32_t seed) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float* d = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = nd(rng);
  return t;
}

// Direct definition of nn.Conv2d, accumulated in double.
std::vector<double> conv2d_ref(const Tensor& x, const Tensor& wt, const Tensor* b, int s, int p) {
  const int64_t ci_n = x.dim(0), h = x.dim(1), w = x.dim(2);
  const int64_t co_n = wt.dim(0), kh = wt.dim(2), kw = wt.dim(3);
  const int64_t ho = (h + 2 * p - kh) / s + 1, wo = (w + 2 * p - kw) / s + 1;
  std::vector<double> y(static_cast<size_t>(co_n * ho * wo));
  for (int64_t co = 0; co < co_n; ++co)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox) {
        double acc = b ? b->f32()[co] : 0.0;
        for (int64_t ci = 0; ci < ci_n; ++ci)
          for (int64_t a = 0; a < kh; ++a)
            for (int64_t c = 0; c < kw; ++c) {
              const int64_t iy = oy * s - p + a, ix = ox * s - p + c;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              acc += double(wt.f32()[((co * ci_n + ci) * kh + a) * kw + c]) * x.f32()[(ci * h + iy) * w + ix];
            }
        y[(co * ho + oy) * wo + ox] = acc;
      }
  return y;
}

// Direct definition of nn.ConvTranspose2d (weight [C_in, C_out, kh, kw]), accumulated in double.
std::vector<double> conv_t_ref(const Tensor& x, const Tensor& wt, const Tensor* b, int s, int p, int64_t ho,
                               int64_t wo) {
  const int64_t ci_n = x.dim(0), h = x.dim(1), w = x.dim(2);
  const int64_t co_n = wt.dim(1), kh = wt.dim(2), kw = wt.dim(3);
  std::vector<double> y(static_cast<size_t>(co_n * ho * wo));
  for (int64_t co = 0; co < co_n; ++co)
    for (int64_t i = 0; i < ho * wo; ++i) y[co * ho * wo + i] = b ? b->f32()[co] : 0.0;
  for (int64_t ci = 0; ci < ci_n; ++ci)
    for (int64_t co = 0; co < co_n; ++co)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          for (int64_t a = 0; a < kh; ++a)
            for (int64_t c = 0; c < kw; ++c) {
              const int64_t oy = i * s - p + a, ox = j * s - p + c;
              if (oy < 0 || oy >= ho || ox < 0 || ox >= wo) continue;
              y[(co * ho + oy) * wo + ox] +=
                  double(x.f32()[(ci * h + i) * w + j]) * wt.f32()[((ci * co_n + co) * kh + a) * kw + c];
            }
  return y;
}

double max_abs_diff(const Tensor& y, const std::vector<double>& ref) {
  EXPECT_EQ(static_cast<size_t>(y.numel()), ref.size());
  double m = 0;
  for (int64_t i = 0; i < y.numel(); ++i) m = std::max(m, std::abs(double(y.f32()[i]) - ref[i]));
  return m;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct ConvCase {
  int64_t c_in, h, w, c_out, k;
  int stride, padding;
  bool bias;
};

TEST(Conv2d, MatchesDirectDefinition) {
  const ConvCase cases[] = {
      {3, 7, 9, 5, 3, 1, 1, true},   // DPT 3x3 "same"
      {4, 7, 9, 6, 3, 2, 1, true},   // DPT resize layer 3 (k3 s2 p1), odd sizes
      {8, 5, 8, 4, 1, 1, 0, true},   // 1x1 projection (GEMM fast path)
      {8, 5, 8, 4, 1, 1, 0, false},  // 1x1 without bias
      {2, 6, 6, 3, 3, 1, 0, false},  // no padding, no bias (layerN_rn has no bias)
      {2, 5, 4, 2, 2, 3, 2, true},   // stride > kernel with padding
  };
  uint32_t seed = 1;
  for (const ConvCase& c : cases) {
    Tensor x = random_tensor({c.c_in, c.h, c.w}, seed++);
    Tensor wt = random_tensor({c.c_out, c.c_in, c.k, c.k}, seed++);
    Tensor b = random_tensor({c.c_out}, seed++);
    Tensor y = conv2d(x, wt, c.bias ? &b : nullptr, {c.stride, c.padding, 2});
    const auto ref = conv2d_ref(x, wt, c.bias ? &b : nullptr, c.stride, c.padding);
    EXPECT_EQ(y.dim(0), c.c_out);
    EXPECT_EQ(y.dim(1), conv2d_out_size(c.h, c.k, c.stride, c.padding));
    EXPECT_EQ(y.dim(2), conv2d_out_size(c.w, c.k, c.stride, c.padding));
    EXPECT_LT(max_abs_diff(y, ref), 1e-4) << "case c_in=" << c.c_in << " k=" << c.k << " s=" << c.stride;
  }
}

TEST(Conv2d, BandedIm2colEqualsSingleBandAndIsThreadInvariant) {
  // 64 input channels x 3x3 at width 2000: K·W_out = 1.15M floats per output row, so the 32 MiB
  // im2col budget holds 7 rows and the 16 output rows run in 3 bands (boundaries after rows 6, 13).
  const int64_t ci_n = 64, h = 16, w = 2000;
  Tensor x = random_tensor({ci_n, h, w}, 7);
  Tensor wt = random_tensor({4, ci_n, 3, 3}, 8);
  Tensor b = random_tensor({4}, 9);
  Tensor y1 = conv2d(x, wt, &b, {1, 1, 1});
  Tensor y2 = conv2d(x, wt, &b, {1, 1, 2});
  EXPECT_TRUE(bit_equal(y1, y2));
  // Spot-check outputs on both sides of the band boundaries against the definition.
  const float* xd = x.f32();
  const float* wd = wt.f32();
  for (int64_t oy : {int64_t{0}, int64_t{6}, int64_t{7}, int64_t{13}, int64_t{14}, int64_t{15}}) {
    for (int64_t ox : {int64_t{0}, int64_t{1000}, int64_t{1999}}) {
      double acc = b.f32()[3];
      for (int64_t ci = 0; ci < ci_n; ++ci)
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t c = 0; c < 3; ++c) {
            const int64_t iy = oy - 1 + a, ix = ox - 1 + c;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            acc += double(wd[((3 * ci_n + ci) * 3 + a) * 3 + c]) * xd[(ci * h + iy) * w + ix];
          }
      EXPECT_NEAR(y1.f32()[(3 * h + oy) * w + ox], acc, 1e-3) << oy << "," << ox;
    }
  }
}

// Reduced-precision weights (the DPT head of a bf16 model). Where oneDNN has a native bf16 matmul, the
// input is rounded to bf16 and the products accumulate in f32, so the result must match the direct
// definition evaluated in double on the rounded input and weights, within f32 accumulation error:
// |y - ref| <= 1e-5 · Σ|w·x| (K <= 2304 terms, each product exact in f32, partial sums rounded).
TEST(Conv2dLowp, NativeBf16MatchesTheDefinitionOnRoundedInputs) {
  if (gemm_path(DType::BF16) != GemmPath::DnnlNative) GTEST_SKIP() << "no native bf16 GEMM on this CPU";
  EXPECT_EQ(dnnl_gemm::gemm_impl(DType::BF16).find("ref"), std::string::npos) << dnnl_gemm::gemm_impl(DType::BF16);
  const ConvCase cases[] = {
      {3, 7, 9, 5, 3, 1, 1, true},      // 3x3 "same"
      {4, 7, 9, 6, 3, 2, 1, true},      // k3 s2 p1, odd sizes
      {8, 5, 8, 4, 1, 1, 0, true},      // 1x1 (no im2col)
      {8, 5, 8, 4, 1, 1, 0, false},     // 1x1 without bias
      {2, 6, 6, 3, 3, 1, 0, false},     // no padding, no bias
      {256, 9, 31, 40, 3, 1, 1, true},  // DPT-like K = 2304, 279 columns (2 column tiles), odd C_out
      {300, 4, 5, 270, 1, 1, 0, true},  // C_out > 256: two row tiles
  };
  uint32_t seed = 100;
  for (const ConvCase& c : cases) {
    Tensor x = random_tensor({c.c_in, c.h, c.w}, seed++);
    Tensor w32 = random_tensor({c.c_out, c.c_in, c.k, c.k}, seed++);
    Tensor b = random_tensor({c.c_out}, seed++);
    const Tensor wb = w32.to(DType::BF16);
    const Tensor xr = x.to(DType::BF16).to(DType::F32), wr = wb.to(DType::F32);
    Tensor y = conv2d(x, wb, c.bias ? &b : nullptr, {c.stride, c.padding, 2});
    const auto ref = conv2d_ref(xr, wr, c.bias ? &b : nullptr, c.stride, c.padding);
    // Σ|w·x| per output: the definition on |x| and |w|.
    Tensor xa = xr.to(DType::F32), wa = wr.to(DType::F32);
    for (int64_t i = 0; i < xa.numel(); ++i) xa.f32()[i] = std::abs(xa.f32()[i]);
    for (int64_t i = 0; i < wa.numel(); ++i) wa.f32()[i] = std::abs(wa.f32()[i]);
    const auto mag = conv2d_ref(xa, wa, nullptr, c.stride, c.padding);
    ASSERT_EQ(static_cast<size_t>(y.numel()), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_LE(std::abs(double(y.f32()[i]) - ref[i]), 1e-5 * mag[i] + 1e-6)
          << "case c_in=" << c.c_in << " k=" << c.k << " s=" << c.stride << " at " << i;
    // The input really is rounded: against the unrounded input the difference is bf16-sized.
    const auto ref_unrounded = conv2d_ref(x, wr, c.bias ? &b : nullptr, c.stride, c.padding);
    EXPECT_GT(max_abs_diff(y, ref_unrounded), 1e-4) << "case c_in=" << c.c_in;
  }
}

TEST(Conv2dLowp, NativeBf16IsThreadInvariantAcrossBands) {
  if (gemm_path(DType::BF16) != GemmPath::DnnlNative) GTEST_SKIP() << "no native bf16 GEMM on this CPU";
  // As the f32 banding test: 3 bands of output rows.
  Tensor x = random_tensor({64, 16, 2000}, 17);
  const Tensor wt = random_tensor({20, 64, 3, 3}, 18).to(DType::BF16);
  Tensor b = random_tensor({20}, 19);
  Tensor y1 = conv2d(x, wt, &b, {1, 1, 1});
  Tensor y2 = conv2d(x, wt, &b, {1, 1, 2});
  EXPECT_TRUE(bit_equal(y1, y2));
}

TEST(Conv2dLowp, WithoutANativeKernelTheWeightsAreWidened) {
  // Every dtype without a native GEMM here (f16 with oneDNN 2.6; bf16 on CPUs without AVX512_BF16)
  // computes exactly the f32 convolution with the widened weights.
  int checked = 0;
  for (DType dt : {DType::F16, DType::BF16}) {
    if (gemm_path(dt) == GemmPath::DnnlNative) continue;
    Tensor x = random_tensor({6, 7, 9}, 31);
    const Tensor wt = random_tensor({5, 6, 3, 3}, 32).to(dt);
    Tensor b = random_tensor({5}, 33);
    EXPECT_TRUE(bit_equal(conv2d(x, wt, &b, {1, 1, 2}), conv2d(x, wt.to(DType::F32), &b, {1, 1, 2})))
        << dtype_name(dt);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "every reduced-precision dtype has a native GEMM on this CPU";
}

TEST(ConvTranspose2d, MatchesDirectDefinition) {
  const ConvCase cases[] = {
      {8, 5, 8, 8, 4, 4, 0, true},  // DPT resize layer 0 (k4 s4)
      {6, 5, 8, 6, 2, 2, 0, true},  // DPT resize layer 1 (k2 s2)
      {3, 4, 5, 2, 3, 2, 1, true},  // overlapping taps with padding
      {2, 3, 3, 3, 3, 1, 0, false},
  };
  uint32_t seed = 100;
  for (const ConvCase& c : cases) {
    Tensor x = random_tensor({c.c_in, c.h, c.w}, seed++);
    Tensor wt = random_tensor({c.c_in, c.c_out, c.k, c.k}, seed++);
    Tensor b = random_tensor({c.c_out}, seed++);
    Tensor y = conv_transpose2d(x, wt, c.bias ? &b : nullptr, {c.stride, c.padding, 2});
    const int64_t ho = conv_transpose2d_out_size(c.h, c.k, c.stride, c.padding);
    const int64_t wo = conv_transpose2d_out_size(c.w, c.k, c.stride, c.padding);
    ASSERT_EQ(y.shape(), (Shape{c.c_out, ho, wo}));
    EXPECT_LT(max_abs_diff(y, conv_t_ref(x, wt, c.bias ? &b : nullptr, c.stride, c.padding, ho, wo)), 1e-4);
    Tensor y1 = conv_transpose2d(x, wt, c.bias ? &b : nullptr, {c.stride, c.padding, 1});
    EXPECT_TRUE(bit_equal(y, y1));
  }
}

TEST(ResizeBilinear, AlignCornersReproducesAffineFunctionsAndCorners) {
  // An affine function of (row, col) is reproduced exactly (up to float rounding) by bilinear
  // interpolation; with align_corners=True output (oy, ox) sits at input (oy·(H−1)/(Ho−1), ...).
  const int64_t h = 5, w = 8, ho = 70, wo = 112;
  Tensor x({2, h, w});
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) x.f32()[(c * h + i) * w + j] = float(1.5 * i - 0.25 * j + c);
  Tensor y = resize_bilinear_align_corners(x, ho, wo, 2);
  ASSERT_EQ(y.shape(), (Shape{2, ho, wo}));
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox) {
        const double sy = double(oy) * (h - 1) / (ho - 1), sx = double(ox) * (w - 1) / (wo - 1);
        EXPECT_NEAR(y.f32()[(c * ho + oy) * wo + ox], 1.5 * sy - 0.25 * sx + c, 2e-5);
      }
  // Corners are copied exactly.
  EXPECT_EQ(y.f32()[0], x.f32()[0]);
  EXPECT_EQ(y.f32()[ho * wo - 1], x.f32()[h * w - 1]);
  // Same size is the identity; ×2 of a non-affine map stays within the input range.
  Tensor r = random_tensor({3, 4, 6}, 5);
  EXPECT_TRUE(bit_equal(resize_bilinear_align_corners(r, 4, 6, 1), r));
  Tensor up = resize_bilinear_align_corners(r, 8, 12, 1);
  Tensor up2 = resize_bilinear_align_corners(r, 8, 12, 2);
  EXPECT_TRUE(bit_equal(up, up2));
  // Output size 1 samples the first pixel.
  Tensor one = resize_bilinear_align_corners(r, 1, 1, 1);
  EXPECT_EQ(one.f32()[0], r.f32()[0]);
}

TEST(ConvErrors, ShapeMismatchesNameTheShapes) {
  Tensor x({3, 5, 5});
  Tensor w_bad({4, 2, 3, 3});
  try {
    conv2d(x, w_bad, nullptr, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv2d: weight [4, 2, 3, 3] expects 2 input channels, input is [3, 5, 5]");
  }
  Tensor w({4, 3, 3, 3});
  Tensor b({5});
  try {
    conv2d(x, w, &b, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv2d: bias shape [5] does not match 4 output channels");
  }
  Tensor big({4, 3, 7, 7});
  try {
    conv2d(x, big, nullptr, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv2d: kernel 7x7 does not fit input [3, 5, 5] with padding 0");
  }
  try {
    conv2d(x, w, nullptr, {0, 0, 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv2d: stride must be >= 1, got 0");
  }
  Tensor x4({1, 3, 5, 5});
  try {
    conv2d(x4, w, nullptr, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv2d: input must have 3 dimensions, got [1, 3, 5, 5]");
  }
  Tensor wt({2, 4, 2, 2});
  try {
    conv_transpose2d(x, wt, nullptr, {2, 0, 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv_transpose2d: weight [2, 4, 2, 2] expects 2 input channels, input is [3, 5, 5]");
  }
  try {
    resize_bilinear_align_corners(x, 0, 4, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "resize_bilinear_align_corners: output size 0x4 must be positive");
  }
}

}  // namespace
}  // namespace lingbot::kernels
