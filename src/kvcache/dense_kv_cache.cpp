#include "kvcache/dense_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace lingbot {

using kvdetail::frame_mode_name;

DenseKVCache::DenseKVCache(const CacheOptions& options, Allocator& allocator, KVBackend backend)
    : opt_(options), alloc_(&allocator), never_evict_(backend == KVBackend::DenseFull) {
  LINGBOT_CHECK(backend == KVBackend::Dense || backend == KVBackend::DenseFull,
                "internal: DenseKVCache is the dense and dense-full backends, not ", kv_backend_name(backend));
  validate_cache_options(opt_);
  row_ = int64_t{opt_.heads} * opt_.head_dim;
  token_bytes_ = static_cast<size_t>(row_) * dtype_size(opt_.dtype);
  blocks_.resize(opt_.num_blocks);
  written_.assign(opt_.num_blocks, 0);
}

unsigned char* DenseKVCache::k_at(Buffer& b, int64_t /*cap*/, int64_t token) const {
  return static_cast<unsigned char*>(b.data()) + static_cast<size_t>(token) * token_bytes_;
}
unsigned char* DenseKVCache::v_at(Buffer& b, int64_t cap, int64_t token) const {
  return static_cast<unsigned char*>(b.data()) + static_cast<size_t>(cap + token) * token_bytes_;
}

void DenseKVCache::reset() {
  ledger_ = {};
  deferred_pending_ = false;
  before_ = {};
  step_ = {};
  evict_before_attend_ = evict_after_attend_ = 0;
  std::fill(written_.begin(), written_.end(), 0);
}

void DenseKVCache::grow(Region region, int64_t need_tokens, int64_t live_tokens) {
  const bool side = region == Region::Side;
  int64_t& cap = side ? side_cap_ : frames_cap_;
  if (need_tokens <= cap) return;
  const int64_t new_cap = std::max(need_tokens, 2 * cap);
  // Allocate for every block first so a failure leaves the cache unchanged.
  std::vector<Buffer> fresh;
  fresh.reserve(blocks_.size());
  for (size_t b = 0; b < blocks_.size(); ++b)
    fresh.emplace_back(*alloc_, 2 * static_cast<size_t>(new_cap) * token_bytes_);
  for (size_t b = 0; b < blocks_.size(); ++b) {
    Buffer& old = side ? blocks_[b].side : blocks_[b].frames;
    if (live_tokens > 0) {
      std::memcpy(k_at(fresh[b], new_cap, 0), k_at(old, cap, 0), static_cast<size_t>(live_tokens) * token_bytes_);
      std::memcpy(v_at(fresh[b], new_cap, 0), v_at(old, cap, 0), static_cast<size_t>(live_tokens) * token_bytes_);
    }
    old = std::move(fresh[b]);
  }
  cap = new_cap;
}

int64_t DenseKVCache::drops_for(const kvdetail::FrameLedger& l, int64_t n_evict) const {
  kvdetail::FrameLedger after = l;
  after.evicted += n_evict;
  return after.dropped(opt_) - l.dropped(opt_);
}

void DenseKVCache::evict_block(int block, int64_t pinned, int64_t n_evict, int64_t resident_frames,
                               int64_t side_tokens, int64_t n_drop) {
  if (n_evict == 0) return;
  const int64_t tpf = opt_.tokens_per_frame;
  const int kept = kept_specials_per_evicted_frame(opt_);
  BlockBuffers& bb = blocks_[block];
  // Kept specials of the evicted frames (token 0 first: camera, registers, scale) -> side buffer.
  for (int64_t j = 0; j < n_evict && kept > 0; ++j) {
    const int64_t src = (pinned + j) * tpf;
    const int64_t dst = side_tokens + j * kept;
    std::memcpy(k_at(bb.side, side_cap_, dst), k_at(bb.frames, frames_cap_, src), kept * token_bytes_);
    std::memcpy(v_at(bb.side, side_cap_, dst), v_at(bb.frames, frames_cap_, src), kept * token_bytes_);
  }
  // Slide the newer frames down over the evicted ones.
  const int64_t dst = pinned * tpf, src = (pinned + n_evict) * tpf;
  const size_t bytes = static_cast<size_t>((resident_frames - pinned - n_evict) * tpf) * token_bytes_;
  std::memmove(k_at(bb.frames, frames_cap_, dst), k_at(bb.frames, frames_cap_, src), bytes);
  std::memmove(v_at(bb.frames, frames_cap_, dst), v_at(bb.frames, frames_cap_, src), bytes);
  // max_special_frames: the oldest kept specials leave the side buffer (the rest slide down).
  const int64_t drop = n_drop * kept, keep = side_tokens + n_evict * kept - drop;
  if (drop > 0 && keep > 0) {
    std::memmove(k_at(bb.side, side_cap_, 0), k_at(bb.side, side_cap_, drop), static_cast<size_t>(keep) * token_bytes_);
    std::memmove(v_at(bb.side, side_cap_, 0), v_at(bb.side, side_cap_, drop), static_cast<size_t>(keep) * token_bytes_);
  }
}

