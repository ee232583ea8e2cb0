// The pieces of src/kernels/cuda the host emulation cannot run (the kernels of ops.cu use warp
// shuffles and shared memory, attention.cu's tensor-core mma), replaced by the CPU kernels they are
// tested against on a device (tests/cuda/ops_cuda_test.cpp, attention_cuda_test.cpp). Under emulation the backend's
// layer_norm, head_norm, gelu_erf and attention ops therefore check the backend's plumbing (arguments,
// strides, residency, group and span handling), not those kernels.
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/ops_cuda.h"

namespace lingbot::cuda {

CudaContext::CudaContext(cudaStream_t stream) : stream_(stream) { cublasCreate(&handle_); }
CudaContext::~CudaContext() {
  if (handle_) cublasDestroy(handle_);
}

void layer_norm(const CudaContext&, const float* x, int64_t n, int64_t dim, const float* gamma, const float* beta,
                float eps, float* y, int64_t x_stride, int64_t y_stride) {
  kernels::layer_norm(x, n, dim, gamma, beta, eps, y, 1, x_stride, y_stride);
}

void head_norm(const CudaContext&, float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
               const float* gamma, const float* beta, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t)
    kernels::layer_norm(x + t * token_stride, heads, head_dim, gamma, beta, eps, x + t * token_stride, 1);
}

void gelu_erf(const CudaContext&, float* x, int64_t n) { kernels::gelu_erf(x, n, 1); }

void store_rows(const float* src, int64_t src_stride, void* dst, DType t, int64_t dst_stride, int64_t n_tokens,
                int64_t row, cudaStream_t) {
  for (int64_t r = 0; r < n_tokens; ++r)
    convert_from_f32(src + r * src_stride, static_cast<char*>(dst) + r * dst_stride * dtype_size(t), t,
                     static_cast<size_t>(row));
}

const char* attention_impl_name(AttentionImpl impl) {
  return impl == AttentionImpl::Simt ? "simt" : impl == AttentionImpl::TensorCore ? "tensor-core" : "auto";
}

void dense_attention(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                     const CudaAttentionParams& params) {
  kernels::dense_attention(q, kv, out, kernels::AttentionParams{params.scale, 1});
}

void attention(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
               const CudaAttentionParams& params) {
  if (keys.resident.count == 0) {
    kernels::attention(q, keys, out, kernels::AttentionParams{params.scale, 1});
    return;
  }
  // The device cache's special runs (DeviceSpanTable records, in the pool's dtype) become host spans
  // between the table's keys and `spans`, the order the device kernel walks them in.
  std::vector<kernels::KVSpan> spans;
  const auto* records = static_cast<const DeviceSpan*>(keys.resident.records);
  for (int i = 0; i < keys.resident.count; ++i)
    spans.push_back({records[i].k, records[i].v, keys.pool.dtype, records[i].n_tokens, records[i].token_stride});
  spans.insert(spans.end(), keys.spans.begin(), keys.spans.end());
  kernels::VisibleKV host = keys;
  host.resident = {};
  host.spans = spans;
  kernels::attention(q, host, out, kernels::AttentionParams{params.scale, 1});
}

}  // namespace lingbot::cuda
