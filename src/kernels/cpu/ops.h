#pragma once
// Basic dense CPU ops shared by the encoder, the aggregator and the heads.
// Activations are f32, row-major, caller-owned; nothing here allocates persistent state.
// Every op is threaded with OpenMP over a partition that does not depend on `num_threads`,
// so results are bit-identical for any thread count (for a given weights dtype).
#include <cstdint>
#include <string>

#include "lingbot/dtype.h"

namespace lingbot::kernels {

// y[n, out] = x[n, in] · W[out, in]^T (+ b[out] when b != nullptr).
// W is PyTorch's nn.Linear layout. x rows are `x_stride` floats apart (0 = `in`), y rows
// `y_stride` apart (0 = `out`). GEMM goes through BLAS (cblas_sgemm) on fixed tiles.
void linear(const float* x, int64_t n, int64_t in, const float* W, const float* b, int64_t out, float* y,
            int num_threads, int64_t x_stride = 0, int64_t y_stride = 0);

// A borrowed weight matrix W[out, in] (nn.Linear layout, packed rows) stored as f32, f16 or bf16.
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::F32;
};

// How a weights dtype is multiplied on this CPU (fixed per process: decided once from the CPU).
enum class GemmPath : uint8_t {
  Sgemm,         // f32 weights: OpenBLAS sgemm
  DnnlNative,    // oneDNN matmul in the weights dtype (activations rounded to it, f32 accumulation)
  PanelSgemm,    // no native kernel: each 512-row block of W is widened into a reused f32 panel, then sgemm
};
GemmPath gemm_path(DType weights);
// One line for banners: "oneDNN 2.6.3 bf16 matmul (brg:avx512_core_bf16)", "OpenBLAS sgemm", or
// "f32 panel + OpenBLAS sgemm (no native f16 GEMM on this CPU)".
std::string gemm_path_description(DType weights);
// The BLAS behind kernels::gemm as OpenBLAS reports it, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ...,
// core Cooperlake", plus " (OPENBLAS_CORETYPE=X set in the environment)" when the kernel choice was
// forced: OpenBLAS then runs X's kernels whatever the CPU supports, which changes GEMM speed (on
// AVX-512 machines forcing Haswell halves it).
std::string blas_description();

// The weights dtype `auto` stands for on this CPU: bf16 where gemm_path(bf16) is DnnlNative, else f32.
DType auto_weights_dtype();

// linear() with weights in any WeightView dtype. f32 is exactly the overload above. DnnlNative rounds x
// to the weights dtype (y = round(x)·W^T in f32, + b); PanelSgemm keeps x in f32 (y = x·f32(W)^T + b).
void linear(const float* x, int64_t n, int64_t in, WeightView W, const float* b, int64_t out, float* y,
            int num_threads, int64_t x_stride = 0, int64_t y_stride = 0);

// Plain GEMM: C[m, n] = A[m, k] · B (B is [k, n], or [n, k] when trans_b) (+ beta·C).
// Leading dimensions are the row strides. Threaded over fixed tiles of C.
void gemm(const float* A, int64_t lda, const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, int64_t m,
          int64_t n, int64_t k, float beta, int num_threads);

// LayerNorm over the last dimension `dim` of n rows: y = (x - mean) / sqrt(var + eps) · gamma + beta.
// gamma / beta may be nullptr (no affine). x == y is allowed. Statistics accumulate in double.
// Rows are `x_stride` / `y_stride` floats apart (0 = dim).
void layer_norm(const float* x, int64_t n, int64_t dim, const float* gamma, const float* beta, float eps, float* y,
                int num_threads, int64_t x_stride = 0, int64_t y_stride = 0);

// Elementwise activations, in place on n floats.
void gelu_erf(float* x, int64_t n, int num_threads);  // x · 0.5 · (1 + erf(x / sqrt(2))), exact form
void silu(float* x, int64_t n, int num_threads);      // x · sigmoid(x)
void relu(float* x, int64_t n, int num_threads);      // max(x, 0)

// Residual add: y[i] += x[i] for n floats.
void add_inplace(float* y, const float* x, int64_t n, int num_threads);

// LayerScale residual: y[r, c] += gamma[c] · x[r, c] for rows × dim (gamma nullptr = plain add).
void layer_scale_add(float* y, const float* x, const float* gamma, int64_t rows, int64_t dim, int num_threads);

}  // namespace lingbot::kernels
