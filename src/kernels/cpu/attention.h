#pragma once
// CPU attention kernels. They know K/V storage only through plain views: a page pool plus a page
// table (int32 arrays a GPU backend can copy as-is), or contiguous spans. No cache bookkeeping here.
//
// Shapes (all row-major):
//   queries   f32 [n_q tokens, heads, head_dim], consecutive tokens `token_stride` floats apart
//   page pool dtype [num_pages, 2 (K,V), page_size, heads, head_dim]
//   KV span   K and V each [n_tokens, heads, head_dim] in dtype, tokens `token_stride` elements apart
//   out       f32 [n_q, heads, head_dim] contiguous
// Softmax over all visible keys, scale given explicitly, no mask: padding is excluded by the page
// table's per-entry [start, start+len) slot range, never by zero keys.
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace lingbot::kernels {

struct QueryView {
  const float* data = nullptr;
  int n_tokens = 0;
  int heads = 0;
  int head_dim = 0;
  int64_t token_stride = 0;  // floats between token t and t+1 (heads*head_dim when packed)
};

struct PagePoolView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int num_pages = 0;
  int page_size = 0;  // token slots per page (may include padding slots)
  int heads = 0;
  int head_dim = 0;
};

// Visible keys, in attention order: entry i covers slots [start[i], start[i]+len[i]) of page
// page_ids[i]. Slots outside every entry (padding, invisible tokens) are never read.
struct PageTableView {
  const int32_t* page_ids = nullptr;
  const int32_t* start = nullptr;
  const int32_t* len = nullptr;
  int num_entries = 0;
};

struct KVSpan {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::F32;
  int n_tokens = 0;
  int64_t token_stride = 0;  // elements between token t and t+1 (heads*head_dim when packed)
};

struct AttentionParams {
  float scale = 1.0f;   // usually 1/sqrt(head_dim)
  int num_threads = 1;  // results are bit-identical for any value
};

// Attention of q over the keys of `table` in `pool` followed by the keys of `extra` spans
// (e.g. a non-keyframe's own tokens, which are attended without being stored).
void paged_attention(const QueryView& q, const PagePoolView& pool, const PageTableView& table,
                     std::span<const KVSpan> extra, float* out, const AttentionParams& params);

// Attention of q over the concatenation of `kv` spans (dense caches, intra-frame attention).
void dense_attention(const QueryView& q, std::span<const KVSpan> kv, float* out, const AttentionParams& params);

}  // namespace lingbot::kernels
