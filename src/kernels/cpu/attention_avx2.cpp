// AVX2 + FMA + F16C inner kernels for attention, compiled per function with target attributes and
// chosen at run time (no global -mavx2, so the binary still runs on older x86-64 CPUs).
#include "kernels/cpu/attention_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#define LINGBOT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace lingbot::kernels::detail {
namespace {

static_assert(kKeyPanel == 16 && kRowGroup == 6, "the AVX2 kernels are written for 6x16 register tiles");

// S tile of 6 query rows x 16 keys in 12 accumulators, summing over d in order.
LINGBOT_AVX2 void qk_avx2(const float* q, const float* kp, int rows, int cols, int dp, float* s) {
  for (int r0 = 0; r0 < rows; r0 += 6) {
    const float* q0 = q + static_cast<size_t>(r0) * dp;
    for (int j0 = 0; j0 < cols; j0 += 16) {
      const float* panel = kp + static_cast<size_t>(j0) * dp;  // (j0/16) * dp * 16
      __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a10 = _mm256_setzero_ps(),
             a11 = _mm256_setzero_ps(), a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps(),
             a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps(), a40 = _mm256_setzero_ps(),
             a41 = _mm256_setzero_ps(), a50 = _mm256_setzero_ps(), a51 = _mm256_setzero_ps();
      for (int d = 0; d < dp; ++d) {
        const __m256 k0 = _mm256_loadu_ps(panel + d * 16);
        const __m256 k1 = _mm256_loadu_ps(panel + d * 16 + 8);
        __m256 b = _mm256_broadcast_ss(q0 + d);
        a00 = _mm256_fmadd_ps(b, k0, a00);
        a01 = _mm256_fmadd_ps(b, k1, a01);
        b = _mm256_broadcast_ss(q0 + dp + d);
        a10 = _mm256_fmadd_ps(b, k0, a10);
        a11 = _mm256_fmadd_ps(b, k1, a11);
        b = _mm256_broadcast_ss(q0 + 2 * dp + d);
        a20 = _mm256_fmadd_ps(b, k0, a20);
        a21 = _mm256_fmadd_ps(b, k1, a21);
        b = _mm256_broadcast_ss(q0 + 3 * dp + d);
        a30 = _mm256_fmadd_ps(b, k0, a30);
        a31 = _mm256_fmadd_ps(b, k1, a31);
        b = _mm256_broadcast_ss(q0 + 4 * dp + d);
        a40 = _mm256_fmadd_ps(b, k0, a40);
        a41 = _mm256_fmadd_ps(b, k1, a41);
        b = _mm256_broadcast_ss(q0 + 5 * dp + d);
        a50 = _mm256_fmadd_ps(b, k0, a50);
        a51 = _mm256_fmadd_ps(b, k1, a51);
      }
      float* s0 = s + static_cast<size_t>(r0) * kKeyBlock + j0;
      _mm256_storeu_ps(s0, a00);
      _mm256_storeu_ps(s0 + 8, a01);
      _mm256_storeu_ps(s0 + kKeyBlock, a10);
      _mm256_storeu_ps(s0 + kKeyBlock + 8, a11);
      _mm256_storeu_ps(s0 + 2 * kKeyBlock, a20);
      _mm256_storeu_ps(s0 + 2 * kKeyBlock + 8, a21);
      _mm256_storeu_ps(s0 + 3 * kKeyBlock, a30);
      _mm256_storeu_ps(s0 + 3 * kKeyBlock + 8, a31);
      _mm256_storeu_ps(s0 + 4 * kKeyBlock, a40);
      _mm256_storeu_ps(s0 + 4 * kKeyBlock + 8, a41);
      _mm256_storeu_ps(s0 + 5 * kKeyBlock, a50);
      _mm256_storeu_ps(s0 + 5 * kKeyBlock + 8, a51);
    }
  }
}

// 2^x for x <= 128 (Cephes-style: round, degree-6 polynomial on [-0.5, 0.5], ~2e-7 relative);
// results below 2^-126 (including x = -inf) are flushed to exactly 0.
LINGBOT_AVX2 inline __m256 exp2_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-127.f)), _mm256_set1_ps(127.f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
  // 2^n via the exponent field; n = -127 gives the bit pattern of +0.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

LINGBOT_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

LINGBOT_AVX2 inline float hsum(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

LINGBOT_AVX2 void softmax_avx2(float* s, int rows, int n_valid, int cols, float* m, float* l, float* alpha) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < rows; ++r) {
    float* sr = s + static_cast<size_t>(r) * kKeyBlock;
    for (int j = n_valid; j < cols; ++j) sr[j] = neg_inf;  // keys past the end: probability 0
    __m256 vmax = _mm256_set1_ps(m[r]);
    for (int j = 0; j < cols; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(sr + j));
    const float mx = hmax(vmax);
    alpha[r] = std::exp2(m[r] - mx);  // 0 on the first block (m = -inf)
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    for (int j = 0; j < cols; j += 16) {
      const __m256 p0 = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(sr + j), vm));
      const __m256 p1 = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(sr + j + 8), vm));
      _mm256_storeu_ps(sr + j, p0);
      _mm256_storeu_ps(sr + j + 8, p1);
      sum0 = _mm256_add_ps(sum0, p0);
      sum1 = _mm256_add_ps(sum1, p1);
    }
    l[r] = l[r] * alpha[r] + hsum(_mm256_add_ps(sum0, sum1));
    m[r] = mx;
  }
}

