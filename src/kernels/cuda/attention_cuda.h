#pragma once
// CUDA attention kernels over the device-neutral views of kernels/attention_views.h (as the CPU kernels),
// with every data pointer a DEVICE pointer:
//   queries   f32 [n_q, heads, head_dim], tokens `token_stride` floats apart
//   page pool dtype [num_pages, 2 (K,V), page_size, heads, head_dim]
//   KV span   K and V each [n_tokens, heads, head_dim], tokens `token_stride` elements apart
//   out       f32 [n_q, heads, head_dim] contiguous
// Softmax over all visible keys with f32 accumulation (online softmax, exp2 with log2(e) folded into
// the scale, as on the CPU). Padding slots outside the page table's [start, start+len) ranges are
// never read, so they may hold anything (NaN included).
//
// Page tables live on the device in a DevicePageTable: uploaded once per frame step, then passed to
// every block's paged_attention call. All calls are asynchronous on params.stream; the caller
// synchronises before reading `out` on the host.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/allocator.h"
#include "kernels/attention_views.h"
#include "kernels/cuda/pinned_staging.h"

namespace lingbot::cuda {

// Which kernel runs. Auto = TensorCore when it applies (f16/bf16 K/V, head_dim 64, sm_80+), else Simt.
//   Simt:       f32 math throughout (queries stay f32); any dtype, head_dim 1..128. At most 8 query
//               rows (the camera head's one token per frame) split the keys over a block per row.
//   TensorCore: mma.sync m16n8k16 with f32 accumulation; q * scale * log2(e) is rounded to the K/V
//               dtype once for Q·K^T and the probabilities to the V dtype for P·V (as
//               FlashAttention/FlashInfer do), the softmax sums adding those rounded probabilities:
//               the CPU bf16 kernel's contract (kernels/cpu/attention.h), so results differ from the
//               CPU's f32 kernel by about the storage dtype's rounding, every row a convex
//               combination of V rows.
enum class AttentionImpl : uint8_t { Auto, Simt, TensorCore };
const char* attention_impl_name(AttentionImpl impl);  // "auto" | "simt" | "tensor-core"
AttentionImpl parse_attention_impl(const char* name);  // throws Error naming the bad value

class AttentionWorkspace;

struct CudaAttentionParams {
  float scale = 1.0f;              // usually 1/sqrt(head_dim)
  cudaStream_t stream = nullptr;   // nullptr = legacy default stream
  AttentionImpl impl = AttentionImpl::Auto;
  // Tensor-core kernel only: query rows per warp, 16 or 32 (each K/V fragment then feeds two mmas);
  // 0 = kDefaultRowsPerWarp. A tuning knob for `bench gpu attention`; both give the same bits.
  int rows_per_warp = 0;
  // Tensor-core kernel only: the keys are cut into this many contiguous ranges, each run by its own
  // blocks, and a second kernel merges their partial softmax states (as flash-decoding does). Why: the
  // streaming shape (one frame's ~1000 queries x 16 heads against ~70k keys) is only 128-256 blocks,
  // about one per SM, too few warps to hide latency. 0 = auto (choose_kv_splits over the device's SM
  // count and the kernel's occupancy; 1 without a workspace), 1 = one range, 2..kMaxKvSplits = that many
  // (at most one per key). Splitting changes results by f32 rounding only.
  int kv_splits = 0;
  // Device scratch for the partial states; needed when more than one range runs. Not owned.
  AttentionWorkspace* workspace = nullptr;
};
inline constexpr int kDefaultRowsPerWarp = 16;
inline constexpr int kMaxKvSplits = 16;

// How many key ranges Auto runs: enough for `blocks` (row blocks x heads of the unsplit grid) to fill
// one wave of `wave_blocks` resident blocks (SMs x blocks per SM) without starting a second, each
// range at least kMinKeysPerSplit keys; 1 when the grid already fills the wave. Pure: exposed for tests.
inline constexpr int64_t kMinKeysPerSplit = 1024;
int choose_kv_splits(int64_t blocks, int64_t wave_blocks, int64_t n_keys);

// Device memory for the partial softmax states of split-key attention: splits x queries x heads x
// (head_dim + 2) floats. Capacity only grows, so steady-state calls allocate nothing; growing frees
// the old buffer through the allocator (a stream-ordered one keeps it until queued work is done).
class AttentionWorkspace {
 public:
  explicit AttentionWorkspace(Allocator& device_allocator);  // allocator must be MemoryKind::Device
  float* reserve(int64_t floats);  // device pointer to at least `floats` floats, contents undefined
  int64_t capacity_floats() const { return capacity_; }

