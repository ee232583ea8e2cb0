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

// C[m, n] = A[m, k] · B[k, n] (accumulate: C += A·B), A and B both stored in `t` with row strides lda / ldb,
// C f32 with row stride ldc, f32 accumulation. Fixed tiles of C (results independent of num_threads).
// Requires native(t). The convolutions' GEMM: A = weights [C_out, C_in·kh·kw], B = the im2col matrix.
void gemm(const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc, int64_t m, int64_t n,
          int64_t k, DType t, bool accumulate, int num_threads);

// oneDNN's implementation name for gemm()'s tile shape, e.g. "brg:avx512_core_bf16" (for tests and banners).
std::string gemm_impl(DType t);

}  // namespace lingbot::kernels::dnnl_gemm
