#pragma once
// Paged KV cache with its K/V pages in DEVICE memory. The bookkeeping (frame ledger, pinned /
// window / free pages, special stream, page plan, append / evict / rollback / reset semantics) is
// the CPU PagedKVCache's, run on the host with its pools allocated in device memory: its own
// begin_step / end_step (so a scale phase larger than the window is evicted after its attention, as
// on the CPU), with mark_block_written in place of its attend. This class only writes K/V into the
// device pages (a conversion kernel) and runs the CUDA paged attention kernel. Per frame step the patch page table and the special-stream runs of every block
// are uploaded once (begin_step) and reused by all blocks.
//
// attend(): q, kv and out are DEVICE pointers (same shapes as KVCache::attend). Calls are
// asynchronous on the cache's stream; synchronise before reading `out` on the host.
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
  CudaPagedKVCache(const CacheOptions& options, Allocator& allocator, cudaStream_t stream = nullptr,
                   AttentionImpl impl = AttentionImpl::Auto);

  void begin_step(FrameMode mode, int n_frames) override;
  void attend(int block, const kernels::QueryView& q, const kernels::KVSpan& kv, float* out) override;
  void end_step() override;
  void step_without_attention(FrameMode mode, int n_frames) override;
  int64_t keys_in_step() const override;
  void reset() override;
  CacheStats stats() const override { return book_.stats(); }
  const CacheOptions& options() const override { return book_.options(); }

  // The host bookkeeping (state(), plan, check_invariants(), pool_view() with device pointers).
  // Read-only: mutating it directly would bypass the device writes.
  const PagedKVCache& bookkeeping() const { return book_; }
  AttentionImpl attention_impl() const { return impl_; }

 private:
  void write_frame(int block, int i);

  PagedKVCache book_;
  cudaStream_t stream_;
  AttentionImpl impl_;
  int64_t row_ = 0;
  kvdetail::StepState step_;
  int64_t first_frame_ = 0;                 // storage index of the step's first frame
  std::vector<int32_t> step_pages_;         // patch page of each of the step's frames
  std::vector<uint8_t> written_;            // [block]
  DevicePageTable table_;                   // patch pages of the current plan
  DeviceSpanTable specials_;                // special-stream runs, runs_per_block_ per block
  int runs_per_block_ = 0;
  std::vector<kernels::KVSpan> span_scratch_;
  Buffer own_;                              // non-keyframe own K/V in the storage dtype [2][tokens][row]
  const kernels::KVSpan* pending_kv_ = nullptr;  // kv of the attend() in progress (write_frame input)
};

// Device KV cache factory for benchmarks and the model's GPU path. Only KVBackend::Paged exists on
// CUDA; other backends throw lingbot::Error naming the backend.
std::unique_ptr<KVCache> make_cuda_kv_cache(KVBackend backend, const CacheOptions& options, Allocator& allocator,
                                            cudaStream_t stream = nullptr, AttentionImpl impl = AttentionImpl::Auto);

}  // namespace lingbot::cuda
