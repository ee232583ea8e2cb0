#pragma once
// Vectorised elementwise math for the CPU kernels (internal to kernels/cpu).
// erf comes from glibc's vector math library (libmvec, glibc >= 2.35: the AVX-512 and AVX2 variants
// of erff, within 4 ulp). The ISA is chosen once per process from the CPU; on one machine every
// element goes through the same variant (short tails are padded into a full vector), so results do
// not depend on how the caller splits the array across threads.
#include <cstdint>

namespace lingbot::kernels::vecmath {

// x[i] = 0.5 · x[i] · (1 + erf(x[i] / sqrt(2))) for i < n (GELU, exact erf form).
void gelu_erf(float* x, int64_t n);

// The variant in use: "avx512 (libmvec)", "avx2 (libmvec)" or "scalar (libm)".
const char* gelu_variant();

}  // namespace lingbot::kernels::vecmath
