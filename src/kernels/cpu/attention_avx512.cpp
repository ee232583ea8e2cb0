// AVX-512F inner kernels for attention (QK^T, softmax, PV), selected at run time on CPUs with
// AVX-512F (no global -mavx512f). They perform exactly the operations of the AVX2 kernels in the same
// order (one FMA chain per output element, over d resp. keys; lane-wise exp2; the same partial sums),
// so results are bit-identical to the AVX2 set; only the vector width differs. Conversion and
// packing are the AVX2 ones.
#include "kernels/cpu/attention_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's avx512fintrin.h builds its "undefined" vectors by self-assignment, which trips
// -Wmaybe-uninitialized wherever max/min/roundscale/cvt intrinsics are inlined; not a real use.
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/attention_exp2_avx512.h"

#include <cmath>
#include <limits>

#define LINGBOT_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace lingbot::kernels::detail {
namespace {

static_assert(kKeyPanel == 16 && kRowGroup == 6 && kDimAlign % 16 == 0, "written for 6-row x 16-lane tiles");

// nb (1 or 2) key panels x 6 rows; 12 accumulators when nb = 2.
template <int NB>
LINGBOT_AVX512 inline void qk_tile(const float* q0, const float* panel, int dp, float* s0) {
  __m512 acc[6][NB];
  #pragma GCC unroll 6
  for (int i = 0; i < 6; ++i)
    #pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_setzero_ps();
  const size_t pstride = static_cast<size_t>(dp) * kKeyPanel;
  for (int d = 0; d < dp; ++d) {
    __m512 k[NB];
    #pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) k[b] = _mm512_loadu_ps(panel + b * pstride + d * kKeyPanel);
    #pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m512 x = _mm512_set1_ps(q0[i * dp + d]);
      #pragma GCC unroll 2
      for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_fmadd_ps(x, k[b], acc[i][b]);
    }
  }
  #pragma GCC unroll 6
  for (int i = 0; i < 6; ++i)
    #pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(s0 + i * kKeyBlock + b * kKeyPanel, acc[i][b]);
}

LINGBOT_AVX512 void qk_avx512(const float* q, const float* kp, int rows, int cols, int dp, float* s) {
  for (int r0 = 0; r0 < rows; r0 += 6) {
    const float* q0 = q + static_cast<size_t>(r0) * dp;
    float* s0 = s + static_cast<size_t>(r0) * kKeyBlock;
    int j0 = 0;
    for (; j0 + 32 <= cols; j0 += 32) qk_tile<2>(q0, kp + static_cast<size_t>(j0) * dp, dp, s0 + j0);
    if (j0 < cols) qk_tile<1>(q0, kp + static_cast<size_t>(j0) * dp, dp, s0 + j0);
  }
}

// 6 rows x (16 * NB) output columns: alpha * O, then + P*V over keys in order.
template <int NB>
LINGBOT_AVX512 inline void pv_tile(const float* p0, const float* v, const float* alpha, int n_keys, int dp, float* o0) {
  __m512 acc[6][NB];
  #pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    #pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_mul_ps(a, _mm512_loadu_ps(o0 + i * dp + b * 16));
  }
  for (int j = 0; j < n_keys; ++j) {
    __m512 vv[NB];
    #pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) vv[b] = _mm512_loadu_ps(v + static_cast<size_t>(j) * dp + b * 16);
    #pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m512 x = _mm512_set1_ps(p0[i * kKeyBlock + j]);
      #pragma GCC unroll 2
      for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_fmadd_ps(x, vv[b], acc[i][b]);
    }
  }
  #pragma GCC unroll 6
  for (int i = 0; i < 6; ++i)
    #pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(o0 + i * dp + b * 16, acc[i][b]);
}

LINGBOT_AVX512 void pv_avx512(const float* p, const float* v, const float* alpha, int rows, int n_keys, int dp,
                              float* o) {
  for (int r0 = 0; r0 < rows; r0 += 6) {
    const float* p0 = p + static_cast<size_t>(r0) * kKeyBlock;
    float* o0 = o + static_cast<size_t>(r0) * dp;
    int c0 = 0;
    for (; c0 + 32 <= dp; c0 += 32) pv_tile<2>(p0, v + c0, alpha + r0, n_keys, dp, o0 + c0);
    if (c0 < dp) pv_tile<1>(p0, v + c0, alpha + r0, n_keys, dp, o0 + c0);
  }
}

// The AVX2 kernel keeps two 8-lane partial sums (keys j%16 < 8 and >= 8); one 16-lane sum holds
// exactly those lanes, and the final reduction below is the AVX2 one, so l is bit-identical too.
LINGBOT_AVX512 void softmax_avx512(float* s, int rows, int n_valid, int cols, float* m, float* l, float* alpha) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < rows; ++r) {
    float* sr = s + static_cast<size_t>(r) * kKeyBlock;
    for (int j = n_valid; j < cols; ++j) sr[j] = neg_inf;  // keys past the end: probability 0
    __m512 vmax = _mm512_set1_ps(m[r]);
    for (int j = 0; j < cols; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(sr + j));
    const float mx = _mm512_reduce_max_ps(vmax);  // max is exact in any order
    alpha[r] = std::exp2(m[r] - mx);
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < cols; j += 16) {
      const __m512 p = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(sr + j), vm));
      _mm512_storeu_ps(sr + j, p);
      sum = _mm512_add_ps(sum, p);
    }
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(sum), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    l[r] = l[r] * alpha[r] + _mm_cvtss_f32(q);
    m[r] = mx;
  }
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

const AttnKernels* avx512_kernels() {
  static const AttnKernels* k = [] () -> const AttnKernels* {
    if (!avx2_kernels() || !cpu_has_avx512()) return nullptr;
    static const AttnKernels set = [] {
      AttnKernels k512 = *avx2_kernels();
      k512.qk = qk_avx512;
      k512.pv = pv_avx512;
      k512.softmax = softmax_avx512;
      return k512;
    }();
    return &set;
  }();
  return k;
}

}  // namespace lingbot::kernels::detail

#pragma GCC diagnostic pop

#else

namespace lingbot::kernels::detail {
const AttnKernels* avx512_kernels() { return nullptr; }
}  // namespace lingbot::kernels::detail

#endif
