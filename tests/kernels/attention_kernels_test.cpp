// The attention inner-kernel sets (portable and AVX2) checked one against the other and against a
// double reference, so the portable fallback stays tested on machines that pick AVX2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "lingbot/dtype.h"

using namespace lingbot;
using namespace lingbot::kernels;
using namespace lingbot::kernels::detail;

namespace {

std::vector<const AttnKernels*> kernel_sets() {
  std::vector<const AttnKernels*> v{&portable_kernels()};
  if (avx2_kernels()) v.push_back(avx2_kernels());
  if (avx512_kernels()) v.push_back(avx512_kernels());
  return v;
}

const char* name_of(const AttnKernels* k) {
  return k == &portable_kernels() ? "portable" : k == avx2_kernels() ? "avx2" : "avx512";
}

}  // namespace

TEST(AttentionKernels, AvailableSetsAreReported) {
  // Not a skip: just make visible which sets the other tests cover on this machine.
  std::cout << "attention kernel sets tested:";
  for (const AttnKernels* k : kernel_sets()) std::cout << " " << name_of(k);
  std::cout << (avx2_kernels() ? "" : " (CPU lacks AVX2/FMA/F16C)") << (avx512_kernels() ? "" : " (no AVX-512F)")
            << "; selected: " << name_of(&select_kernels()) << "\n";
  EXPECT_EQ(&select_kernels(), kernel_sets().back());
}

TEST(AttentionKernels, EverySetMatchesDoubleReference) {
  // Tolerance as in attention_test.cpp: f32 accumulation vs double, |err| <= 2e-5 * max(1, |ref|).
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int d : {5, 8, 24, 36, 64, 80, 128}) {
    const int heads = 3, n_q = d == 64 ? 400 : 37;  // 400 rows: two query groups, several tiles
    const int64_t row = heads * d;
    // Three segments of different dtypes and strides; 300 keys span three key blocks.
    const int seg_tokens[] = {100, 1, 199};
    const DType seg_dt[] = {DType::F32, DType::F16, DType::BF16};
    std::vector<std::vector<uint16_t>> store;
    std::vector<KeySegment> segs;
    std::vector<double> kref, vref;  // [key][heads*d]
    for (int s = 0; s < 3; ++s) {
      const int64_t stride = row + 2 * s;
      const size_t n = static_cast<size_t>(seg_tokens[s] * stride);
      std::vector<float> kf(n), vf(n);
      for (auto& x : kf) x = u(rng);
      for (auto& x : vf) x = u(rng);
      std::vector<uint16_t> kb(n * dtype_size(seg_dt[s]) / 2), vb(kb.size());
      convert_from_f32(kf.data(), kb.data(), seg_dt[s], n);
      convert_from_f32(vf.data(), vb.data(), seg_dt[s], n);
      convert_to_f32(kb.data(), seg_dt[s], kf.data(), n);  // the exact stored values
      convert_to_f32(vb.data(), seg_dt[s], vf.data(), n);
      for (int t = 0; t < seg_tokens[s]; ++t)
        for (int64_t i = 0; i < row; ++i) {
          kref.push_back(kf[t * stride + i]);
          vref.push_back(vf[t * stride + i]);
        }
      store.push_back(std::move(kb));
      store.push_back(std::move(vb));
      segs.push_back({store[store.size() - 2].data(), store.back().data(), seg_dt[s], seg_tokens[s], stride});
    }
    const int64_t n_keys = 300;
    std::vector<float> q(static_cast<size_t>(n_q) * row);
    for (auto& x : q) x = 2.f * u(rng);
    const float scale = 1.f / std::sqrt(static_cast<float>(d));

    std::vector<float> ref(q.size());
    std::vector<double> sc(n_keys);
    for (int t = 0; t < n_q; ++t)
      for (int h = 0; h < heads; ++h) {
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < n_keys; ++j) {
          double a = 0;
          for (int c = 0; c < d; ++c) a += static_cast<double>(q[t * row + h * d + c]) * kref[j * row + h * d + c];
          sc[j] = a * scale;
          mx = std::max(mx, sc[j]);
        }
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        for (int c = 0; c < d; ++c) {
          double a = 0;
          for (int64_t j = 0; j < n_keys; ++j) a += sc[j] * vref[j * row + h * d + c];
          ref[t * row + h * d + c] = static_cast<float>(a / sum);
        }
      }

    std::vector<float> avx2_out;
    for (const AttnKernels* k : kernel_sets()) {
      std::vector<float> out(q.size());
      run_attention(*k, {q.data(), n_q, heads, d, row}, segs, n_keys, out.data(), {scale, 2});
      // The AVX-512 products sum in the AVX2 order: identical bits, whichever the CPU picks.
      if (k == avx2_kernels()) avx2_out = out;
      if (k == avx512_kernels()) {
        EXPECT_EQ(0, std::memcmp(out.data(), avx2_out.data(), out.size() * 4)) << "d=" << d;
      }
      int bad = 0;
      for (size_t i = 0; i < out.size() && bad < 5; ++i)
        if (!(std::fabs(out[i] - ref[i]) <= 2e-5 * std::max(1.f, std::fabs(ref[i])))) {
          ADD_FAILURE() << name_of(k) << " d=" << d << " element " << i << ": " << out[i] << " vs " << ref[i];
          ++bad;
        }
    }
  }
}

