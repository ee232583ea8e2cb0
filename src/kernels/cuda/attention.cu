// CUDA paged / dense attention (see attention_cuda.h): argument checks, the key tables the kernels
// walk, and the choice of kernel. Three kernels share one key walk (attention_kernels.cuh):
//   attn_simt_kernel  one thread per query row, f32 math, any dtype, head_dim <= 128 (attention_simt.cu)
//   attn_decode_kernel  the same math for at most 8 query rows: one block per row and head, the keys
//                     split over its threads (attention_simt.cu)
//   attn_mma_kernel   one warp per 16 or 32 query rows, mma.sync m16n8k16 (f16/bf16 in, f32 accumulate),
//                     head_dim 64, K/V tiles double-buffered in shared memory with cp.async, B fragments
//                     loaded with ldmatrix (.trans for V), optionally split over key ranges (attention_mma.cu)
// Keys are walked segment by segment (page-table entries first, then extra spans) in tiles; a
// tile never straddles a segment and rows past the segment's end are zero-filled in shared memory,
// never loaded, so padding (even NaN) cannot reach the softmax.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "kernels/cuda/attention_rule.h"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"

namespace lingbot::cuda {
namespace {

using attn::KeyArgs;
using attn::kLog2e;
using attn::kMmaDim;
using attn::launch_mma;
using attn::launch_simt;
using attn::mma_grid_fill;
using attn::QueryArgs;

// ---------------------------------------------------------------------------------------------
// Host side.

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void check_device_ptr(std::string_view fn, const void* p, const char* what) {
  LINGBOT_CHECK(is_device_pointer(p), fn, ": ", what, " is not CUDA device memory");
}

void validate_query(std::string_view fn, const kernels::QueryView& q, const float* out) {
  kernels::check_query(fn, q, out);
  LINGBOT_CHECK(q.head_dim <= kMaxCudaHeadDim, fn, ": query head_dim ", q.head_dim,
                " exceeds the CUDA kernels' maximum ", kMaxCudaHeadDim);
  if (q.n_tokens > 0) {
    check_device_ptr(fn, q.data, "query data");
    check_device_ptr(fn, out, "out");
  }
}

void add_spans(std::string_view fn, const kernels::QueryView& q, std::span<const kernels::KVSpan> spans,
               KeyArgs& args, DType& dtype, bool& have_dtype, int64_t& n_keys) {
  const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim;
  for (size_t i = 0; i < spans.size(); ++i) {
    const kernels::KVSpan& s = spans[i];
    if (!kernels::check_kv_span(fn, i, s, row)) continue;
    LINGBOT_CHECK(args.num_spans < kMaxCudaSpans, fn, ": more than ", kMaxCudaSpans,
                  " non-empty kv spans (CUDA kernel limit), got span ", i);
    if (have_dtype) {
      LINGBOT_CHECK(s.dtype == dtype, fn, ": kv span ", i, ": dtype ", dtype_name(s.dtype),
                    " differs from the other keys' dtype ", dtype_name(dtype),
                    " (the CUDA kernels take one K/V dtype)");
    }
    dtype = s.dtype;
    have_dtype = true;
    check_device_ptr(fn, s.k, "kv span k");
    check_device_ptr(fn, s.v, "kv span v");
    args.span_k[args.num_spans] = s.k;
    args.span_v[args.num_spans] = s.v;
    args.span_stride[args.num_spans] = s.token_stride;
    args.span_n[args.num_spans] = s.n_tokens;
    ++args.num_spans;
    n_keys += s.n_tokens;
  }
}

int current_sm_major() {
  int dev = 0;
  LINGBOT_CUDA_CHECK(cudaGetDevice(&dev));
  int major = 0;
  LINGBOT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

// The tensor-core kernel's key ranges for this call: the requested count, or Auto's choice (1 without
// a workspace), at most one range per key.
int64_t kv_splits_for(std::string_view fn, int n_q, int heads, int64_t n_keys, DType dtype, int rows_per_warp,
                      const CudaAttentionParams& params) {
  LINGBOT_CHECK(params.kv_splits >= 0 && params.kv_splits <= kMaxKvSplits, fn, ": kv_splits must be 0 (auto) to ",
                kMaxKvSplits, ", got ", params.kv_splits);
  int64_t splits = params.kv_splits;
  if (splits == 0 && params.workspace != nullptr) {
    int64_t blocks = 0, wave = 0;
    if (dtype == DType::F16) {
      rows_per_warp == 32 ? mma_grid_fill<__half, 2>(n_q, heads, blocks, wave)
                          : mma_grid_fill<__half, 1>(n_q, heads, blocks, wave);
    } else {
      rows_per_warp == 32 ? mma_grid_fill<__nv_bfloat16, 2>(n_q, heads, blocks, wave)
                          : mma_grid_fill<__nv_bfloat16, 1>(n_q, heads, blocks, wave);
    }
    splits = choose_kv_splits(blocks, wave, n_keys);
  }
  return std::clamp<int64_t>(std::min(splits, n_keys), 1, kMaxKvSplits);
}

void launch(std::string_view fn, const kernels::QueryView& q, const KeyArgs& ka, DType dtype, float* out,
            const CudaAttentionParams& params) {
  LINGBOT_CHECK(std::isfinite(params.scale), fn, ": scale must be finite, got ", params.scale);
  if (q.n_tokens == 0) return;
  LINGBOT_CHECK(q.heads <= 65535, fn, ": query heads ", q.heads, " exceeds the CUDA grid limit 65535");
  const AttentionImpl impl = resolve_attention_impl(params.impl, dtype, q.head_dim);
  const QueryArgs qa{q.data, q.token_stride, q.n_tokens, q.heads, q.head_dim};
  const float qscale = params.scale * kLog2e;
  if (impl == AttentionImpl::TensorCore) {
    LINGBOT_CHECK(params.rows_per_warp == 0 || params.rows_per_warp == 16 || params.rows_per_warp == 32, fn,
                  ": rows_per_warp must be 0 (default), 16 or 32, got ", params.rows_per_warp);
    const int rows_per_warp = params.rows_per_warp ? params.rows_per_warp : kDefaultRowsPerWarp;
    const int64_t splits = kv_splits_for(fn, q.n_tokens, q.heads, ka.n_keys, dtype, rows_per_warp, params);
    if (dtype == DType::F16) {
      if (rows_per_warp == 32) {
        launch_mma<__half, 2>(fn, qa, ka, out, qscale, splits, params);
      } else {
        launch_mma<__half, 1>(fn, qa, ka, out, qscale, splits, params);
      }
    } else {
      if (rows_per_warp == 32) {
        launch_mma<__nv_bfloat16, 2>(fn, qa, ka, out, qscale, splits, params);
      } else {
        launch_mma<__nv_bfloat16, 1>(fn, qa, ka, out, qscale, splits, params);
      }
    }
  } else {
    switch (dtype) {
      case DType::F32: launch_simt<float>(qa, ka, out, qscale, params.stream); break;
      case DType::F16: launch_simt<__half>(qa, ka, out, qscale, params.stream); break;
      case DType::BF16: launch_simt<__nv_bfloat16>(qa, ka, out, qscale, params.stream); break;
    }
  }
  LINGBOT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::Auto: return "auto";
    case AttentionImpl::Simt: return "simt";
    case AttentionImpl::TensorCore: return "tensor-core";
  }
  return "?";
}

AttentionImpl parse_attention_impl(const char* name) {
  const std::string_view n = name ? name : "";
  if (n == "auto") return AttentionImpl::Auto;
  if (n == "simt") return AttentionImpl::Simt;
  if (n == "tensor-core") return AttentionImpl::TensorCore;
  throw Error(detail::concat("unknown CUDA attention kernel '", n, "' (expected auto, simt or tensor-core)"));
}

AttentionImpl resolve_attention_impl(AttentionImpl requested, DType kv_dtype, int head_dim) {
  switch (requested) {
    case AttentionImpl::Simt: return AttentionImpl::Simt;
    case AttentionImpl::TensorCore:
      LINGBOT_CHECK(tensor_core_attention_fits(kv_dtype, head_dim), "tensor-core attention needs f16/bf16 K/V and head_dim ",
                    kTensorCoreHeadDim, ", got ", dtype_name(kv_dtype), " and head_dim ", head_dim);
      LINGBOT_CHECK(current_sm_major() >= kTensorCoreMinSmMajor,
                    "tensor-core attention needs compute capability 8.0 or newer");
      return AttentionImpl::TensorCore;
    case AttentionImpl::Auto: break;
  }
  return auto_runs_tensor_core_attention(kv_dtype, head_dim, current_sm_major()) ? AttentionImpl::TensorCore
                                                                                  : AttentionImpl::Simt;
}

int planned_kv_splits(int n_queries, int heads, int head_dim, int64_t n_keys, DType kv_dtype,
                      const CudaAttentionParams& params) {
  if (resolve_attention_impl(params.impl, kv_dtype, head_dim) != AttentionImpl::TensorCore || n_queries <= 0 ||
      n_keys <= 0)
    return 1;
  const int rows_per_warp = params.rows_per_warp ? params.rows_per_warp : kDefaultRowsPerWarp;
  return static_cast<int>(kv_splits_for("planned_kv_splits", n_queries, heads, n_keys, kv_dtype, rows_per_warp, params));
}

void paged_attention(const kernels::QueryView& q, const kernels::PagePoolView& pool, const DevicePageTable& table,
                     std::span<const kernels::KVSpan> extra, float* out, const CudaAttentionParams& params) {
  paged_attention(q, pool, table, DeviceSpanRange{}, extra, out, params);
}

namespace {

// Keys = the table's entries in `pool` (table_keys tokens), then `num_dspans` device-resident spans of
// dtype `dspan_dtype` (dspan_keys tokens), then `extra`. The caller has checked what only it can
// (table geometry, resident spans' row).
void run_paged(std::string_view fn, const kernels::QueryView& q, const kernels::PagePoolView& pool,
               const kernels::PageTableView& tv, int64_t table_keys, const DeviceSpan* dspans, int num_dspans,
               int64_t dspan_keys, DType dspan_dtype, std::span<const kernels::KVSpan> extra, float* out,
               const CudaAttentionParams& params) {
  KeyArgs ka{};
  DType dtype = DType::F32;
  bool have_dtype = false;
  int64_t n_keys = 0;
  if (tv.num_entries > 0) {
    kernels::check_pool_matches_query(fn, pool, q, tv.num_entries);
    check_device_ptr(fn, pool.data, "page pool data");
    const int64_t row = static_cast<int64_t>(pool.heads) * pool.head_dim;
    ka.pool = pool.data;
    ka.row = row;
    ka.kv_offset = static_cast<int64_t>(pool.page_size) * row;
    ka.page_stride = 2 * ka.kv_offset;
    ka.page_ids = tv.page_ids;
    ka.start = tv.start;
    ka.len = tv.len;
    ka.num_entries = tv.num_entries;
    dtype = pool.dtype;
    have_dtype = true;
    n_keys += table_keys;
  }
  if (num_dspans > 0) {
    if (have_dtype) {
      LINGBOT_CHECK(dspan_dtype == dtype, fn, ": device spans dtype ", dtype_name(dspan_dtype),
                    " differs from the page pool dtype ", dtype_name(dtype), " (the CUDA kernels take one K/V dtype)");
    }
    n_keys += dspan_keys;
    ka.dspans = dspans;
    ka.num_dspans = num_dspans;
    dtype = dspan_dtype;
    have_dtype = true;
  }
  add_spans(fn, q, extra, ka, dtype, have_dtype, n_keys);
  LINGBOT_CHECK(n_keys > 0, fn, ": no visible keys (page table and extra spans are empty)");
  ka.n_keys = n_keys;
  launch(fn, q, ka, dtype, out, params);
}

}  // namespace

void paged_attention(const kernels::QueryView& q, const kernels::PagePoolView& pool, const DevicePageTable& table,
                     const DeviceSpanRange& device_spans, std::span<const kernels::KVSpan> extra, float* out,
                     const CudaAttentionParams& params) {
  constexpr std::string_view fn = "paged_attention";
  validate_query(fn, q, out);
  if (table.num_entries() > 0) {
    LINGBOT_CHECK(pool.num_pages == table.num_pages() && pool.page_size == table.page_size(), fn,
                  ": page pool geometry (num_pages ", pool.num_pages, ", page_size ", pool.page_size,
                  ") differs from the one the page table was validated against (num_pages ", table.num_pages(),
                  ", page_size ", table.page_size(), ")");
  }
  const DeviceSpan* dspans = nullptr;
  int64_t dspan_keys = 0;
  DType dspan_dtype = DType::F32;
  if (device_spans.count > 0) {
    const DeviceSpanTable& dt = *device_spans.table;
    const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim;
    LINGBOT_CHECK(dt.row() == row, fn, ": device spans were uploaded for heads*head_dim = ", dt.row(),
                  ", query has ", row);
    dspans = dt.device_data() + device_spans.first;
    dspan_keys = dt.num_keys(device_spans.first, device_spans.count);
    dspan_dtype = dt.dtype();
  }
  run_paged(fn, q, pool, table.view(), table.num_keys(), dspans, device_spans.count, dspan_keys, dspan_dtype, extra,
            out, params);
}

void attention(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
               const CudaAttentionParams& params) {
  constexpr std::string_view fn = "attention";
  validate_query(fn, q, out);
  kernels::check_query_matches_keys(fn, q, keys);
  if (keys.layout == kernels::KeyLayout::Spans) {
    LINGBOT_CHECK(keys.resident.count == 0, fn, ": layout Spans with ", keys.resident.count, " resident spans");
    dense_attention(q, keys.spans, out, params);
    return;
  }
  // Resident spans are the records of a DeviceSpanTable (the CUDA cache's special runs), in the pool's dtype.
  run_paged(fn, q, keys.pool, keys.table, keys.table_keys, static_cast<const DeviceSpan*>(keys.resident.records),
            keys.resident.count, keys.resident.keys, keys.pool.dtype, keys.spans, out, params);
}

void dense_attention(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                     const CudaAttentionParams& params) {
  constexpr std::string_view fn = "dense_attention";
  validate_query(fn, q, out);
  KeyArgs ka{};
  DType dtype = DType::F32;
  bool have_dtype = false;
  int64_t n_keys = 0;
  add_spans(fn, q, kv, ka, dtype, have_dtype, n_keys);
  LINGBOT_CHECK(n_keys > 0, fn, ": no visible keys (kv spans are empty)");
  ka.n_keys = n_keys;
  launch(fn, q, ka, dtype, out, params);
}

}  // namespace lingbot::cuda

