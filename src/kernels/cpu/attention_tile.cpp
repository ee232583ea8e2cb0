// Flash-style driver of one work item (head x query group) and the portable inner kernels.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/attention_internal.h"

namespace lingbot::kernels::detail {

AttnScratch::AttnScratch(int head_dim)
    : dp((head_dim + kDimAlign - 1) / kDimAlign * kDimAlign),
      q(static_cast<size_t>(kMaxQueryGroup) * dp),
      o(static_cast<size_t>(kMaxQueryGroup) * dp),
      s(static_cast<size_t>(kMaxQueryTile) * kKeyBlock),
      kp(static_cast<size_t>(kKeyBlock) * dp),
      v(static_cast<size_t>(kKeyBlock) * dp),
      m(kMaxQueryGroup),
      l(kMaxQueryGroup),
      alpha(kMaxQueryGroup),
      krows(static_cast<size_t>(kKeyPanel) * dp) {}

namespace {

void qk_portable(const float* q, const float* kp, int rows, int cols, int dp, float* s) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) {
      const float* panel = kp + static_cast<size_t>(j / kKeyPanel) * dp * kKeyPanel + j % kKeyPanel;
      float acc = 0.f;
      for (int d = 0; d < dp; ++d) acc += q[r * dp + d] * panel[d * kKeyPanel];
      s[r * kKeyBlock + j] = acc;
    }
  }
}

void softmax_portable(float* s, int rows, int n_valid, int cols, float* m, float* l, float* alpha) {
  for (int r = 0; r < rows; ++r) {
    float* sr = s + static_cast<size_t>(r) * kKeyBlock;
    float mx = m[r];
    for (int j = 0; j < n_valid; ++j) mx = std::max(mx, sr[j]);
    alpha[r] = std::exp2(m[r] - mx);  // m = -inf on the first block gives 0
    float sum = 0.f;
    for (int j = 0; j < n_valid; ++j) {
      sr[j] = std::exp2(sr[j] - mx);
      sum += sr[j];
    }
    for (int j = n_valid; j < cols; ++j) sr[j] = 0.f;
    l[r] = l[r] * alpha[r] + sum;
    m[r] = mx;
  }
}

void pv_portable(const float* p, const float* v, const float* alpha, int rows, int n_keys, int dp, float* o) {
  for (int r = 0; r < rows; ++r) {
    float* orow = o + static_cast<size_t>(r) * dp;
    for (int c = 0; c < dp; ++c) orow[c] *= alpha[r];
    for (int j = 0; j < n_keys; ++j) {
      const float pj = p[r * kKeyBlock + j];
      const float* vrow = v + static_cast<size_t>(j) * dp;
      for (int c = 0; c < dp; ++c) orow[c] += pj * vrow[c];
    }
  }
}

void pack_k_portable(const float* rows, int dp, float* panel) {
  for (int t = 0; t < kKeyPanel; ++t)
    for (int d = 0; d < dp; ++d) panel[d * kKeyPanel + t] = rows[t * dp + d];
}

void convert_portable(const void* src, DType t, float* dst, int n) { convert_to_f32(src, t, dst, static_cast<size_t>(n)); }

// Converts keys [cursor, cursor+nk) of head h into scratch.kp (packed panels) and scratch.v.
// K/V are converted to f32 once per block and reused by every query row of the tile.
void load_block(const AttnKernels& kern, const std::vector<KeySegment>& segs, KeyCursor& cur, int h, int head_dim,
                int nk, AttnScratch& sc) {
  const int dp = sc.dp;
  for (int j0 = 0; j0 < nk; j0 += kKeyPanel) {
    const int n = std::min(kKeyPanel, nk - j0);
    for (int t = 0; t < n; ++t) {
      int64_t off = 0;
      const KeySegment& sg = cur.next(segs, h, head_dim, off);
      kern.convert(static_cast<const unsigned char*>(sg.k) + off, sg.dtype, sc.krows.data() + static_cast<size_t>(t) * dp,
                   head_dim);
      kern.convert(static_cast<const unsigned char*>(sg.v) + off, sg.dtype,
                   sc.v.data() + static_cast<size_t>(j0 + t) * dp, head_dim);
    }
    // Keys past the end of the last block: zero (their scores are masked; this keeps them finite).
    std::fill(sc.krows.begin() + static_cast<ptrdiff_t>(n) * dp, sc.krows.end(), 0.f);
    kern.pack_k(sc.krows.data(), dp, sc.kp.data() + static_cast<size_t>(j0) * dp);
  }
}

}  // namespace

