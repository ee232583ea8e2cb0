#pragma once
// Basic dense CPU ops shared by the encoder, the aggregator and the heads.
// All arrays are f32, row-major, caller-owned; nothing here allocates persistent state.
// Every op is threaded with OpenMP over a partition that does not depend on `num_threads`,
// so results are bit-identical for any thread count.
#include <cstdint>

namespace lingbot::kernels {

// y[n, out] = x[n, in] · W[out, in]^T (+ b[out] when b != nullptr).
// W is PyTorch's nn.Linear layout. x rows are `x_stride` floats apart (0 = `in`), y rows
// `y_stride` apart (0 = `out`). GEMM goes through BLAS (cblas_sgemm) on fixed tiles.
void linear(const float* x, int64_t n, int64_t in, const float* W, const float* b, int64_t out, float* y,
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
