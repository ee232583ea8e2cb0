#include "kernels/cpu/resize_aa.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace lingbot::kernels {

namespace {

// Keys cubic convolution kernel, a = -0.5, evaluated in f32.
float keys_cubic(float x) {
  constexpr float a = -0.5f;
  x = std::abs(x);
  if (x < 1.0f) return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
  if (x < 2.0f) return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a;
  return 0.0f;
}

// One separable pass over `lines` independent lines: out[l, o] = sum_j w[o, j] * in[l, first[o] + j],
// with input samples `in_step` floats apart and output samples `out_step` apart.
float tap_sum(const float* src, int64_t step, const ResampleWeights& a, int64_t o) {
  const float* w = a.w.data() + o * a.max_taps;
  const float* s = src + a.first[static_cast<size_t>(o)] * step;
  const int64_t n = a.count[static_cast<size_t>(o)];
  if (n == 0) return 0.0f;
  float acc = s[0] * w[0];
  for (int64_t j = 1; j < n; ++j) acc += s[j * step] * w[j];
  return acc;
}

}  // namespace

// Mirrors the reference's mixed f32/f64 promotions: scale and support are f32, the centre is
// computed in f64 and stored in f32, each tap's argument is formed in f64 and evaluated in f32.
ResampleWeights bicubic_aa_weights(int64_t in, int64_t out) {
  ResampleWeights a;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float support = scale >= 1.0f ? static_cast<float>((4 * 0.5) * static_cast<double>(scale))
                                      : static_cast<float>(4 * 0.5);
  a.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const float invscale = scale >= 1.0f ? static_cast<float>(1.0 / static_cast<double>(scale)) : 1.0f;
  a.first.resize(static_cast<size_t>(out));
  a.count.resize(static_cast<size_t>(out));
  a.w.assign(static_cast<size_t>(out * a.max_taps), 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    const float center = static_cast<float>(static_cast<double>(scale) * (static_cast<double>(i) + 0.5));
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), 0);
    int64_t xsize = std::min<int64_t>(static_cast<int64_t>(static_cast<double>(center + support) + 0.5), in) - xmin;
    xsize = std::clamp<int64_t>(xsize, 0, a.max_taps);
    float* w = a.w.data() + i * a.max_taps;
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      const float arg = static_cast<float>(
          (static_cast<double>(static_cast<float>(j + xmin) - center) + 0.5) * static_cast<double>(invscale));
      w[j] = keys_cubic(arg);
      total += w[j];
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    a.first[static_cast<size_t>(i)] = xmin;
    a.count[static_cast<size_t>(i)] = xsize;
  }
  return a;
}

void resize_bicubic_aa(const float* in, int64_t channels, int64_t in_h, int64_t in_w, float* out, int64_t out_h,
                       int64_t out_w, int num_threads) {
  LINGBOT_CHECK(in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0, "resize_bicubic_aa: sizes must be positive, got ",
                in_h, "x", in_w, " -> ", out_h, "x", out_w);
  const int nt = std::max(1, num_threads);
  // Width pass (skipped when the width does not change), into a [channels, in_h, out_w] buffer.
  std::vector<float> tmp;
  const float* mid = in;
  if (out_w != in_w) {
    const ResampleWeights aw = bicubic_aa_weights(in_w, out_w);
    tmp.resize(static_cast<size_t>(channels * in_h * out_w));
    const int64_t rows = channels * in_h;
#pragma omp parallel for schedule(static) num_threads(nt) if (rows > 1 && nt > 1)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out_w; ++o) tmp[static_cast<size_t>(r * out_w + o)] = tap_sum(in + r * in_w, 1, aw, o);
    mid = tmp.data();
  }
  // Height pass.
  if (out_h != in_h) {
    const ResampleWeights ah = bicubic_aa_weights(in_h, out_h);
#pragma omp parallel for schedule(static) num_threads(nt) if (channels > 1 && nt > 1)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t o = 0; o < out_h; ++o)
        for (int64_t x = 0; x < out_w; ++x)
          out[(c * out_h + o) * out_w + x] = tap_sum(mid + c * in_h * out_w + x, out_w, ah, o);
  } else {
    std::memcpy(out, mid, static_cast<size_t>(channels * in_h * out_w) * sizeof(float));
  }
}

}  // namespace lingbot::kernels