const AttnKernels& portable_kernels() {
  static const AttnKernels k{qk_portable, softmax_portable, pv_portable, convert_portable, pack_k_portable};
  return k;
}

const AttnKernels& select_kernels() {
  static const AttnKernels& k = avx512_kernels()  ? *avx512_kernels()
                                : avx2_kernels() ? *avx2_kernels()
                                                 : portable_kernels();
  return k;
}

void attend_group(const AttnKernels& kern, const QueryView& q, int h, int q0, int nq, float qscale,
                  const std::vector<KeySegment>& segs, int64_t n_keys, AttnScratch& sc, float* out) {
  const int d = q.head_dim, dp = sc.dp;
  const int rows = (nq + kRowGroup - 1) / kRowGroup * kRowGroup;
  std::fill(sc.q.begin(), sc.q.end(), 0.f);
  std::fill(sc.o.begin(), sc.o.end(), 0.f);
  for (int r = 0; r < nq; ++r) {
    const float* src = q.data + static_cast<int64_t>(q0 + r) * q.token_stride + static_cast<int64_t>(h) * d;
    for (int c = 0; c < d; ++c) sc.q[static_cast<size_t>(r) * dp + c] = src[c] * qscale;
  }
  std::fill(sc.m.begin(), sc.m.end(), -std::numeric_limits<float>::infinity());
  std::fill(sc.l.begin(), sc.l.end(), 0.f);

  // Each K/V block is read from its pages and converted to f32 once per group, then used by every
  // query tile of the group while it is hot in cache (per head, key rows are strided in the pool).
  KeyCursor cur;
  for (int64_t k0 = 0; k0 < n_keys; k0 += kKeyBlock) {
    const int nk = static_cast<int>(std::min<int64_t>(kKeyBlock, n_keys - k0));
    const int cols = (nk + kKeyPanel - 1) / kKeyPanel * kKeyPanel;
    load_block(kern, segs, cur, h, d, nk, sc);
    for (int t0 = 0; t0 < rows; t0 += kMaxQueryTile) {
      const int tr = std::min(kMaxQueryTile, rows - t0);
      kern.qk(sc.q.data() + static_cast<size_t>(t0) * dp, sc.kp.data(), tr, cols, dp, sc.s.data());
      kern.softmax(sc.s.data(), tr, nk, cols, sc.m.data() + t0, sc.l.data() + t0, sc.alpha.data() + t0);
      kern.pv(sc.s.data(), sc.v.data(), sc.alpha.data() + t0, tr, nk, dp, sc.o.data() + static_cast<size_t>(t0) * dp);
    }
  }

  write_rows(q, h, q0, nq, dp, sc.o.data(), sc.l.data(), out);
}

void write_rows(const QueryView& q, int h, int q0, int nq, int dp, const float* o, const float* l, float* out) {
  const int d = q.head_dim;
  const int64_t out_stride = static_cast<int64_t>(q.heads) * d;
  for (int r = 0; r < nq; ++r) {
    float* dst = out + static_cast<int64_t>(q0 + r) * out_stride + static_cast<int64_t>(h) * d;
    const float inv = 1.f / l[r];
    for (int c = 0; c < d; ++c) dst[c] = o[static_cast<size_t>(r) * dp + c] * inv;
  }
}

}  // namespace lingbot::kernels::detail
