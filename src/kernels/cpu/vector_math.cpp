#include "kernels/cpu/vector_math.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>

namespace lingbot::kernels::vecmath {

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;

float gelu_scalar(float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); }

#if defined(__x86_64__)  // elsewhere: the portable loop (as the attention kernels' fallbacks)

// glibc's libmvec erff (x86_64 vector ABI names); the target attribute on the declaration lets
// clang accept the vector argument in a file built without -mavx512f.
extern "C" __attribute__((target("avx512f"))) __m512 _ZGVeN16v_erff(__m512);

__attribute__((target("avx512f"))) __m512 gelu16(__m512 v) {
  const __m512 e = _ZGVeN16v_erff(_mm512_mul_ps(v, _mm512_set1_ps(kInvSqrt2)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

__attribute__((target("avx512f"))) void gelu_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_erff(__m256);

__attribute__((target("avx2"))) __m256 gelu8(__m256 v) {
  const __m256 e = _ZGVdN8v_erff(_mm256_mul_ps(v, _mm256_set1_ps(kInvSqrt2)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

__attribute__((target("avx2"))) void gelu_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float pad[8] = {};
    std::copy(x + i, x + n, pad);
    _mm256_store_ps(pad, gelu8(_mm256_load_ps(pad)));
    std::copy(pad, pad + (n - i), x + i);
  }
}

#endif

void gelu_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = gelu_scalar(x[i]);
}

enum class Isa { Avx512, Avx2, Scalar };

Isa isa() {
#if defined(__x86_64__)
  static const Isa chosen = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
    if (__builtin_cpu_supports("avx2")) return Isa::Avx2;
    return Isa::Scalar;
  }();
  return chosen;
#else
  return Isa::Scalar;
#endif
}

}  // namespace

void gelu_erf(float* x, int64_t n) {
  switch (isa()) {
#if defined(__x86_64__)
    case Isa::Avx512: gelu_avx512(x, n); return;
    case Isa::Avx2: gelu_avx2(x, n); return;
#else
    case Isa::Avx512:
    case Isa::Avx2:
#endif
    case Isa::Scalar: gelu_portable(x, n); return;
  }
}

const char* gelu_variant() {
  switch (isa()) {
    case Isa::Avx512: return "avx512 (libmvec)";
    case Isa::Avx2: return "avx2 (libmvec)";
    case Isa::Scalar: return "scalar (libm)";
  }
  return "";
}

}  // namespace lingbot::kernels::vecmath