void DenseKVCache::begin_step(FrameMode mode, int n_frames) {
  kvdetail::check_begin_step(opt_, step_, ledger_, mode, n_frames);
  LINGBOT_CHECK(!deferred_pending_,
                "begin_step: a deferred frame is pending (call commit_deferred or rollback_deferred)");
  kvdetail::FrameLedger after = ledger_;
  int64_t pre = 0, post = 0;
  if (mode != FrameMode::NonKeyframe) {
    after.stored += n_frames;
    const int64_t e = evictions_for(after);  // Deferred: runs in commit_deferred (capacity checked now)
    if (mode == FrameMode::Keyframe) pre = e;
    if (mode == FrameMode::ScalePhase) post = e;
    const int kept = kept_specials_per_evicted_frame(opt_);
    kvdetail::FrameLedger final_ledger = after;
    final_ledger.evicted += e;
    kvdetail::check_special_cap(opt_, final_ledger.kept(opt_) * kept);
    grow(Region::Frames, after.resident(opt_) * opt_.tokens_per_frame, ledger_.resident(opt_) * opt_.tokens_per_frame);
    // The newly evicted frames' specials are appended before the oldest are dropped.
    grow(Region::Side, (ledger_.kept(opt_) + e) * kept, ledger_.kept(opt_) * kept);
  }
  before_ = ledger_;
  after.evicted += pre;
  ledger_ = after;
  evict_before_attend_ = pre;
  evict_after_attend_ = post;
  step_.open = true;
  step_.mode = mode;
  step_.n_frames = n_frames;
  step_.keys = ledger_.visible_tokens(opt_) + (mode == FrameMode::NonKeyframe ? opt_.tokens_per_frame : 0);
  std::fill(written_.begin(), written_.end(), 0);
}

kernels::VisibleKV DenseKVCache::store(int block, const kernels::KVSpan& kv) {
  kvdetail::check_store(opt_, step_, block, kv);
  LINGBOT_CHECK(!written_[block], "store: block ", block, " was already stored in this ",
                frame_mode_name(step_.mode), " step");
  const int64_t tpf = opt_.tokens_per_frame;
  const int kept = kept_specials_per_evicted_frame(opt_);
  BlockBuffers& bb = blocks_[block];
  auto make_spans = [&](int64_t side_tokens, int64_t frame_tokens) {
    spans_.clear();
    spans_.push_back({k_at(bb.side, side_cap_, 0), v_at(bb.side, side_cap_, 0), opt_.dtype,
                      static_cast<int>(side_tokens), row_});
    spans_.push_back({k_at(bb.frames, frames_cap_, 0), v_at(bb.frames, frames_cap_, 0), opt_.dtype,
                      static_cast<int>(frame_tokens), row_});
  };
  kernels::VisibleKV keys;
  keys.layout = kernels::KeyLayout::Spans;
  keys.heads = opt_.heads;
  keys.head_dim = opt_.head_dim;
  if (step_.mode == FrameMode::NonKeyframe) {
    make_spans(ledger_.kept(opt_) * kept, ledger_.resident(opt_) * tpf);
    spans_.push_back(kvdetail::own_tokens_span(opt_, kv, static_cast<int>(tpf), own_scratch_));
    keys.spans = spans_;
    return keys;
  }
  // Append this step's frames after the resident ones (the block still holds `before_`).
  const int64_t resident_before = before_.resident(opt_);
  const int64_t n_tokens = int64_t{step_.n_frames} * tpf;
  kvdetail::store_rows(static_cast<const float*>(kv.k), kv.token_stride, k_at(bb.frames, frames_cap_, resident_before * tpf),
                       opt_.dtype, row_, n_tokens, row_);
  kvdetail::store_rows(static_cast<const float*>(kv.v), kv.token_stride, v_at(bb.frames, frames_cap_, resident_before * tpf),
                       opt_.dtype, row_, n_tokens, row_);
  kvdetail::FrameLedger now = before_;
  now.stored += step_.n_frames;
  // Keyframe: evict, then hand out the keys. Scale phase: evict in end_step (all blocks at once), after
  // the caller's attention.
  evict_block(block, now.pinned(opt_), evict_before_attend_, now.resident(opt_), now.kept(opt_) * kept,
              drops_for(now, evict_before_attend_));
  now.evicted += evict_before_attend_;
  written_[block] = kStored;
  make_spans(now.kept(opt_) * kept, now.resident(opt_) * tpf);
  keys.spans = spans_;
  return keys;
}

