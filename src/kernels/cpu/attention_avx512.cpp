// AVX-512F inner kernels for the two matrix products of attention (QK^T and PV), selected at run
// time on CPUs with AVX-512 (no global -mavx512f). They sum in exactly the same order as the AVX2
// kernels (one FMA chain per output element, over d resp. keys), so results are bit-identical to the
// AVX2 set; only the vector width differs. Softmax, conversion and packing are the AVX2 ones.
#include "kernels/cpu/attention_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define LINGBOT_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace lingbot::kernels::detail {
namespace {

static_assert(kKeyPanel == 16 && kRowGroup == 6 && kDimAlign % 16 == 0, "written for 6-row x 16-lane tiles");

// nb (1 or 2) key panels x 6 rows; 12 accumulators when nb = 2.
template <int NB>
LINGBOT_AVX512 inline void qk_tile(const float* q0, const float* panel, int dp, float* s0) {
  __m512 acc[6][NB];
  for (int i = 0; i < 6; ++i)
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_setzero_ps();
  const size_t pstride = static_cast<size_t>(dp) * kKeyPanel;
  for (int d = 0; d < dp; ++d) {
    __m512 k[NB];
    for (int b = 0; b < NB; ++b) k[b] = _mm512_loadu_ps(panel + b * pstride + d * kKeyPanel);
    for (int i = 0; i < 6; ++i) {
      const __m512 x = _mm512_set1_ps(q0[i * dp + d]);
      for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_fmadd_ps(x, k[b], acc[i][b]);
    }
  }
  for (int i = 0; i < 6; ++i)
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
  for (int i = 0; i < 6; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_mul_ps(a, _mm512_loadu_ps(o0 + i * dp + b * 16));
  }
  for (int j = 0; j < n_keys; ++j) {
    __m512 vv[NB];
    for (int b = 0; b < NB; ++b) vv[b] = _mm512_loadu_ps(v + static_cast<size_t>(j) * dp + b * 16);
    for (int i = 0; i < 6; ++i) {
      const __m512 x = _mm512_set1_ps(p0[i * kKeyBlock + j]);
      for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_fmadd_ps(x, vv[b], acc[i][b]);
    }
  }
  for (int i = 0; i < 6; ++i)
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

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

const AttnKernels* avx512_kernels() {
  static const AttnKernels* k = [] () -> const AttnKernels* {
    if (!avx2_kernels() || !cpu_has_avx512()) return nullptr;
    static AttnKernels set = *avx2_kernels();
    set.qk = qk_avx512;
    set.pv = pv_avx512;
    return &set;
  }();
  return k;
}

}  // namespace lingbot::kernels::detail

#else

namespace lingbot::kernels::detail {
const AttnKernels* avx512_kernels() { return nullptr; }
}  // namespace lingbot::kernels::detail

#endif
