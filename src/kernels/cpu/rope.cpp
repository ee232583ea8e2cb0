#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lingbot::kernels {

RopeTable rope2d_table(const int32_t* pos_row, const int32_t* pos_col, int64_t n_tokens, int head_dim, float base) {
  LINGBOT_CHECK(head_dim > 0 && head_dim % 4 == 0, "rope2d: head_dim must be a positive multiple of 4, got ",
                head_dim);
  const int half = head_dim / 2;     // features per spatial direction
  const int quarter = head_dim / 4;  // frequencies per direction
  // The reference builds inv_freq in f32: 1 / base^(2i/half), and the angle as one f32 product.
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int i = 0; i < quarter; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(half);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  RopeTable t;
  t.n_tokens = n_tokens;
  t.head_dim = head_dim;
  t.cos.resize(static_cast<size_t>(n_tokens * half));
  t.sin.resize(static_cast<size_t>(n_tokens * half));
  for (int64_t n = 0; n < n_tokens; ++n) {
    for (int d = 0; d < 2; ++d) {
      const float p = static_cast<float>(d == 0 ? pos_row[n] : pos_col[n]);
      for (int i = 0; i < quarter; ++i) {
        const float a = p * inv_freq[static_cast<size_t>(i)];
        const size_t idx = static_cast<size_t>(n * half + d * quarter + i);
        t.cos[idx] = std::cos(a);
        t.sin[idx] = std::sin(a);
      }
    }
  }
  return t;
}

RopeTable rope3d_table(const int64_t* pos_t, const int32_t* pos_h, const int32_t* pos_w, int64_t n_tokens,
                       int head_dim, std::array<int, 3> dims, double theta) {
  LINGBOT_CHECK(dims[0] % 2 == 0 && dims[1] % 2 == 0 && dims[2] % 2 == 0 && dims[0] + dims[1] + dims[2] == head_dim,
                "rope3d: t/h/w dims [", dims[0], ", ", dims[1], ", ", dims[2], "] must be even and sum to head_dim ",
                head_dim);
  const int half = head_dim / 2;
  // Frequencies per band in float64: theta^(-(2j)/band_dim).
  std::vector<double> freq;
  std::vector<int> band;
  freq.reserve(static_cast<size_t>(half));
  for (int b = 0; b < 3; ++b) {
    for (int j = 0; j < dims[b] / 2; ++j) {
      freq.push_back(1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(dims[b])));
      band.push_back(b);
    }
  }
  RopeTable t;
  t.n_tokens = n_tokens;
  t.head_dim = head_dim;
  t.cos.resize(static_cast<size_t>(n_tokens * half));
  t.sin.resize(static_cast<size_t>(n_tokens * half));
  for (int64_t n = 0; n < n_tokens; ++n) {
    const double p[3] = {static_cast<double>(pos_t[n]), static_cast<double>(pos_h[n]), static_cast<double>(pos_w[n])};
    for (int i = 0; i < half; ++i) {
      const double a = p[band[static_cast<size_t>(i)]] * freq[static_cast<size_t>(i)];
      const size_t idx = static_cast<size_t>(n * half + i);
      t.cos[idx] = static_cast<float>(std::cos(a));
      t.sin[idx] = static_cast<float>(std::sin(a));
    }
  }
  return t;
}

void rope2d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& table,
                  int num_threads) {
  rope2d_apply(x, n_tokens, heads, token_stride, RopeTableView{table.cos.data(), table.sin.data(), table.n_tokens, table.head_dim},
               num_threads);
}

void rope2d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTableView& table,
                  int num_threads) {
  LINGBOT_CHECK(table.n_tokens == n_tokens, "rope2d: table has ", table.n_tokens, " tokens, input has ", n_tokens);
  const int hd = table.head_dim, half = hd / 2, quarter = hd / 4;
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) if (n_tokens > 1 && num_threads > 1 && n_tokens * heads * hd >= (1 << 15))
  for (int64_t n = 0; n < n_tokens; ++n) {
    const float* c = table.cos + n * half;
    const float* s = table.sin + n * half;
    for (int h = 0; h < heads; ++h) {
      float* xh = x + n * token_stride + static_cast<int64_t>(h) * hd;
      for (int d = 0; d < 2; ++d) {
        float* xd = xh + d * half;
        for (int i = 0; i < quarter; ++i) {
          const float cv = c[d * quarter + i], sv = s[d * quarter + i];
          const float a = xd[i], b = xd[quarter + i];
          xd[i] = a * cv + (-b) * sv;
          xd[quarter + i] = b * cv + a * sv;
        }
      }
    }
  }
}

void rope3d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& table,
                  int num_threads) {
  rope3d_apply(x, n_tokens, heads, token_stride, RopeTableView{table.cos.data(), table.sin.data(), table.n_tokens, table.head_dim},
               num_threads);
}

void rope3d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTableView& table,
                  int num_threads) {
  LINGBOT_CHECK(table.n_tokens == n_tokens, "rope3d: table has ", table.n_tokens, " tokens, input has ", n_tokens);
  const int hd = table.head_dim, half = hd / 2;
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) if (n_tokens > 1 && num_threads > 1 && n_tokens * heads * hd >= (1 << 15))
  for (int64_t n = 0; n < n_tokens; ++n) {
    const float* c = table.cos + n * half;
    const float* s = table.sin + n * half;
    for (int h = 0; h < heads; ++h) {
      float* xh = x + n * token_stride + static_cast<int64_t>(h) * hd;
      for (int i = 0; i < half; ++i) {
        const float a = xh[2 * i], b = xh[2 * i + 1];
        xh[2 * i] = a * c[i] - b * s[i];
        xh[2 * i + 1] = a * s[i] + b * c[i];
      }
    }
  }
}

}  // namespace lingbot::kernels
