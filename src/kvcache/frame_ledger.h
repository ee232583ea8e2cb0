#pragma once
// Frame bookkeeping shared by every cache backend: which stored frames are pinned, in the window or
// evicted (DESIGN.md §2 / golden README "Semantics worth checking" item 5), plus the input checks
// of a step. Stored frames are numbered 0, 1, ... in storage order; at any time they split into
//   pinned   [0, pinned)                      first scale_frames stored frames (include_scale_frames)
//   evicted  [pinned, pinned + evicted)       only their kept specials stay visible, except
//            [pinned, pinned + dropped)       the oldest ones, whose specials max_special_frames dropped
//   window   [pinned + evicted, stored)       all tokens visible
// This holds because eviction always takes the oldest unpinned frame, and an eviction can only
// happen once all scale_frames pinned slots are filled.
#include <cstdint>
#include <vector>

#include "kvcache/kv_cache.h"

namespace lingbot::kvdetail {

struct FrameLedger {
  int64_t stored = 0;   // frames appended and not rolled back
  int64_t evicted = 0;  // frames whose patches (dense: whole frames) were dropped

  int64_t pinned(const CacheOptions& o) const {
    return o.include_scale_frames ? (stored < o.scale_frames ? stored : o.scale_frames) : 0;
  }
  int64_t window(const CacheOptions& o) const { return stored - pinned(o) - evicted; }
  int64_t resident(const CacheOptions& /*o*/) const { return stored - evicted; }
  // Frames eviction would remove now (window beyond sliding_window, oldest first).
  int64_t excess(const CacheOptions& o) const {
    const int64_t w = window(o);
    return w > o.sliding_window ? w - o.sliding_window : 0;
  }
  // Evicted frames whose specials are dropped (max_special_frames keeps the newest evicted ones).
  int64_t dropped(const CacheOptions& o) const {
    return o.max_special_frames > 0 && evicted > o.max_special_frames ? evicted - o.max_special_frames : 0;
  }
  // Evicted frames whose kept specials stay visible.
  int64_t kept(const CacheOptions& o) const { return evicted - dropped(o); }
  // Keys a frame attending now sees from the cache.
  int64_t visible_tokens(const CacheOptions& o) const {
    return resident(o) * o.tokens_per_frame + kept(o) * kept_specials_per_evicted_frame(o);
  }
  bool operator==(const FrameLedger&) const = default;
};

// Step state common to the backends.
struct StepState {
  bool open = false;
  FrameMode mode = FrameMode::Keyframe;
  int n_frames = 0;
  int64_t keys = 0;  // keys per query in this step
};

// Throws unless (mode, n_frames) may start a step on a cache holding `ledger`.
void check_begin_step(const CacheOptions& o, const StepState& step, const FrameLedger& ledger, FrameMode mode,
                      int n_frames);

// Throws unless kv fits the open step (token count, dtype, stride, block range).
void check_store(const CacheOptions& o, const StepState& step, int block, const kernels::KVSpan& kv);

// Throws unless `block` may be marked written (KVCache::mark_block_written) in the open step:
// a ScalePhase / Keyframe / Deferred step, block in range, not yet stored or marked (written[block] == 0).
void check_mark_block_written(const CacheOptions& o, const StepState& step, int block,
                              const std::vector<uint8_t>& written);

// Throws if the special stream would exceed max_special_tokens (when > 0) after growing to `tokens`.
void check_special_cap(const CacheOptions& o, int64_t tokens);

const char* frame_mode_name(FrameMode m);

// Copies `n_tokens` tokens of f32 K (or V) rows (heads*head_dim floats each, `src_stride` floats
// apart) into `dst` of dtype `t`, packed `dst_stride` elements apart.
void store_rows(const float* src, int64_t src_stride, void* dst, DType t, int64_t dst_stride, int64_t n_tokens,
                int64_t row);

// A non-keyframe's own tokens as attended: rounded to the storage dtype like any cached key, in
// `scratch` (resized as needed; f32 storage passes the input through untouched).
kernels::KVSpan own_tokens_span(const CacheOptions& o, const kernels::KVSpan& kv, int n_tokens,
                                std::vector<unsigned char>& scratch);

}  // namespace lingbot::kvdetail
