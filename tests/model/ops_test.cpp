// Trunk kernels against naive double-precision references, and thread-count determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/patch_embed.h"
#include "kernels/cpu/resize_aa.h"
#include "kernels/cpu/rope.h"

namespace lk = lingbot::kernels;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST(Ops, LinearMatchesNaiveWithBiasAndStrides) {
  const int64_t n = 150, in = 37, out = 300;  // several GEMM tiles in both directions
  auto x = randn(static_cast<size_t>(n * (in + 3)), 1), W = randn(static_cast<size_t>(out * in), 2),
       b = randn(static_cast<size_t>(out), 3);
  std::vector<float> y(static_cast<size_t>(n * (out + 5)), 7.0f);
  lk::linear(x.data(), n, in, W.data(), b.data(), out, y.data(), 2, in + 3, out + 5);
  double err = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i)
        s += static_cast<double>(x[static_cast<size_t>(r * (in + 3) + i)]) * W[static_cast<size_t>(o * in + i)];
      err = std::max(err, std::abs(s - y[static_cast<size_t>(r * (out + 5) + o)]));
    }
  EXPECT_LT(err, 1e-4);
  EXPECT_EQ(y[static_cast<size_t>(out)], 7.0f);  // padding columns untouched
}

TEST(Ops, LayerNormGeluSiluReluResidual) {
  const int64_t n = 5, d = 64;
  auto x = randn(static_cast<size_t>(n * d), 4, 3.0f), g = randn(static_cast<size_t>(d), 5),
       b = randn(static_cast<size_t>(d), 6);
  std::vector<float> y(x.size());
  lk::layer_norm(x.data(), n, d, g.data(), b.data(), 1e-5f, y.data(), 2);
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < d; ++c) m += x[static_cast<size_t>(r * d + c)];
    m /= d;
    for (int64_t c = 0; c < d; ++c) v += std::pow(x[static_cast<size_t>(r * d + c)] - m, 2);
    v /= d;
    for (int64_t c = 0; c < d; ++c)
      ref[static_cast<size_t>(r * d + c)] =
          (x[static_cast<size_t>(r * d + c)] - m) / std::sqrt(v + 1e-5) * g[static_cast<size_t>(c)] +
          b[static_cast<size_t>(c)];
  }
  EXPECT_LT(max_abs_diff(y, ref), 1e-5);

  std::vector<float> a = {-3.0f, -1.0f, 0.0f, 0.5f, 2.0f};
  auto ge = a, si = a, re = a;
  lk::gelu_erf(ge.data(), 5, 1);
  lk::silu(si.data(), 5, 1);
  lk::relu(re.data(), 5, 1);
  for (size_t i = 0; i < a.size(); ++i) {
    const double v = a[i];
    EXPECT_NEAR(ge[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
    EXPECT_NEAR(si[i], v / (1 + std::exp(-v)), 1e-6);
    EXPECT_EQ(re[i], v > 0 ? a[i] : 0.0f);
  }
  std::vector<float> acc = {1, 2, 3, 4}, br = {10, 20, 30, 40}, gamma = {0.5f, 2.0f};
  lk::layer_scale_add(acc.data(), br.data(), gamma.data(), 2, 2, 1);
  EXPECT_EQ(acc, (std::vector<float>{6, 42, 18, 84}));
  lk::add_inplace(acc.data(), br.data(), 4, 2);
  EXPECT_EQ(acc, (std::vector<float>{16, 62, 48, 124}));
}

TEST(Ops, Rope2DRotateHalfPerSpatialHalf) {
  const int heads = 3, hd = 8;
  const int64_t n = 4;
  const int32_t pr[n] = {0, 1, 2, 5}, pc[n] = {0, 3, 1, 2};
  auto x = randn(static_cast<size_t>(n * heads * hd), 7);
  auto y = x;
  const auto table = lk::rope2d_table(pr, pc, n, hd, 100.0f);
  lk::rope2d_apply(y.data(), n, heads, heads * hd, table, 2);
  std::vector<double> ref(x.size());
  const int half = hd / 2, q = hd / 4;
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < 2; ++d) {
        const double p = d == 0 ? pr[t] : pc[t];
        const size_t base = static_cast<size_t>((t * heads + h) * hd + d * half);
        for (int i = 0; i < q; ++i) {
          const double ang = p / std::pow(100.0, 2.0 * i / half);
          const double a = x[base + i], b = x[base + q + i];
          ref[base + i] = a * std::cos(ang) - b * std::sin(ang);
          ref[base + q + i] = b * std::cos(ang) + a * std::sin(ang);
        }
      }
  EXPECT_LT(max_abs_diff(y, ref), 1e-5);
}

