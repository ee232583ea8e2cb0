#pragma once
// Streaming KV cache for the global-attention blocks: the one entry point the model calls.
// Backends: Paged (two-stream paged cache), Dense (concatenate + slice, same eviction semantics),
// DenseFull (never evicts). All follow DESIGN.md §2. The cache knows nothing about the model:
// it sees blocks, frames of `tokens_per_frame` tokens (the first `num_special_tokens` of each frame
// are its special tokens, camera first), and k/v after RoPE. It never computes attention: per block it
// stores the new K/V and hands out the visible keys as device-neutral views (kernels::VisibleKV), which
// the caller passes with its queries to the attention kernel of the cache's backend (as llama.cpp's KV
// cache hands its graph K/V views). The caller never sees page ids.
//
// Per frame step the model calls:
//   begin_step(mode, n_frames)                 once; plans the visible set (page table) for all blocks
//   keys = store(block, kv)                    once per global block, any order; then
//   be.attention_cached(q, keys, out, scale)   the backend's attention over the views (compute/backend.h)
//   end_step()                                  once; completes deferred work (e.g. scale-phase eviction)
//
//   auto cache = make_kv_cache(parse_kv_backend("paged"), opts, allocator);
//   cache->begin_step(FrameMode::ScalePhase, K);             // K frames' k/v in one call per block
//   for (int b = 0; b < opts.num_blocks; ++b) be.attention_cached(q[b], cache->store(b, kv[b]), out[b], scale);
//   cache->end_step();
//   cache->begin_step(is_key ? FrameMode::Keyframe : FrameMode::NonKeyframe, 1);  ... per frame
//
// What a step attends to (golden README "Semantics worth checking" items 4-6): ScalePhase stores all
// its frames, attends bidirectionally over them (and nothing else: the cache is empty), and evicts
// down to the window in end_step (only matters with include_scale_frames off and scale_frames >
// sliding_window). Keyframe: stored, then evicted frame by frame (oldest unpinned first) while the
// window holds more than sliding_window frames, then attends. NonKeyframe: attends to the cache plus
// its own tokens (rounded to the storage dtype like stored keys) and writes nothing. Deferred: one
// frame stored like a keyframe but WITHOUT eviction, so it attends to the cache as it stands plus its
// own tokens (the window may hold sliding_window + 1 frames); after end_step the caller decides:
// commit_deferred() runs the deferred eviction (the frame is a keyframe), rollback_deferred() removes
// the frame again and leaves the cache exactly as it was before the step (a non-keyframe). This is
// the flow-keyframe protocol (golden README "Windowed mode and flow keyframes" F3).
//
// Rules the caller must keep (violations throw lingbot::Error with a message naming the value):
//   * ScalePhase is only allowed on an empty cache (fresh or after reset()), with 1 <= n_frames <=
//     scale_frames; Keyframe, NonKeyframe and Deferred take n_frames == 1.
//   * After a Deferred step, commit_deferred() or rollback_deferred() must come before the next step.
//   * In a ScalePhase or Keyframe step every block 0..num_blocks-1 must be stored before end_step()
//     (that is when the frame's K/V are written into the block's cache).
//   * store() calls of one cache must not run concurrently (they share the step plan and scratch), and
//     the keys one store() returns are valid until the next store() or end_step().
// Backends:
//   Paged (paged_kv_cache.h): per block one fixed patch pool [pages, 2, page_size, heads, head_dim]
//     (max(pinned + window + 1, scale_frames) pages, allocated at construction) and an append-only special stream of pages of the same shape,
//     each holding whole frames' specials, allocated on demand (never moved). The special stream keeps
//     the specials of every stored frame (also those a rule hides, e.g. cross_frame_special off)
//     except those dropped by max_special_frames; a page whose frames are all dropped is recycled.
//   Dense / DenseFull (dense_kv_cache.h): per block contiguous K/V of whole resident frames in storage order plus a side
//     buffer of the kept specials of evicted frames, both grown geometrically (DenseFull never evicts).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "kernels/attention_views.h"
#include "kvcache/frame_mode.h"
#include "lingbot/cache_stats.h"  // KVBackend, parse_kv_backend, CacheStats
#include "lingbot/dtype.h"

