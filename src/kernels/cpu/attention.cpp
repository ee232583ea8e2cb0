#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/parallel_errors.h"
#include "kernels/cpu/attention_internal.h"

namespace lingbot::kernels {
namespace {

using detail::AttnScratch;
using detail::KeySegment;
using detail::kKeyBlock;
using detail::kMaxQueryGroup;
using detail::kRowGroup;

void validate_query(std::string_view fn, const QueryView& q, const float* out, const AttentionParams& p) {
  check_query(fn, q, out);
  LINGBOT_CHECK(p.num_threads >= 1, fn, ": num_threads must be >= 1, got ", p.num_threads);
  LINGBOT_CHECK(std::isfinite(p.scale), fn, ": scale must be finite, got ", p.scale);
}

void add_spans(std::string_view fn, const QueryView& q, std::span<const KVSpan> spans,
               std::vector<KeySegment>& segs) {
  const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim;
  for (size_t i = 0; i < spans.size(); ++i) {
    const KVSpan& s = spans[i];
    if (check_kv_span(fn, i, s, row)) segs.push_back({s.k, s.v, s.dtype, s.n_tokens, s.token_stride});
  }
}

void add_pages(const QueryView& q, const PagePoolView& pool, const PageTableView& t, std::vector<KeySegment>& segs) {
  constexpr std::string_view fn = "paged_attention";
  LINGBOT_CHECK(t.num_entries >= 0, fn, ": page table num_entries must be >= 0, got ", t.num_entries);
  if (t.num_entries == 0) return;
  check_pool_matches_query(fn, pool, q, t.num_entries);
  check_page_table(fn, t, pool.num_pages, pool.page_size);
  const int64_t row = static_cast<int64_t>(pool.heads) * pool.head_dim;
  const size_t esize = dtype_size(pool.dtype);
  const auto* base = static_cast<const unsigned char*>(pool.data);
  for (int i = 0; i < t.num_entries; ++i) {
    const int32_t page = t.page_ids[i], start = t.start[i], len = t.len[i];
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

// Runs every (head, query group) item over num_threads OpenMP threads, one Scratch per thread:
// item(scratch, h, q0, nq, qscale). The partition does not depend on the thread count.
template <class Scratch, class Item>
void for_each_item(const QueryView& q, const AttentionParams& params, const Item& item_fn) {
  if (q.n_tokens == 0) return;
  const QueryGroups groups = group_queries(q.n_tokens);
  const int64_t n_items = static_cast<int64_t>(q.heads) * groups.count;
  const int threads = static_cast<int>(std::min<int64_t>(params.num_threads, n_items));
  // Fold log2(e) into the query scale so the softmax can use exp2.
  const float qscale = params.scale * 1.4426950408889634f;
  ParallelErrors errors;  // a scratch's allocation, a check in an item
#pragma omp parallel num_threads(threads)
  {
    std::optional<Scratch> scratch;
    errors.run([&] { scratch.emplace(q.head_dim); });
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) errors.run([&] {
      const int h = static_cast<int>(item / groups.count);
      const int q0 = static_cast<int>(item % groups.count) * groups.rows;
      const int nq = std::min(groups.rows, q.n_tokens - q0);
      item_fn(*scratch, h, q0, nq, qscale);
    });
  }
  errors.rethrow();
}

DType common_dtype(const std::vector<KeySegment>& segs) {
  for (const auto& s : segs)
    if (s.dtype != segs.front().dtype) return DType::F32;  // mixed: only the f32 path reads it
  return segs.front().dtype;
}

void run(std::string_view fn, const QueryView& q, const std::vector<KeySegment>& segs, int64_t n_keys, float* out,
         const AttentionParams& params) {
  const DType dt = common_dtype(segs);
  LINGBOT_CHECK(params.compute != AttentionCompute::Bf16 || dt == DType::BF16, fn,
                ": compute bf16 needs every K/V segment to be bf16 (got a mix or another dtype)");
  if (resolved_attention_compute(params.compute, dt) == AttentionCompute::Bf16) {
    detail::run_attention_bf16(q, segs, n_keys, out, params);
  } else {
    detail::run_attention(detail::select_kernels(), q, segs, n_keys, out, params);
  }
}

}  // namespace

namespace detail {

void run_attention(const AttnKernels& kern, const QueryView& q, const std::vector<KeySegment>& segs, int64_t n_keys,
                   float* out, const AttentionParams& params) {
  for_each_item<AttnScratch>(q, params, [&](AttnScratch& sc, int h, int q0, int nq, float qscale) {
    attend_group(kern, q, h, q0, nq, qscale, segs, n_keys, sc, out);
  });
}

void run_attention_bf16(const QueryView& q, const std::vector<KeySegment>& segs, int64_t n_keys, float* out,
                        const AttentionParams& params) {
  const int dp = (q.head_dim + kDimAlign - 1) / kDimAlign * kDimAlign;
  const bool use_amx = params.bf16_isa == Bf16Isa::Auto && dp % 32 == 0 && amx_bf16_available();
  for_each_item<AttnScratchBf16>(q, params, [&](AttnScratchBf16& sc, int h, int q0, int nq, float qscale) {
    attend_group_bf16(q, h, q0, nq, qscale, segs, n_keys, sc, out, use_amx);
  });
}

}  // namespace detail

bool native_bf16_attention() { return detail::avx512bf16_available(); }

bool amx_bf16_attention() { return detail::amx_bf16_available(); }

AttentionCompute resolved_attention_compute(AttentionCompute compute, DType kv_dtype) {
  switch (compute) {
    case AttentionCompute::F32:
      return AttentionCompute::F32;
    case AttentionCompute::Bf16:
      LINGBOT_CHECK(native_bf16_attention(), "attention: compute bf16 needs a CPU with AVX512_BF16 (this one lacks it)");
      LINGBOT_CHECK(kv_dtype == DType::BF16, "attention: compute bf16 needs bf16 K/V, got ", dtype_name(kv_dtype));
      return AttentionCompute::Bf16;
    case AttentionCompute::Auto:
      break;
  }
  return kv_dtype == DType::BF16 && native_bf16_attention() ? AttentionCompute::Bf16 : AttentionCompute::F32;
}

const char* attention_compute_name(AttentionCompute c) {
  switch (c) {
    case AttentionCompute::Auto:
      return "auto";
    case AttentionCompute::F32:
      return "f32";
    case AttentionCompute::Bf16:
      return "bf16";
  }
  return "?";
}

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
  run(fn, q, segs, n_keys, out, params);
}

void dense_attention(const QueryView& q, std::span<const KVSpan> kv, float* out, const AttentionParams& params) {
  constexpr std::string_view fn = "dense_attention";
  validate_query(fn, q, out, params);
  std::vector<KeySegment> segs;
  add_spans(fn, q, kv, segs);
  int64_t n_keys = 0;
  for (const auto& s : segs) n_keys += s.n_tokens;
  LINGBOT_CHECK(n_keys > 0, fn, ": no visible keys (kv spans are empty)");
  run(fn, q, segs, n_keys, out, params);
}

void attention(const QueryView& q, const VisibleKV& keys, float* out, const AttentionParams& params) {
  constexpr std::string_view fn = "attention";
  check_query_matches_keys(fn, q, keys);
  LINGBOT_CHECK(keys.resident.count == 0, fn, ": the keys hold ", keys.resident.count,
                " resident spans of a device backend (the CPU kernel reads host views only)");
  if (keys.layout == KeyLayout::Paged) {
    paged_attention(q, keys.pool, keys.table, keys.spans, out, params);
  } else {
    dense_attention(q, keys.spans, out, params);
  }
}

}  // namespace lingbot::kernels
