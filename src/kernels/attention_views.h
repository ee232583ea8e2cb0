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
#include <cstddef>
#include <cstdint>
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

}  // namespace lingbot::kernels
