#pragma once
// Device-neutral views of attention inputs, shared by the CPU kernels (kernels/cpu/attention.h) and
// the CUDA kernels (kernels/cuda/attention_cuda.h). A view holds plain pointers (host or device,
// as the kernel taking it says) and geometry; no cache bookkeeping. Their validation lives here once,
// so every backend rejects bad input with the same messages.
//
// Shapes (all row-major):
//   queries   f32 [n_q tokens, heads, head_dim], consecutive tokens `token_stride` floats apart
//   page pool dtype [num_pages, 2 (K,V), page_size, heads, head_dim]
//   KV span   K and V each [n_tokens, heads, head_dim] in dtype, tokens `token_stride` elements apart
//   out       f32 [n_q, heads, head_dim] contiguous
//
// VisibleKV bundles them into the keys of one attention call as a KV cache hands them out: the cache
// stores K/V and gives views, its caller passes them with the queries to the attention kernel of the
// cache's backend (kernels::attention on the host, cuda::attention on a device), as llama.cpp's KV
// cache hands its graph K/V views.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "lingbot/dtype.h"

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

// Spans that a backend keeps as an array in its own memory (the CUDA cache uploads its special-stream
// runs once per step for all blocks): `count` records from `records`, in the record format of that
// backend's kernel, `keys` tokens in all. Only that backend's kernel reads them; empty on the CPU.
struct ResidentSpans {
  const void* records = nullptr;
  int count = 0;
  int64_t keys = 0;
};

// The keys (and values) one attention call reads: for a block of a KV cache's step, its visible set
// (plus a non-keyframe's own tokens). The cache that made it owns the memory; the views are valid until
// the cache's next store() or end_step(). Opaque to the caller: it passes the whole thing to the
// attention kernel of the cache's backend and never reads page ids. Pointers are host memory from the
// CPU caches and device memory from the CUDA cache (`spans` itself is always a host array).
// Key order (it does not change the result beyond float rounding; the kernels keep it fixed):
//   layout Paged: the page table's keys in `pool`, then `resident` spans, then `spans`;
//   layout Spans: `spans` only (dense caches: one contiguous run per segment).
enum class KeyLayout : uint8_t { Paged, Spans };
struct VisibleKV {
  KeyLayout layout = KeyLayout::Spans;
  int heads = 0;             // of every key (queries must match)
  int head_dim = 0;
  PagePoolView pool;         // Paged: the block's page pool
  PageTableView table;       // Paged: its visible patch pages (int32 arrays where the pool lives)
  int64_t table_keys = 0;    // Paged: sum of table.len (a device table cannot be summed by the host)
  ResidentSpans resident;    // Paged, device backends: special runs in device memory
  std::span<const KVSpan> spans;
};

// ---- validation (throws lingbot::Error "<fn>: ..." naming the bad field) ------------------------
// Geometry of q, and non-null data/out when it has tokens.
void check_query(std::string_view fn, const QueryView& q, const float* out);
// Span i of a call whose queries have `row` = heads*head_dim elements per token. Returns false for
// an empty span (nothing else is checked then).
bool check_kv_span(std::string_view fn, size_t i, const KVSpan& s, int64_t row);
// Pool geometry (num_pages >= 0, page_size > 0).
void check_pool_geometry(std::string_view fn, int num_pages, int page_size);
// Pool against the queries it serves through a table of num_entries entries: non-null data, same
// heads and head_dim, known dtype.
void check_pool_matches_query(std::string_view fn, const PagePoolView& pool, const QueryView& q, int num_entries);
// Every entry of a host-readable page table indexes a page in [0, num_pages) and slots inside it.
// Returns the number of keys (sum of len).
int64_t check_page_table(std::string_view fn, const PageTableView& t, int num_pages, int page_size);
// Queries against the keys they attend to: same heads and head_dim.
void check_query_matches_keys(std::string_view fn, const QueryView& q, const VisibleKV& keys);

}  // namespace lingbot::kernels
