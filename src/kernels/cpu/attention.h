#pragma once
// CPU attention kernels. They know K/V storage only through the device-neutral views of
// kernels/attention_views.h (host pointers here): a page pool plus a page table (int32 arrays a GPU
// backend can copy as-is), or contiguous spans. No cache bookkeeping here.
// Softmax over all visible keys, scale given explicitly, no mask: padding is excluded by the page
// table's per-entry [start, start+len) slot range, never by zero keys.
#include <cstdint>
#include <span>

#include "kernels/attention_views.h"  // QueryView, PagePoolView, PageTableView, KVSpan
#include "lingbot/dtype.h"

namespace lingbot::kernels {

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

// Attention of q over the keys a host KV cache handed out (KVCache::store): paged_attention over its
// pool, table and spans (layout Paged) or dense_attention over its spans (layout Spans). Throws when
// q's heads/head_dim differ from the keys' or the keys hold resident spans (a device backend's).
void attention(const QueryView& q, const VisibleKV& keys, float* out, const AttentionParams& params);

}  // namespace lingbot::kernels
