// Dense CUDA ops (see ops_cuda.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/ops_cuda.h"

namespace lingbot::cuda {
namespace {

using grid::blocks_for;
using grid::kThreads;

__device__ __forceinline__ void put(float* d, int64_t i, float x) { d[i] = x; }
__device__ __forceinline__ void put(__half* d, int64_t i, float x) { d[i] = __float2half_rn(x); }
__device__ __forceinline__ void put(__nv_bfloat16* d, int64_t i, float x) { d[i] = __float2bfloat16_rn(x); }

template <typename T>
__global__ void store_rows_kernel(const float* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t n_tokens,
                                  int64_t row) {
  const int64_t total = n_tokens * row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / row, c = i % row;
    put(dst, t * dst_stride + c, src[t * src_stride + c]);
  }
}

__device__ __forceinline__ uint64_t mix(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i)) >> 40) *
                    (1.0f / 16777216.0f);
    put(dst, i, lo + (hi - lo) * u);
  }
}

// One warp per row, kRowsPerBlock rows per block; sums in double like the CPU op, reduced with warp
// shuffles only (no shared memory, no block barrier: head_norm's rows are only head_dim long). Row
// b is row b % per_token of token b / per_token: tokens x_stride / y_stride floats apart, rows inside
// a token row_stride apart.
constexpr int kRowsPerBlock = kThreads / 32;

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void layer_norm_kernel(const float* x, int64_t n_rows, int64_t dim, const float* gamma, const float* beta,
                                  float eps, float* y, int64_t x_stride, int64_t y_stride, int64_t per_token,
                                  int64_t row_stride) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= n_rows) return;  // the whole warp: row is uniform across it
  const int lane = threadIdx.x % 32;
  const int64_t token = row / per_token, sub = row % per_token;
  const float* xr = x + token * x_stride + sub * row_stride;
  float* yr = y + token * y_stride + sub * row_stride;
  double s = 0;
  for (int64_t c = lane; c < dim; c += 32) s += xr[c];
  const double mean = warp_sum(s) / static_cast<double>(dim);
  double q = 0;
  for (int64_t c = lane; c < dim; c += 32) {
    const double d = xr[c] - mean;
    q += d * d;
  }
  const double var = warp_sum(q) / static_cast<double>(dim);
  const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  const float m = static_cast<float>(mean);
  for (int64_t c = lane; c < dim; c += 32) {
    float v = (xr[c] - m) * inv;
    if (gamma) v *= gamma[c];
    if (beta) v += beta[c];
    yr[c] = v;
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

__global__ void gelu_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = gelu_erf_value(x[i]);
  }
}

}  // namespace

CudaContext::CudaContext(cudaStream_t stream) : stream_(stream) {
  LINGBOT_CUBLAS_CHECK(cublasCreate(&handle_));
  const cublasStatus_t st = cublasSetStream(handle_, stream_);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle_);
    throw_cublas_error(st, "cublasSetStream");
  }
}

CudaContext::~CudaContext() {
  if (handle_) cublasDestroy(handle_);
}

void layer_norm(const CudaContext& ctx, const float* x, int64_t n, int64_t dim, const float* gamma,
                const float* beta, float eps, float* y, int64_t x_stride, int64_t y_stride) {
  LINGBOT_CHECK(n >= 0 && dim > 0, "cuda layer_norm: bad shape n=", n, " dim=", dim);
  LINGBOT_CHECK(n <= INT_MAX, "cuda layer_norm: n ", n, " exceeds the grid limit");
  if (x_stride == 0) x_stride = dim;
  if (y_stride == 0) y_stride = dim;
  if (n == 0) return;
  const unsigned blocks = row_blocks(n);
  layer_norm_kernel<<<blocks, kThreads, 0, ctx.stream()>>>(x, n, dim, gamma, beta, eps, y, x_stride, y_stride, 1, 0);
  LINGBOT_CUDA_CHECK(cudaGetLastError());
}

void head_norm(const CudaContext& ctx, float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
               const float* gamma, const float* beta, float eps) {
  LINGBOT_CHECK(n_tokens >= 0 && heads > 0 && head_dim > 0 && token_stride >= int64_t{heads} * head_dim,
                "cuda head_norm: bad shape n_tokens=", n_tokens, " heads=", heads, " head_dim=", head_dim,
                " token_stride=", token_stride);
  LINGBOT_CHECK(n_tokens * heads <= INT_MAX, "cuda head_norm: ", n_tokens, " x ", heads, " rows exceed the grid limit");
  if (n_tokens == 0) return;
  const unsigned blocks = row_blocks(n_tokens * heads);
  layer_norm_kernel<<<blocks, kThreads, 0, ctx.stream()>>>(x, n_tokens * heads, head_dim, gamma, beta, eps, x,
                                                           token_stride, token_stride, heads, head_dim);
  LINGBOT_CUDA_CHECK(cudaGetLastError());
}

void gelu_erf(const CudaContext& ctx, float* x, int64_t n) {
  if (n <= 0) return;
  gelu_kernel<<<blocks_for(n), kThreads, 0, ctx.stream()>>>(x, n);
  LINGBOT_CUDA_CHECK(cudaGetLastError());
}

void store_rows(const float* src, int64_t src_stride, void* dst, DType t, int64_t dst_stride, int64_t n_tokens,
                int64_t row, cudaStream_t stream) {
  if (n_tokens <= 0 || row <= 0) return;
  const int grid = blocks_for(n_tokens * row);
  switch (t) {
    case DType::F32:
      store_rows_kernel<<<grid, kThreads, 0, stream>>>(src, src_stride, static_cast<float*>(dst), dst_stride,
                                                       n_tokens, row);
      break;
    case DType::F16:
      store_rows_kernel<<<grid, kThreads, 0, stream>>>(src, src_stride, static_cast<__half*>(dst), dst_stride,
                                                       n_tokens, row);
      break;
    case DType::BF16:
      store_rows_kernel<<<grid, kThreads, 0, stream>>>(src, src_stride, static_cast<__nv_bfloat16*>(dst),
                                                       dst_stride, n_tokens, row);
      break;
  }
  LINGBOT_CUDA_CHECK(cudaGetLastError());
}

void fill_uniform(void* dst, DType t, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  const int grid = blocks_for(n);
  switch (t) {
    case DType::F32: fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(dst), n, lo, hi, seed); break;
    case DType::F16: fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__half*>(dst), n, lo, hi, seed); break;
    case DType::BF16:
      fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, lo, hi, seed);
      break;
  }
  LINGBOT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lingbot::cuda
