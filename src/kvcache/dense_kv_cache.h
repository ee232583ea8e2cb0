#pragma once
// Dense KV cache: the data layout of the upstream SDPA path, with the semantics of DESIGN.md §2.
// Per block:
//   frames: [2 (K,V), capacity, heads, head_dim] in options.dtype; tokens [0, resident*tokens_per_frame)
//           hold the resident frames whole (specials + patches), in storage order.
//   side:   [2, capacity, heads, head_dim]; the kept specials of evicted frames, oldest first
//           (num_special_tokens, 1 (camera_only) or 0 per frame, by kept_specials_per_evicted_frame);
//           with max_special_frames only those of the newest max_special_frames evicted frames (older
//           ones are dropped by sliding the rest down).
// Eviction copies the kept specials to the side buffer and slides later frames down (memmove).
// Buffers grow geometrically (x2, amortised) through the allocator and are kept across reset().
// Backend DenseFull never evicts: every stored frame stays whole; the window rule is ignored.
// store() hands out the spans [side, frames, (non-keyframe: own tokens)] (layout Spans: the caller runs
// dense attention over them).
// Deferred: the frame is appended like a keyframe without eviction; commit_deferred() evicts (the
// same memmove a keyframe does), rollback_deferred() drops it from the ledger (its bytes lie beyond
// the live tokens; capacity grown for it is kept, as across reset()).
#include <span>
#include <vector>

#include "kvcache/frame_ledger.h"
#include "kvcache/kv_cache.h"

namespace lingbot {

class DenseKVCache final : public KVCache {
 public:
  // backend: KVBackend::Dense or KVBackend::DenseFull.
  DenseKVCache(const CacheOptions& options, Allocator& allocator, KVBackend backend);

  void begin_step(FrameMode mode, int n_frames) override;
  kernels::VisibleKV store(int block, const kernels::KVSpan& kv) override;
  void end_step() override;
  void mark_block_written(int block) override;
  int64_t keys_in_step() const override;
  int64_t commit_deferred() override;
  void rollback_deferred() override;
  bool deferred_pending() const override { return deferred_pending_; }
  void reset() override;
  CacheStats stats() const override;
  const CacheOptions& options() const override { return opt_; }

  bool never_evict() const { return never_evict_; }
  const kvdetail::FrameLedger& ledger() const { return ledger_; }
  // Live bytes of a block (K then V regions, only the used tokens).
  std::vector<unsigned char> live_bytes(int block) const override;

 private:
  struct BlockBuffers {
    Buffer frames;  // [2, frames_cap_, row]
    Buffer side;    // [2, side_cap_, row]
  };
  int64_t evictions_for(const kvdetail::FrameLedger& l) const { return never_evict_ ? 0 : l.excess(opt_); }
  enum class Region : uint8_t { Frames, Side };  // the resident frames' tokens, or the kept specials
  void grow(Region region, int64_t need_tokens, int64_t live_tokens);
  // Evicts n_evict frames after the pinned ones (their kept specials appended to the side buffer's
  // side_tokens), then drops the kept specials of the n_drop oldest evicted frames (max_special_frames).
  void evict_block(int block, int64_t pinned, int64_t n_evict, int64_t resident_frames, int64_t side_tokens,
                   int64_t n_drop);
  int64_t drops_for(const kvdetail::FrameLedger& l, int64_t n_evict) const;  // drops n_evict more evictions cause
  unsigned char* k_at(Buffer& b, int64_t cap, int64_t token) const;
  unsigned char* v_at(Buffer& b, int64_t cap, int64_t token) const;

  CacheOptions opt_;
  Allocator* alloc_;
  bool never_evict_;
  int64_t row_ = 0;
  size_t token_bytes_ = 0;  // one K (or V) token row in storage dtype
  std::vector<BlockBuffers> blocks_;
  int64_t frames_cap_ = 0;  // tokens
  int64_t side_cap_ = 0;    // tokens

  kvdetail::FrameLedger ledger_;  // after the current step's pre-attention eviction
  kvdetail::StepState step_;
  kvdetail::FrameLedger before_;  // ledger at begin_step (what each block's data still reflects)
  int64_t evict_before_attend_ = 0, evict_after_attend_ = 0;
  enum : uint8_t { kNotWritten = 0, kStored = 1, kMarked = 2 };  // written_ values
  std::vector<uint8_t> written_;  // [block]; kMarked blocks skip the data moves of end_step
  bool deferred_pending_ = false;  // a Deferred frame awaits commit_deferred / rollback_deferred
  std::vector<kernels::KVSpan> spans_;
  std::vector<unsigned char> own_scratch_;
};

}  // namespace lingbot
