#pragma once
// Paged KV cache with its K/V pages in DEVICE memory. The bookkeeping (frame ledger, pinned /
// window / free pages, special stream, page plan, append / evict / rollback / reset semantics) is
// the CPU PagedKVCache's, run on the host with its pools allocated in device memory: its own
// begin_step / end_step (so a scale phase larger than the window is evicted after its attention, as
// on the CPU), with mark_block_written in place of its store. This class only writes K/V into the
// device pages (cuda::store_rows, the device counterpart of convert_from_f32) and hands out the keys;
// it never runs attention. Per frame step the patch page table and the special-stream runs of every
// block are uploaded once (begin_step) and reused by all blocks.
//
// store(): kv holds DEVICE pointers (same shapes as KVCache::store); the returned keys (device page
// table, this block's special runs as resident spans, a non-keyframe's own tokens) go to
// cuda::attention. Writes are asynchronous on the cache's stream: run the attention on the same stream
// (or synchronise first).
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kvcache/kv_cache.h"
#include "kvcache/paged_kv_cache.h"

namespace lingbot::cuda {

class CudaPagedKVCache final : public KVCache {
 public:
  // The allocator must hand out device memory (MemoryKind::Device, e.g. a CudaAllocator or a wrapper
  // of one) and outlive the cache; anything else throws Error.
  CudaPagedKVCache(const CacheOptions& options, Allocator& allocator, cudaStream_t stream = nullptr);

  void begin_step(FrameMode mode, int n_frames) override;
  kernels::VisibleKV store(int block, const kernels::KVSpan& kv) override;
  void end_step() override;
  void mark_block_written(int block) override;
  int64_t keys_in_step() const override;
  // Deferred frames: the host bookkeeping cache decides; K/V stay where store() wrote them.
  int64_t commit_deferred() override { return book_.commit_deferred(); }
  void rollback_deferred() override { book_.rollback_deferred(); }
  bool deferred_pending() const override { return book_.deferred_pending(); }
  void reset() override;
  CacheStats stats() const override { return book_.stats(); }
  const CacheOptions& options() const override { return book_.options(); }
  std::vector<unsigned char> live_bytes(int block) const override;  // throws: the K/V are in device memory

  // The host bookkeeping (state(), plan, check_invariants(), pool_view() with device pointers).
  // Read-only: mutating it directly would bypass the device writes.
  const PagedKVCache& bookkeeping() const { return book_; }
  cudaStream_t stream() const { return stream_; }

 private:
  void write_frame(int block, int i);

  PagedKVCache book_;
  cudaStream_t stream_;
  int64_t row_ = 0;
  kvdetail::StepState step_;
  int64_t first_frame_ = 0;                 // storage index of the step's first frame
  std::vector<uint8_t> written_;            // [block]
  DevicePageTable table_;                   // patch pages of the current plan
  DeviceSpanTable specials_;                // special-stream runs, runs_per_block_ per block
  int runs_per_block_ = 0;
  std::vector<kernels::KVSpan> span_scratch_;
  Buffer own_;                              // non-keyframe own K/V in the storage dtype [2][tokens][row]
  kernels::KVSpan own_span_;                // the own tokens of the current non-keyframe store()
  const kernels::KVSpan* pending_kv_ = nullptr;  // kv of the store() in progress (write_frame input)
  // The tables' uploads go through pinned memory: a pageable copy would wait for the stream's queued
  // work (the previous frame) every step. Last: destroyed first, it waits for its transfers.
  PinnedStaging staging_;
};

// Device KV cache factory for benchmarks and the model's GPU path. Only KVBackend::Paged exists on
// CUDA; other backends throw lingbot::Error naming the backend.
std::unique_ptr<KVCache> make_cuda_kv_cache(KVBackend backend, const CacheOptions& options, Allocator& allocator,
                                            cudaStream_t stream = nullptr);

}  // namespace lingbot::cuda