 private:
  Allocator* alloc_;
  Buffer device_;
  int64_t capacity_ = 0;
};

// Most extra / dense KV spans one call takes (they travel in the kernel's parameter block).
inline constexpr int kMaxCudaSpans = 8;
// Largest head_dim the kernels take.
inline constexpr int kMaxCudaHeadDim = 128;

// Device copy of a page table (three int32 arrays), validated on upload against the geometry of the
// pool it indexes. Capacity only grows, so steady-state uploads allocate nothing.
class DevicePageTable {
 public:
  explicit DevicePageTable(Allocator& device_allocator);  // allocator must be MemoryKind::Device
  // Checks every entry like the CPU kernel does (page id in [0, num_pages), slots inside the page;
  // same messages) and copies the table to the device asynchronously on `stream`: through `staging`
  // when given (the host does not wait for the stream's queued work), else from pageable memory.
  void upload(const kernels::PageTableView& host, int num_pages, int page_size, cudaStream_t stream = nullptr,
              PinnedStaging* staging = nullptr);
  // Device pointers; valid until the next upload.
  kernels::PageTableView view() const;
  int num_entries() const { return num_entries_; }
  int64_t num_keys() const { return num_keys_; }  // sum of len
  int num_pages() const { return num_pages_; }    // geometry the table was validated against
  int page_size() const { return page_size_; }

 private:
  Allocator* alloc_;
  Buffer device_;                 // int32 [3][capacity]: page_ids, start, len
  std::vector<int32_t> staging_;  // host copy of the same layout
  int capacity_ = 0;
  int num_entries_ = 0;
  int64_t num_keys_ = 0;
  int num_pages_ = 0;
  int page_size_ = 0;
};

// One run of keys in device memory, as a DeviceSpanTable stores it (a KVSpan without the dtype).
struct DeviceSpan {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t token_stride = 0;  // elements
  int32_t n_tokens = 0;
  int32_t reserved = 0;
};

// Many KV spans of one dtype in device memory (e.g. a paged cache's special-stream runs of every
// block), uploaded once per frame step; each attention call reads a contiguous range of them.
// Capacity only grows.
class DeviceSpanTable {
 public:
  explicit DeviceSpanTable(Allocator& device_allocator);  // allocator must be MemoryKind::Device
  // Spans hold device pointers; all share `dtype`; token_stride >= row (= heads*head_dim).
  // `staging` as for DevicePageTable::upload.
  void upload(std::span<const kernels::KVSpan> spans, DType dtype, int64_t row, cudaStream_t stream = nullptr,
              PinnedStaging* staging = nullptr);
  int size() const { return static_cast<int>(keys_before_.size()) - 1; }
  DType dtype() const { return dtype_; }
  int64_t row() const { return row_; }
  int64_t num_keys(int first, int count) const;  // tokens in spans [first, first+count)
  const DeviceSpan* device_data() const { return static_cast<const DeviceSpan*>(device_.data()); }

 private:
  Allocator* alloc_;
  Buffer device_;
  std::vector<DeviceSpan> staging_;
  std::vector<int64_t> keys_before_{0};  // prefix sums of n_tokens
  int capacity_ = 0;
  DType dtype_ = DType::F32;
  int64_t row_ = 0;
};

// A range of a DeviceSpanTable's spans (empty by default).
struct DeviceSpanRange {
  const DeviceSpanTable* table = nullptr;
  int first = 0;
  int count = 0;
};

// Attention of q over the keys of `table` in `pool`, then the keys of `extra` spans. All K/V must
// share one dtype (the CPU kernel allows mixing; the CUDA kernels are specialised per dtype).
// Throws lingbot::Error on bad input (messages as the CPU kernel where the check is the same) and
// on CUDA launch errors.
void paged_attention(const kernels::QueryView& q, const kernels::PagePoolView& pool, const DevicePageTable& table,
                     std::span<const kernels::KVSpan> extra, float* out, const CudaAttentionParams& params);

// As above with device-resident spans between the page table's keys and `extra`:
// keys = table entries, then device_spans, then extra.
void paged_attention(const kernels::QueryView& q, const kernels::PagePoolView& pool, const DevicePageTable& table,
                     const DeviceSpanRange& device_spans, std::span<const kernels::KVSpan> extra, float* out,
                     const CudaAttentionParams& params);

// Attention of q over the keys a device KV cache handed out (KVCache::store of kvcache/cuda): layout
// Paged = the table's keys (device table, table_keys tokens), then its resident spans (the records of
// a DeviceSpanTable, in the pool's dtype), then `spans`; layout Spans = dense_attention over `spans`.
void attention(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
               const CudaAttentionParams& params);

// Attention of q over the concatenation of `kv` spans (dense caches, contiguous baselines).
void dense_attention(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                     const CudaAttentionParams& params);

// The kernel Auto picks for this input on the current device.
AttentionImpl resolve_attention_impl(AttentionImpl requested, DType kv_dtype, int head_dim);

// The key ranges (CudaAttentionParams::kv_splits) a call over these queries and keys runs on the
// current device: 1 unless the tensor-core kernel runs.
int planned_kv_splits(int n_queries, int heads, int head_dim, int64_t n_keys, DType kv_dtype,
                      const CudaAttentionParams& params);

}  // namespace lingbot::cuda
