#pragma once
// oneDNN matmul behind kernels::linear for reduced-precision weights (internal to kernels/cpu).
// Each fixed tile of the output is one single-threaded oneDNN call inside our own OpenMP loop, so
// the partition (and therefore every rounding) never depends on the thread count.
#include <cstdint>
#include <string>

#include "lingbot/dtype.h"

namespace lingbot::kernels::dnnl_gemm {

// Whether oneDNN has a native (non-reference, hardware) matmul for `t` x `t` -> f32 on this CPU:
// bf16 needs AVX512_BF16 or AMX. Probed once per process.
bool native(DType t);
// "oneDNN 2.6.3 bf16 matmul (brg:avx512_core_bf16)"; "" when !native(t).
std::string description(DType t);

// y[n, out] = round_t(x)[n, in] · W[out, in]^T (+ b), f32 accumulation. Requires native(t).
void linear(const float* x, int64_t n, int64_t in, const void* W, DType t, const float* b, int64_t out, float* y,
            int num_threads, int64_t x_stride, int64_t y_stride);

}  // namespace lingbot::kernels::dnnl_gemm
