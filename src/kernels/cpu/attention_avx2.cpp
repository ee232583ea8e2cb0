// AVX2 + FMA + F16C inner kernels for attention (selected at run time; no global -mavx2).
#include "kernels/cpu/attention_internal.h"

namespace lingbot::kernels::detail {

const AttnKernels* avx2_kernels() { return nullptr; }

}  // namespace lingbot::kernels::detail
