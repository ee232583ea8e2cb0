#include "kernels/attention_views.h"

#include "core/error.h"

namespace lingbot::kernels {
void check_query(std::string_view fn, const QueryView& q, const float* out) {
  LINGBOT_CHECK(q.n_tokens >= 0, fn, ": query n_tokens must be >= 0, got ", q.n_tokens);
  LINGBOT_CHECK(q.heads > 0, fn, ": query heads must be > 0, got ", q.heads);
  LINGBOT_CHECK(q.head_dim > 0, fn, ": query head_dim must be > 0, got ", q.head_dim);
  const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim;
  if (q.n_tokens > 0) {
    LINGBOT_CHECK(q.data != nullptr, fn, ": query data is null with n_tokens = ", q.n_tokens);
    LINGBOT_CHECK(out != nullptr, fn, ": out is null with n_tokens = ", q.n_tokens);
    LINGBOT_CHECK(q.token_stride >= row, fn, ": query token_stride ", q.token_stride,
                  " is smaller than heads*head_dim = ", row);
  }
}

// Spans carry no head count: their layout must at least hold heads*head_dim elements per token.
bool check_kv_span(std::string_view fn, size_t i, const KVSpan& s, int64_t row) {
  LINGBOT_CHECK(s.n_tokens >= 0, fn, ": kv span ", i, ": negative n_tokens ", s.n_tokens);
  if (s.n_tokens == 0) return false;
  LINGBOT_CHECK(dtype_known(s.dtype), fn, ": kv span ", i, ": dtype ", static_cast<int>(s.dtype),
                " is not f32, f16 or bf16");
  LINGBOT_CHECK(s.k != nullptr && s.v != nullptr, fn, ": kv span ", i, ": k/v data is null with n_tokens = ",
                s.n_tokens);
  LINGBOT_CHECK(s.token_stride >= row, fn, ": kv span ", i, ": token_stride ", s.token_stride,
                " is smaller than heads*head_dim = ", row);
  return true;
}

void check_pool_geometry(std::string_view fn, int num_pages, int page_size) {
  LINGBOT_CHECK(num_pages >= 0, fn, ": page pool num_pages must be >= 0, got ", num_pages);
  LINGBOT_CHECK(page_size > 0, fn, ": page pool page_size must be > 0, got ", page_size);
}

void check_pool_matches_query(std::string_view fn, const PagePoolView& pool, const QueryView& q, int num_entries) {
  LINGBOT_CHECK(pool.data != nullptr, fn, ": page pool data is null with num_entries = ", num_entries);
  LINGBOT_CHECK(pool.heads == q.heads, fn, ": page pool heads ", pool.heads, " != query heads ", q.heads);
  LINGBOT_CHECK(pool.head_dim == q.head_dim, fn, ": page pool head_dim ", pool.head_dim, " != query head_dim ",
                q.head_dim);
  LINGBOT_CHECK(dtype_known(pool.dtype), fn, ": page pool dtype ", static_cast<int>(pool.dtype),
                " is not f32, f16 or bf16");
}

int64_t check_page_table(std::string_view fn, const PageTableView& t, int num_pages, int page_size) {
  LINGBOT_CHECK(t.num_entries >= 0, fn, ": page table num_entries must be >= 0, got ", t.num_entries);
  check_pool_geometry(fn, num_pages, page_size);
  if (t.num_entries == 0) return 0;
  LINGBOT_CHECK(t.page_ids != nullptr && t.start != nullptr && t.len != nullptr, fn,
                ": page table arrays are null with num_entries = ", t.num_entries);
  int64_t keys = 0;
  for (int i = 0; i < t.num_entries; ++i) {
    const int32_t page = t.page_ids[i], start = t.start[i], len = t.len[i];
    LINGBOT_CHECK(page >= 0 && page < num_pages, fn, ": page table entry ", i, ": page id ", page,
                  " out of range [0, ", num_pages, ")");
    LINGBOT_CHECK(len >= 0, fn, ": page table entry ", i, ": negative len ", len);
    LINGBOT_CHECK(start >= 0 && static_cast<int64_t>(start) + len <= page_size, fn, ": page table entry ", i,
                  ": slots [", start, ", ", static_cast<int64_t>(start) + len, ") out of page bounds [0, ",
                  page_size, ")");
    keys += len;
  }
  return keys;
}

void check_query_matches_keys(std::string_view fn, const QueryView& q, const VisibleKV& keys) {
  LINGBOT_CHECK(q.heads == keys.heads, fn, ": query heads ", q.heads, " != key heads ", keys.heads);
  LINGBOT_CHECK(q.head_dim == keys.head_dim, fn, ": query head_dim ", q.head_dim, " != key head_dim ", keys.head_dim);
}

}  // namespace lingbot::kernels