namespace lingbot {

struct CacheOptions {
  int num_blocks = 24;
  int heads = 16;
  int head_dim = 64;
  int tokens_per_frame = 0;        // specials + patches, e.g. 6 + 999
  int num_special_tokens = 6;      // camera + registers + scale, camera first
  int scale_frames = 8;
  int sliding_window = 64;
  bool cross_frame_special = true;
  bool camera_only = false;
  bool include_scale_frames = true;
  DType dtype = DType::F32;        // storage dtype of K/V
  bool round_pages_pow2 = false;   // paged: round pages up to a power of two (padding never attended)
  // Cap on special tokens per block (paged: the special stream, 6 per stored frame; dense: the side
  // buffer of kept specials); 0 = unlimited. Exceeding it throws in begin_step before any change.
  int64_t max_special_tokens = 0;
  // Bound on the special stream (cost that stays flat forever): of the evicted frames only the
  // `max_special_frames` most recently evicted keep their kept specials (visible and in memory); the
  // specials of older evicted frames are dropped, oldest first (paged: their special pages are
  // recycled once every frame on them is dropped; ids only, data never moves). Pinned and window
  // frames are never affected. 0 = keep all (upstream).
  int64_t max_special_frames = 0;
};

// Visible specials of an evicted frame: num_special_tokens (cross_frame_special), 1 (plus camera_only),
// 0 (cross_frame_special off).
int kept_specials_per_evicted_frame(const CacheOptions& options);

// Throws lingbot::Error naming the first bad field ("CacheOptions.<field> must be ..., got ...").
void validate_cache_options(const CacheOptions& options);

class KVCache {
 public:
  virtual ~KVCache() = default;
  virtual void begin_step(FrameMode mode, int n_frames) = 0;
  // kv: f32 K and V of the step's frames, [n_frames * tokens_per_frame, heads, head_dim] each (token
  // stride given by the span; device memory for the CUDA cache). ScalePhase / Keyframe / Deferred:
  // writes them into `block`'s cache; NonKeyframe: keeps them for this call only (rounded to the
  // storage dtype like stored keys). Returns what the block's queries attend to: its visible set (the
  // step's own frames included) and, for a non-keyframe, its own tokens. Valid until the next store()
  // or end_step(); pass it to the backend's attention kernel.
  virtual kernels::VisibleKV store(int block, const kernels::KVSpan& kv) = 0;
  virtual void end_step() = 0;
  // In place of store(): records that `block`'s K/V of the open ScalePhase / Keyframe / Deferred step
  // are written by someone else (a device backend writing the pools itself) or not at all, so
  // end_step() accepts the step. Frames are appended / evicted and memory grows exactly as in a real
  // step; the block's cache contents are unspecified until a store() writes them (bookkeeping-only
  // steps of memory/occupancy studies: bench/harness/kv_bookkeeping.h). Throws outside such a step,
  // for a block out of range, or when the block was already stored or marked in this step.
  virtual void mark_block_written(int block) = 0;
  // Keys each query attends to in the current step (cache + own tokens of a non-keyframe);
  // valid between begin_step and end_step.
  virtual int64_t keys_in_step() const = 0;
  // After a Deferred step (and only then): keep the frame and run the eviction a Keyframe would have
  // run (returns the frames evicted), or remove the frame so that the cache (frames, pages, special
  // stream, visible set) is exactly what it was before the step. Throw when no Deferred frame is pending.
  virtual int64_t commit_deferred() = 0;
  virtual void rollback_deferred() = 0;
  virtual bool deferred_pending() const = 0;
  virtual void reset() = 0;  // back to empty, without reallocating (capacity is kept)
  virtual CacheStats stats() const = 0;
  virtual const CacheOptions& options() const = 0;
  // A fingerprint of `block`'s state: the bytes of its live tokens, K then V, in a layout of the
  // backend's (equal bytes = equal contents). Host caches only: a device cache throws Error.
  virtual std::vector<unsigned char> live_bytes(int block) const = 0;
};

// Validates the options; the allocator must outlive the cache.
std::unique_ptr<KVCache> make_kv_cache(KVBackend backend, const CacheOptions& options, Allocator& allocator);

}  // namespace lingbot