void DenseKVCache::end_step() {
  LINGBOT_CHECK(step_.open, "end_step: no step in progress");
  if (step_.mode != FrameMode::NonKeyframe) {
    for (int b = 0; b < opt_.num_blocks; ++b)
      LINGBOT_CHECK(written_[b], "end_step: block ", b, " was not stored in this ", frame_mode_name(step_.mode),
                    " step (its K/V would be missing)");
  }
  if (evict_after_attend_ > 0) {
    const int kept = kept_specials_per_evicted_frame(opt_);
    for (int b = 0; b < opt_.num_blocks; ++b)
      if (written_[b] == kStored)
        evict_block(b, ledger_.pinned(opt_), evict_after_attend_, ledger_.resident(opt_), ledger_.kept(opt_) * kept,
                    drops_for(ledger_, evict_after_attend_));
  }
  ledger_.evicted += evict_after_attend_;
  evict_after_attend_ = evict_before_attend_ = 0;
  deferred_pending_ = step_.mode == FrameMode::Deferred;
  step_.open = false;
}

int64_t DenseKVCache::commit_deferred() {
  LINGBOT_CHECK(!step_.open, "commit_deferred: a ", frame_mode_name(step_.mode), " step is in progress (call end_step first)");
  LINGBOT_CHECK(deferred_pending_, "commit_deferred: no Deferred frame is pending");
  const int64_t e = evictions_for(ledger_);
  const int kept = kept_specials_per_evicted_frame(opt_);
  for (int b = 0; b < opt_.num_blocks && e > 0; ++b)
    evict_block(b, ledger_.pinned(opt_), e, ledger_.resident(opt_), ledger_.kept(opt_) * kept, drops_for(ledger_, e));
  ledger_.evicted += e;
  deferred_pending_ = false;
  return e;
}

void DenseKVCache::rollback_deferred() {
  LINGBOT_CHECK(!step_.open, "rollback_deferred: a ", frame_mode_name(step_.mode),
                " step is in progress (call end_step first)");
  LINGBOT_CHECK(deferred_pending_, "rollback_deferred: no Deferred frame is pending");
  --ledger_.stored;  // the frame was appended last, after every resident frame, and evicted nothing
  deferred_pending_ = false;
}

void DenseKVCache::mark_block_written(int block) {
  kvdetail::check_mark_block_written(opt_, step_, block, written_);
  written_[block] = kMarked;  // no K/V moves: the block's contents are unspecified from now on
}

int64_t DenseKVCache::keys_in_step() const {
  LINGBOT_CHECK(step_.open, "keys_in_step: no step in progress");
  return step_.keys;
}

std::vector<unsigned char> DenseKVCache::live_bytes(int block) const {
  LINGBOT_CHECK(block >= 0 && block < opt_.num_blocks, "live_bytes: block ", block, " out of range [0, ",
                opt_.num_blocks, ")");
  auto& bb = const_cast<BlockBuffers&>(blocks_[block]);
  const int64_t ft = ledger_.resident(opt_) * opt_.tokens_per_frame;
  const int64_t st = ledger_.kept(opt_) * kept_specials_per_evicted_frame(opt_);
  std::vector<unsigned char> out;
  auto put = [&](const unsigned char* p, int64_t tokens) { out.insert(out.end(), p, p + tokens * token_bytes_); };
  if (ft) {
    put(k_at(bb.frames, frames_cap_, 0), ft);
    put(v_at(bb.frames, frames_cap_, 0), ft);
  }
  if (st) {
    put(k_at(bb.side, side_cap_, 0), st);
    put(v_at(bb.side, side_cap_, 0), st);
  }
  return out;
}

CacheStats DenseKVCache::stats() const {
  CacheStats s;
  const int kept = kept_specials_per_evicted_frame(opt_);
  s.frames_stored = ledger_.stored;
  s.frames_resident = ledger_.resident(opt_);
  s.pinned_pages = ledger_.pinned(opt_);
  s.window_pages = ledger_.window(opt_);
  s.special_tokens = ledger_.kept(opt_) * kept;
  s.special_frames_dropped = ledger_.dropped(opt_);
  s.kept_special_tokens = s.special_tokens;
  s.visible_tokens = ledger_.visible_tokens(opt_);
  const int64_t nb = opt_.num_blocks, tb = static_cast<int64_t>(token_bytes_);
  s.bytes_used = nb * 2 * tb * (s.frames_resident * opt_.tokens_per_frame + s.special_tokens);
  s.patch_bytes_reserved = nb * 2 * tb * frames_cap_;
  s.special_bytes_reserved = nb * 2 * tb * side_cap_;
  s.bytes_reserved = s.patch_bytes_reserved + s.special_bytes_reserved;
  return s;
}

}  // namespace lingbot