TEST(Ops, Rope3DInterleavedBands) {
  const int heads = 2, hd = 8;
  const std::array<int, 3> dims{4, 2, 2};
  const int64_t n = 3;
  const int64_t pt[n] = {0, 7, 1030};  // beyond upstream's 1024-entry table: computed directly
  const int32_t ph[n] = {0, 6, 9}, pw[n] = {0, 8, 6};
  auto x = randn(static_cast<size_t>(n * heads * hd), 8);
  auto y = x;
  const auto table = lk::rope3d_table(pt, ph, pw, n, hd, dims, 10000.0);
  lk::rope3d_apply(y.data(), n, heads, heads * hd, table, 1);
  std::vector<double> ref(x.size());
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      int i = 0;
      for (int band = 0; band < 3; ++band)
        for (int j = 0; j < dims[static_cast<size_t>(band)] / 2; ++j, ++i) {
          const double p = band == 0 ? static_cast<double>(pt[t]) : band == 1 ? ph[t] : pw[t];
          const double ang = p * std::pow(10000.0, -2.0 * j / dims[static_cast<size_t>(band)]);
          const size_t base = static_cast<size_t>((t * heads + h) * hd + 2 * i);
          const double a = x[base], b = x[base + 1];
          ref[base] = a * std::cos(ang) - b * std::sin(ang);
          ref[base + 1] = a * std::sin(ang) + b * std::cos(ang);
        }
    }
  EXPECT_LT(max_abs_diff(y, ref), 1e-5);
  EXPECT_THROW(lk::rope3d_table(pt, ph, pw, n, hd, {4, 2, 1}, 10000.0), lingbot::Error);
}

namespace {
// Independent double-precision antialiased Keys (a = -0.5) resampling of one axis.
std::vector<double> aa_axis(const std::vector<double>& in, int64_t out) {
  const int64_t n = static_cast<int64_t>(in.size());
  const double scale = static_cast<double>(n) / out, fs = std::max(scale, 1.0);
  auto keys = [](double x) {
    x = std::abs(x);
    if (x < 1) return (1.5 * x - 2.5) * x * x + 1;
    if (x < 2) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
    return 0.0;
  };
  std::vector<double> r(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const double c = (i + 0.5) * scale;
    double s = 0, ws = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double w = keys((j + 0.5 - c) / fs);
      s += w * in[static_cast<size_t>(j)];
      ws += w;
    }
    r[static_cast<size_t>(i)] = s / ws;
  }
  return r;
}
}  // namespace

TEST(Ops, BicubicAntialiasMatchesDoubleReferenceUpAndDown) {
  const int64_t C = 3, ih = 7, iw = 7, oh = 5, ow = 8;  // the tiny golden's pos-embed case
  auto x = randn(static_cast<size_t>(C * ih * iw), 9);
  std::vector<float> y(static_cast<size_t>(C * oh * ow));
  lk::resize_bicubic_aa(x.data(), C, ih, iw, y.data(), oh, ow, 2);
  std::vector<double> ref(y.size());
  for (int64_t c = 0; c < C; ++c) {
    std::vector<std::vector<double>> rows;
    for (int64_t r = 0; r < ih; ++r)
      rows.push_back(aa_axis(std::vector<double>(x.begin() + (c * ih + r) * iw, x.begin() + (c * ih + r + 1) * iw), ow));
    for (int64_t col = 0; col < ow; ++col) {
      std::vector<double> column(static_cast<size_t>(ih));
      for (int64_t r = 0; r < ih; ++r) column[static_cast<size_t>(r)] = rows[static_cast<size_t>(r)][static_cast<size_t>(col)];
      auto o = aa_axis(column, oh);
      for (int64_t r = 0; r < oh; ++r) ref[static_cast<size_t>((c * oh + r) * ow + col)] = o[static_cast<size_t>(r)];
    }
  }
  EXPECT_LT(max_abs_diff(y, ref), 2e-5);
  // Same size: exact copy. Constant input stays constant (weights are normalised).
  std::vector<float> same(x.size());
  lk::resize_bicubic_aa(x.data(), C, ih, iw, same.data(), ih, iw, 1);
  EXPECT_EQ(same, x);
  std::vector<float> ones(16, 1.5f), o(9 * 13);
  lk::resize_bicubic_aa(ones.data(), 1, 4, 4, o.data(), 9, 13, 1);
  for (float v : o) EXPECT_NEAR(v, 1.5f, 1e-6);
}

