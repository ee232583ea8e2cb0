#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention_internal.h"

namespace lingbot::kernels {
namespace {

using detail::AttnScratch;
using detail::KeySegment;
using detail::kKeyBlock;
using detail::kMaxQueryGroup;
using detail::kRowGroup;

bool known_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void validate_query(std::string_view fn, const QueryView& q, const float* out, const AttentionParams& p) {
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
  LINGBOT_CHECK(p.num_threads >= 1, fn, ": num_threads must be >= 1, got ", p.num_threads);
  LINGBOT_CHECK(std::isfinite(p.scale), fn, ": scale must be finite, got ", p.scale);
}

// Spans carry no head count: their layout must at least hold heads*head_dim elements per token.
void add_spans(std::string_view fn, const QueryView& q, std::span<const KVSpan> spans,
               std::vector<KeySegment>& segs) {
  const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim;
  for (size_t i = 0; i < spans.size(); ++i) {
    const KVSpan& s = spans[i];
    LINGBOT_CHECK(s.n_tokens >= 0, fn, ": kv span ", i, ": negative n_tokens ", s.n_tokens);
    if (s.n_tokens == 0) continue;
    LINGBOT_CHECK(known_dtype(s.dtype), fn, ": kv span ", i, ": dtype ", static_cast<int>(s.dtype),
                  " is not f32, f16 or bf16");
    LINGBOT_CHECK(s.k != nullptr && s.v != nullptr, fn, ": kv span ", i, ": k/v data is null with n_tokens = ",
                  s.n_tokens);
    LINGBOT_CHECK(s.token_stride >= row, fn, ": kv span ", i, ": token_stride ", s.token_stride,
                  " is smaller than heads*head_dim = ", row);
    segs.push_back({s.k, s.v, s.dtype, s.n_tokens, s.token_stride});
  }
}

void add_pages(const QueryView& q, const PagePoolView& pool, const PageTableView& t, std::vector<KeySegment>& segs) {
  constexpr std::string_view fn = "paged_attention";
  LINGBOT_CHECK(t.num_entries >= 0, fn, ": page table num_entries must be >= 0, got ", t.num_entries);
  if (t.num_entries == 0) return;
  LINGBOT_CHECK(t.page_ids != nullptr && t.start != nullptr && t.len != nullptr, fn,
                ": page table arrays are null with num_entries = ", t.num_entries);
  LINGBOT_CHECK(pool.data != nullptr, fn, ": page pool data is null with num_entries = ", t.num_entries);
  LINGBOT_CHECK(pool.heads == q.heads, fn, ": page pool heads ", pool.heads, " != query heads ", q.heads);
  LINGBOT_CHECK(pool.head_dim == q.head_dim, fn, ": page pool head_dim ", pool.head_dim, " != query head_dim ",
                q.head_dim);
  LINGBOT_CHECK(known_dtype(pool.dtype), fn, ": page pool dtype ", static_cast<int>(pool.dtype),
                " is not f32, f16 or bf16");
  LINGBOT_CHECK(pool.num_pages >= 0, fn, ": page pool num_pages must be >= 0, got ", pool.num_pages);
  LINGBOT_CHECK(pool.page_size > 0, fn, ": page pool page_size must be > 0, got ", pool.page_size);
  const int64_t row = static_cast<int64_t>(pool.heads) * pool.head_dim;
  const size_t esize = dtype_size(pool.dtype);
  const auto* base = static_cast<const unsigned char*>(pool.data);
  for (int i = 0; i < t.num_entries; ++i) {
    const int32_t page = t.page_ids[i], start = t.start[i], len = t.len[i];
    LINGBOT_CHECK(page >= 0 && page < pool.num_pages, fn, ": page table entry ", i, ": page id ", page,
                  " out of range [0, ", pool.num_pages, ")");
    LINGBOT_CHECK(len >= 0, fn, ": page table entry ", i, ": negative len ", len);
    LINGBOT_CHECK(start >= 0 && static_cast<int64_t>(start) + len <= pool.page_size, fn, ": page table entry ", i,
                  ": slots [", start, ", ", static_cast<int64_t>(start) + len, ") out of page bounds [0, ",
                  pool.page_size, ")");
    if (len == 0) continue;
    const int64_t k_tok = (static_cast<int64_t>(page) * 2 + 0) * pool.page_size + start;
    const int64_t v_tok = (static_cast<int64_t>(page) * 2 + 1) * pool.page_size + start;
    segs.push_back({base + k_tok * row * esize, base + v_tok * row * esize, pool.dtype, len, row});
  }
}

// Splits n_q into equal groups of at most kMaxQueryGroup rows. Each output row's arithmetic is the
// same whatever group or thread computes it, so results do not depend on the thread count.
struct QueryGroups {
  int count = 0;
  int rows = 0;
};
QueryGroups group_queries(int n_q) {
  QueryGroups g;
  g.count = (n_q + kMaxQueryGroup - 1) / kMaxQueryGroup;
  g.rows = g.count ? (n_q + g.count - 1) / g.count : 0;
  g.rows = std::min(kMaxQueryGroup, (g.rows + kRowGroup - 1) / kRowGroup * kRowGroup);
  return g;
}

}  // namespace

namespace detail {

void run_attention(const AttnKernels& kern, const QueryView& q, const std::vector<KeySegment>& segs, int64_t n_keys,
                   float* out, const AttentionParams& params) {
  if (q.n_tokens == 0) return;
  const QueryGroups groups = group_queries(q.n_tokens);
  const int64_t n_items = static_cast<int64_t>(q.heads) * groups.count;
  const int threads = static_cast<int>(std::min<int64_t>(params.num_threads, n_items));
  // Fold log2(e) into the query scale so the softmax can use exp2.
  const float qscale = params.scale * 1.4426950408889634f;
#pragma omp parallel num_threads(threads)
  {
    AttnScratch scratch(q.head_dim);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int h = static_cast<int>(item / groups.count);
      const int q0 = static_cast<int>(item % groups.count) * groups.rows;
      const int nq = std::min(groups.rows, q.n_tokens - q0);
      attend_group(kern, q, h, q0, nq, qscale, segs, n_keys, scratch, out);
    }
  }
}

}  // namespace detail

void paged_attention(const QueryView& q, const PagePoolView& pool, const PageTableView& table,
                     std::span<const KVSpan> extra, float* out, const AttentionParams& params) {
  constexpr std::string_view fn = "paged_attention";
  validate_query(fn, q, out, params);
  std::vector<KeySegment> segs;
  add_pages(q, pool, table, segs);
  add_spans(fn, q, extra, segs);
  int64_t n_keys = 0;
  for (const auto& s : segs) n_keys += s.n_tokens;
  LINGBOT_CHECK(n_keys > 0, fn, ": no visible keys (page table and extra spans are empty)");
  detail::run_attention(detail::select_kernels(), q, segs, n_keys, out, params);
}

void dense_attention(const QueryView& q, std::span<const KVSpan> kv, float* out, const AttentionParams& params) {
  constexpr std::string_view fn = "dense_attention";
  validate_query(fn, q, out, params);
  std::vector<KeySegment> segs;
  add_spans(fn, q, kv, segs);
  int64_t n_keys = 0;
  for (const auto& s : segs) n_keys += s.n_tokens;
  LINGBOT_CHECK(n_keys > 0, fn, ": no visible keys (kv spans are empty)");
  detail::run_attention(detail::select_kernels(), q, segs, n_keys, out, params);
}

}  // namespace lingbot::kernels