// O tile of 6 rows x 16 columns: starts from alpha * O, then adds P*V over keys in order.
LINGBOT_AVX2 void pv_avx2(const float* p, const float* v, const float* alpha, int rows, int n_keys, int dp,
                          float* o) {
  for (int r0 = 0; r0 < rows; r0 += 6) {
    const float* p0 = p + static_cast<size_t>(r0) * kKeyBlock;
    for (int c0 = 0; c0 < dp; c0 += 16) {
      float* o0 = o + static_cast<size_t>(r0) * dp + c0;
      __m256 acc[6][2];
      #pragma GCC unroll 6
      for (int i = 0; i < 6; ++i) {
        const __m256 a = _mm256_broadcast_ss(alpha + r0 + i);
        acc[i][0] = _mm256_mul_ps(a, _mm256_loadu_ps(o0 + i * dp));
        acc[i][1] = _mm256_mul_ps(a, _mm256_loadu_ps(o0 + i * dp + 8));
      }
      for (int j = 0; j < n_keys; ++j) {
        const __m256 v0 = _mm256_loadu_ps(v + static_cast<size_t>(j) * dp + c0);
        const __m256 v1 = _mm256_loadu_ps(v + static_cast<size_t>(j) * dp + c0 + 8);
        #pragma GCC unroll 6
        for (int i = 0; i < 6; ++i) {
          const __m256 b = _mm256_broadcast_ss(p0 + i * kKeyBlock + j);
          acc[i][0] = _mm256_fmadd_ps(b, v0, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(b, v1, acc[i][1]);
        }
      }
      #pragma GCC unroll 6
      for (int i = 0; i < 6; ++i) {
        _mm256_storeu_ps(o0 + i * dp, acc[i][0]);
        _mm256_storeu_ps(o0 + i * dp + 8, acc[i][1]);
      }
    }
  }
}

LINGBOT_AVX2 void convert_avx2(const void* src, DType t, float* dst, int n) {
  int i = 0;
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
      for (; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* b = static_cast<const uint16_t*>(src);
      for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
      for (; i < n; ++i) dst[i] = bf16_to_f32(b[i]);
      return;
    }
  }
}

// In-register 8x8 transpose: rows r[0..7] -> columns.
LINGBOT_AVX2 inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// rows [16][dp] -> panel [dp][16]
LINGBOT_AVX2 void pack_k_avx2(const float* rows, int dp, float* panel) {
  for (int half = 0; half < 2; ++half) {
    for (int d0 = 0; d0 < dp; d0 += 8) {
      __m256 r[8];
      for (int t = 0; t < 8; ++t) r[t] = _mm256_loadu_ps(rows + static_cast<size_t>(half * 8 + t) * dp + d0);
      transpose8(r);
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(panel + static_cast<size_t>(d0 + k) * 16 + half * 8, r[k]);
    }
  }
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

}  // namespace

const AttnKernels* avx2_kernels() {
  static const AttnKernels k{qk_avx2, softmax_avx2, pv_avx2, convert_avx2, pack_k_avx2};
  static const bool ok = cpu_has_avx2();
  return ok ? &k : nullptr;
}

}  // namespace lingbot::kernels::detail

#else

namespace lingbot::kernels::detail {
const AttnKernels* avx2_kernels() { return nullptr; }
}  // namespace lingbot::kernels::detail

#endif
