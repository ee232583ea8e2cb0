#pragma once
// CUDA versions of the dense ops in kernels/cpu/ops.h, plus the small device helpers the KV cache
// and benchmarks need. All pointers are DEVICE pointers; all calls are asynchronous on the
// context's stream. Same shapes, strides and semantics as the CPU ops (num_threads is replaced by
// the CudaContext).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "lingbot/dtype.h"

namespace lingbot::cuda {

// A cuBLAS handle bound to one stream. Move-only; needs a CUDA device.
class CudaContext {
 public:
  explicit CudaContext(cudaStream_t stream = nullptr);
  ~CudaContext();
  CudaContext(CudaContext&& o) noexcept : handle_(o.handle_), stream_(o.stream_) { o.handle_ = nullptr; }
  CudaContext& operator=(CudaContext&&) = delete;
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;
  cublasHandle_t cublas() const { return handle_; }
  cudaStream_t stream() const { return stream_; }

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// y[n, out] = x[n, in] · W[out, in]^T (+ b[out]); cuBLAS SGEMM in full f32 (no TF32).
// Row strides x_stride / y_stride (0 = packed), as kernels::linear.
void linear(const CudaContext& ctx, const float* x, int64_t n, int64_t in, const float* W, const float* b,
            int64_t out, float* y, int64_t x_stride = 0, int64_t y_stride = 0);

// The same with W in the weights dtype `w_dtype` (f32, f16 or bf16). f32 is exactly the overload
// above. f16 / bf16: x is rounded to w_dtype (nearest even, as the CPU's oneDNN path rounds it) into
// `x_scratch` (device memory of n·in elements of w_dtype, packed; unused for f32), then
// cublasGemmEx with f32 accumulation (CUBLAS_COMPUTE_32F, tensor cores) writes f32 y, + b.
void linear(const CudaContext& ctx, const float* x, int64_t n, int64_t in, const void* W, DType w_dtype,
            const float* b, int64_t out, float* y, void* x_scratch, int64_t x_stride = 0, int64_t y_stride = 0);

// LayerNorm over the last dim of n rows (statistics in double, like the CPU op); x == y allowed;
// gamma / beta may be nullptr.
void layer_norm(const CudaContext& ctx, const float* x, int64_t n, int64_t dim, const float* gamma,
                const float* beta, float eps, float* y, int64_t x_stride = 0, int64_t y_stride = 0);

// LayerNorm over head_dim of every (token, head) row of x [n_tokens, heads, head_dim] in place
// (QK-norm): tokens token_stride floats apart, heads contiguous; same arithmetic as layer_norm.
void head_norm(const CudaContext& ctx, float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
               const float* gamma, const float* beta, float eps);

// x · 0.5 · (1 + erf(x / sqrt(2))) in place on n floats.
void gelu_erf(const CudaContext& ctx, float* x, int64_t n);

// Copies n_tokens f32 rows of `row` floats (`src_stride` floats apart) into `dst` of dtype t,
// `dst_stride` elements apart, rounding to nearest even (same bits as convert_from_f32).
void store_rows(const float* src, int64_t src_stride, void* dst, DType t, int64_t dst_stride, int64_t n_tokens,
                int64_t row, cudaStream_t stream);

// Fills n elements of dtype t with deterministic pseudo-random values in [lo, hi) (benchmarks,
// memory studies: no host round trip for large buffers).
void fill_uniform(void* dst, DType t, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);

}  // namespace lingbot::cuda