TEST(Ops, PatchEmbedEqualsDirectConvolution) {
  const int64_t Cin = 3, H = 28, W = 42, k = 14, Cout = 5;
  auto img = randn(static_cast<size_t>(Cin * H * W), 10), w = randn(static_cast<size_t>(Cout * Cin * k * k), 11, 0.05f),
       b = randn(static_cast<size_t>(Cout), 12);
  const int64_t P = (H / k) * (W / k);
  std::vector<float> cols(static_cast<size_t>(P * Cin * k * k)), out(static_cast<size_t>(P * Cout));
  lk::patch_embed(img.data(), Cin, H, W, k, w.data(), b.data(), Cout, cols.data(), out.data(), 2);
  std::vector<double> ref(out.size());
  for (int64_t py = 0; py < H / k; ++py)
    for (int64_t px = 0; px < W / k; ++px)
      for (int64_t o = 0; o < Cout; ++o) {
        double s = b[static_cast<size_t>(o)];
        for (int64_t c = 0; c < Cin; ++c)
          for (int64_t ky = 0; ky < k; ++ky)
            for (int64_t kx = 0; kx < k; ++kx)
              s += static_cast<double>(w[static_cast<size_t>(((o * Cin + c) * k + ky) * k + kx)]) *
                   img[static_cast<size_t>((c * H + py * k + ky) * W + px * k + kx)];
        ref[static_cast<size_t>((py * (W / k) + px) * Cout + o)] = s;
      }
  EXPECT_LT(max_abs_diff(out, ref), 1e-4);
  EXPECT_THROW(lk::patchify(img.data(), Cin, 27, W, k, cols.data(), 1), lingbot::Error);
}

TEST(Ops, BitIdenticalForOneAndTwoThreads) {
  const int64_t n = 333, in = 96, out = 520;
  auto x = randn(static_cast<size_t>(n * in), 13), W = randn(static_cast<size_t>(out * in), 14),
       b = randn(static_cast<size_t>(out), 15);
  std::vector<float> y1(static_cast<size_t>(n * out)), y2(y1.size());
  lk::linear(x.data(), n, in, W.data(), b.data(), out, y1.data(), 1);
  lk::linear(x.data(), n, in, W.data(), b.data(), out, y2.data(), 2);
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
  std::vector<float> l1(x.size()), l2(x.size());
  lk::layer_norm(x.data(), n, in, nullptr, nullptr, 1e-6f, l1.data(), 1);
  lk::layer_norm(x.data(), n, in, nullptr, nullptr, 1e-6f, l2.data(), 2);
  EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)));
  std::vector<float> r1(static_cast<size_t>(3 * 40 * 40)), r2(r1.size());
  auto src = randn(static_cast<size_t>(3 * 37 * 37), 16);
  lk::resize_bicubic_aa(src.data(), 3, 37, 37, r1.data(), 40, 40, 1);
  lk::resize_bicubic_aa(src.data(), 3, 37, 37, r2.data(), 40, 40, 2);
  EXPECT_EQ(0, std::memcmp(r1.data(), r2.data(), r1.size() * sizeof(float)));
}
