// Internal to the CUDA attention kernels (attention.cu: validation and dispatch; attention_simt.cu and
// attention_mma.cu: the kernels): the arguments every kernel takes by value, the key walk they share and
// the launchers each kernel file defines. The kernel families are separate translation units so that
// nvcc compiles them in parallel (the SIMT kernels, fully unrolled over head_dim, cost the most).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string_view>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_rule.h"

namespace lingbot::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMmaDim = kTensorCoreHeadDim;  // the tensor-core kernel's head_dim

// ---------------------------------------------------------------------------------------------
// Kernel arguments (passed by value).

struct QueryArgs {
  const float* data;
  int64_t token_stride;  // floats
  int n_tokens;
  int heads;
  int head_dim;
};

// All visible keys: `num_entries` page-table entries into `pool`, then `num_spans` spans.
struct KeyArgs {
  const void* pool;
  int64_t page_stride;   // elements from page p's K to page p+1's K: 2 * page_size * row
  int64_t kv_offset;     // elements from a page's K to its V: page_size * row
  int64_t row;           // heads * head_dim: elements per token in the pool
  const int32_t* page_ids;
  const int32_t* start;
  const int32_t* len;
  int num_entries;
  const DeviceSpan* dspans;  // device-resident spans
  int num_dspans;
  int num_spans;             // inline spans
  int64_t n_keys;            // all segments together
  const void* span_k[kMaxCudaSpans];
  const void* span_v[kMaxCudaSpans];
  int64_t span_stride[kMaxCudaSpans];
  int span_n[kMaxCudaSpans];
};

// One segment of consecutive keys for head h: token t's K at k + t*stride (elements of T).
template <typename T>
struct Segment {
  const T* k;
  const T* v;
  int64_t stride;
  int n;
};

template <typename T>
__device__ __forceinline__ Segment<T> load_segment(const KeyArgs& a, int i, int h, int head_dim) {
  Segment<T> s;
  if (i < a.num_entries) {
    const int64_t page = __ldg(a.page_ids + i);
    const int64_t first = static_cast<int64_t>(__ldg(a.start + i)) * a.row + static_cast<int64_t>(h) * head_dim;
    const T* base = static_cast<const T*>(a.pool) + page * a.page_stride + first;
    s.k = base;
    s.v = base + a.kv_offset;
    s.stride = a.row;
    s.n = __ldg(a.len + i);
  } else if (i < a.num_entries + a.num_dspans) {
    const DeviceSpan* d = a.dspans + (i - a.num_entries);
    s.k = static_cast<const T*>(d->k) + static_cast<int64_t>(h) * head_dim;
    s.v = static_cast<const T*>(d->v) + static_cast<int64_t>(h) * head_dim;
    s.stride = d->token_stride;
    s.n = d->n_tokens;
  } else {
    const int j = i - a.num_entries - a.num_dspans;
    s.k = static_cast<const T*>(a.span_k[j]) + static_cast<int64_t>(h) * head_dim;
    s.v = static_cast<const T*>(a.span_v[j]) + static_cast<int64_t>(h) * head_dim;
    s.stride = a.span_stride[j];
    s.n = a.span_n[j];
  }
  return s;
}

// Segment i's number of keys (what load_segment reads as n, without the pointers).
__device__ __forceinline__ int segment_length(const KeyArgs& a, int i) {
  if (i < a.num_entries) return __ldg(a.len + i);
  if (i < a.num_entries + a.num_dspans) return a.dspans[i - a.num_entries].n_tokens;
  return a.span_n[i - a.num_entries - a.num_dspans];
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// ---------------------------------------------------------------------------------------------
// Launchers (explicitly instantiated in their kernel file for float / __half / __nv_bfloat16 and RT 1, 2).

// The SIMT kernels (attention_simt.cu): the decode kernel for at most kDecodeMaxQueries rows, else
// the row-per-thread kernel. qscale = softmax scale * log2(e).
template <typename T>
void launch_simt(const QueryArgs& qa, const KeyArgs& ka, float* out, float qscale, cudaStream_t stream);

// Blocks of the unsplit tensor-core grid and how many of them one wave of the device holds
// (attention_mma.cu; RT row tiles of 16 query rows per warp).
template <typename T, int RT>
void mma_grid_fill(int n_q, int heads, int64_t& blocks, int64_t& wave_blocks);

// The tensor-core kernel over `splits` key ranges, then the merge when there are several
// (params.workspace holds the partial results).
template <typename T, int RT>
void launch_mma(std::string_view fn, const QueryArgs& qa, const KeyArgs& ka, float* out, float qscale, int64_t splits,
                const CudaAttentionParams& params);

}  // namespace lingbot::cuda::attn