TEST(AttentionKernels, ConvertIsExactForEveryHalfAndBfloat) {
  // Every 16-bit pattern converts exactly as core/dtype.h does (NaN stays NaN).
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<float> want(all.size());
    convert_to_f32(all.data(), t, want.data(), all.size());
    for (const AttnKernels* k : kernel_sets()) {
      std::vector<float> got(all.size());
      // Odd lengths exercise the vector tails.
      for (size_t i = 0; i < all.size(); i += 1001)
        k->convert(all.data() + i, t, got.data() + i, static_cast<int>(std::min<size_t>(1001, all.size() - i)));
      for (size_t i = 0; i < all.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << name_of(k) << " " << i;
        } else {
          ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << name_of(k) << " " << dtype_name(t) << " pattern " << i;
        }
      }
    }
  }
}

TEST(AttentionKernels, PackTransposesExactly) {
  for (int dp : {16, 64, 128}) {
    std::vector<float> rows(static_cast<size_t>(kKeyPanel) * dp);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
    for (const AttnKernels* k : kernel_sets()) {
      std::vector<float> panel(rows.size(), -1.f);
      k->pack_k(rows.data(), dp, panel.data());
      for (int t = 0; t < kKeyPanel; ++t)
        for (int c = 0; c < dp; ++c) ASSERT_EQ(panel[c * kKeyPanel + t], rows[t * dp + c]) << name_of(k);
    }
  }
}

TEST(AttentionKernels, SoftmaxExpIsAccurateAndMasksTail) {
  // One row: scores over a wide range (log2 domain), 37 valid of 48 columns.
  for (const AttnKernels* k : kernel_sets()) {
    std::vector<float> s(kKeyBlock, 123.f);
    for (int j = 0; j < 37; ++j) s[j] = -140.f + 4.f * j - 0.37f * (j % 5);
    const float mx = s[36];
    float m = -INFINITY, l = 0.f, alpha = -1.f;
    std::vector<float> orig = s;
    k->softmax(s.data(), 1, 37, 48, &m, &l, &alpha);
    EXPECT_EQ(m, mx) << name_of(k);
    EXPECT_EQ(alpha, 0.f) << name_of(k);
    double sum = 0;
    for (int j = 0; j < 37; ++j) {
      const float x = orig[j] - mx;  // the kernel's own f32 argument
      const double want = std::exp2(static_cast<double>(x));
      sum += s[j];
      // 3e-7 relative: Cephes-style exp2 polynomial; results below 2^-126 may flush to 0.
      if (want >= 0x1p-126) {
        EXPECT_NEAR(s[j], want, 3e-7 * want) << name_of(k) << " j=" << j;
      } else {
        EXPECT_LE(s[j], 0x1p-126) << name_of(k) << " j=" << j;
      }
    }
    for (int j = 37; j < 48; ++j) EXPECT_EQ(s[j], 0.f) << name_of(k) << " masked column " << j;
    EXPECT_NEAR(l, sum, 1e-6 * sum) << name_of(k);
  }
}
