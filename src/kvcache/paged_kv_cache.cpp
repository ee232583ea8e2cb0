#include "kvcache/paged_kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace lingbot {

using kvdetail::frame_mode_name;

namespace {
int next_pow2(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}
}  // namespace

PagedKVCache::PagedKVCache(const CacheOptions& options, Allocator& allocator) : opt_(options), alloc_(&allocator) {
  validate_cache_options(opt_);
  patch_tokens_ = opt_.tokens_per_frame - opt_.num_special_tokens;
  // Every page (patch or special) has page_size_ slots; a special page holds whole frames' specials,
  // so it needs at least num_special_tokens slots.
  const int slots = std::max(patch_tokens_, opt_.num_special_tokens);
  page_size_ = opt_.round_pages_pow2 ? next_pow2(slots) : slots;
  special_page_frames_ = page_size_ / opt_.num_special_tokens;
  const int pinned_cap = opt_.include_scale_frames ? opt_.scale_frames : 0;
  const int64_t pages = std::max<int64_t>(int64_t{pinned_cap} + opt_.sliding_window + 1, opt_.scale_frames);
  LINGBOT_CHECK(pages <= INT32_MAX, "CacheOptions: scale_frames + sliding_window = ", pages, " pages is too large");
  pool_pages_ = static_cast<int>(pages);
  special_head_pages_ = (int64_t{pinned_cap} + special_page_frames_ - 1) / special_page_frames_;
  row_ = int64_t{opt_.heads} * opt_.head_dim;
  page_bytes_ = static_cast<size_t>(2 * page_size_ * row_) * dtype_size(opt_.dtype);
  pools_.reserve(opt_.num_blocks);
  for (int b = 0; b < opt_.num_blocks; ++b) pools_.emplace_back(allocator, page_bytes_ * pool_pages_);
  special_.resize(opt_.num_blocks);
  written_.assign(opt_.num_blocks, 0);
  reset();
}

void PagedKVCache::reset() {
  ledger_ = {};
  pinned_pages_.clear();
  window_pages_.clear();
  free_pages_.resize(pool_pages_);
  for (int i = 0; i < pool_pages_; ++i) free_pages_[i] = pool_pages_ - 1 - i;  // hands out 0, 1, 2, ...
  deferred_pending_ = false;
  deferred_new_special_.clear();
  // Every physical special page is free again; ids handed out 0, 1, 2, ... as from a fresh cache.
  special_head_.clear();
  special_tail_.clear();
  special_tail_first_ = special_head_pages_;
  const auto allocated = static_cast<int32_t>(special_[0].size());
  special_free_.resize(static_cast<size_t>(allocated));
  for (int32_t i = 0; i < allocated; ++i) special_free_[static_cast<size_t>(i)] = allocated - 1 - i;
  step_ = {};
  std::fill(written_.begin(), written_.end(), 0);
  plan_valid_ = false;
}

void PagedKVCache::check_no_step(const char* op) const {
  LINGBOT_CHECK(!step_.open, op, ": a ", frame_mode_name(step_.mode), " step is in progress (call end_step first)");
}

int64_t PagedKVCache::special_logical_pages() const {
  // The head fills first; the tail only exists once the head is complete.
  const auto head = static_cast<int64_t>(special_head_.size());
  if (head < special_head_pages_) return head;
  return special_tail_first_ + static_cast<int64_t>(special_tail_.size());
}

int32_t PagedKVCache::special_physical(int64_t logical) const {
  if (logical < special_head_pages_) return special_head_[static_cast<size_t>(logical)];
  LINGBOT_CHECK(logical >= special_tail_first_ && logical < special_tail_first_ + static_cast<int64_t>(special_tail_.size()),
                "PagedKVCache: special page ", logical, " is not held (held: [", special_tail_first_, ", ",
                special_tail_first_ + static_cast<int64_t>(special_tail_.size()), ") after the pinned frames' ",
                special_head_pages_, ")");
  return special_tail_[static_cast<size_t>(logical - special_tail_first_)];
}

void PagedKVCache::reserve_special_pages(int64_t frames, std::vector<NewSpecialPage>* added) {
  const int64_t need = (frames + special_page_frames_ - 1) / special_page_frames_;
  const int64_t have = special_logical_pages();
  if (need <= have) return;
  const int64_t n = need - have;
  const int64_t reused = std::min<int64_t>(n, static_cast<int64_t>(special_free_.size()));
  // All-or-nothing: allocate the fresh pages of every block first, then commit, so a failed
  // allocation leaves the blocks consistent.
  std::vector<std::vector<Buffer>> fresh(opt_.num_blocks);
  for (auto& f : fresh)
    for (int64_t p = reused; p < n; ++p) f.emplace_back(*alloc_, page_bytes_);
  const auto first_fresh = static_cast<int32_t>(special_[0].size());
  for (int b = 0; b < opt_.num_blocks; ++b)
    for (auto& buf : fresh[b]) special_[b].push_back(std::move(buf));
  for (int64_t i = 0; i < n; ++i) {
    NewSpecialPage page;
    if (i < reused) {
      page.id = special_free_.back();
      special_free_.pop_back();
    } else {
      page.id = first_fresh + static_cast<int32_t>(i - reused);
      page.fresh = true;
    }
    if (have + i < special_head_pages_)
      special_head_.push_back(page.id);
    else
      special_tail_.push_back(page.id);
    if (added) added->push_back(page);
  }
}

void PagedKVCache::release_special_pages() {
  if (opt_.max_special_frames == 0) return;
  // Frames before this one (and after the pinned ones) have their specials dropped.
  const int64_t first_needed = ledger_.pinned(opt_) + ledger_.dropped(opt_);
  while (!special_tail_.empty() && (special_tail_first_ + 1) * special_page_frames_ <= first_needed) {
    special_free_.push_back(special_tail_.front());
    special_tail_.pop_front();
    ++special_tail_first_;
    plan_valid_ = false;
  }
}

int64_t PagedKVCache::special_tokens_after(int n_frames, bool evicts) const {
  kvdetail::FrameLedger after = ledger_;
  after.stored += n_frames;
  if (evicts) after.evicted += after.excess(opt_);
  return (after.stored - after.dropped(opt_)) * opt_.num_special_tokens;
}

int64_t PagedKVCache::append_unchecked() {
  LINGBOT_CHECK(!free_pages_.empty(), "PagedKVCache: no free patch page (", pool_pages_, " pages, ",
                ledger_.resident(opt_), " resident frames)");
  const int32_t page = free_pages_.back();
  free_pages_.pop_back();
  const int64_t frame = ledger_.stored++;
  if (ledger_.pinned(opt_) > static_cast<int64_t>(pinned_pages_.size()))
    pinned_pages_.push_back(page);
  else
    window_pages_.push_back(page);
  plan_valid_ = false;
  return frame;
}

int64_t PagedKVCache::append_frame(Eviction eviction) {
  check_no_step("append_frame");
  LINGBOT_CHECK(!deferred_pending_,
                "append_frame: a deferred eviction is pending (call execute_deferred_eviction or rollback_last_frame)");
  kvdetail::check_special_cap(opt_, special_tokens_after(1, eviction == Eviction::Immediate));
  std::vector<NewSpecialPage> added;
  reserve_special_pages(ledger_.stored + 1, &added);
  const int64_t frame = append_unchecked();
  if (eviction == Eviction::Deferred) {
    deferred_pending_ = true;
    deferred_new_special_ = std::move(added);
  } else {
    evict();
  }
  return frame;
}

int64_t PagedKVCache::evict() {
  check_no_step("evict");
  deferred_pending_ = false;
  deferred_new_special_.clear();
  const int64_t n = ledger_.excess(opt_);
  for (int64_t i = 0; i < n; ++i) {  // frame by frame, oldest unpinned first
    free_pages_.push_back(window_pages_.front());
    window_pages_.pop_front();
    ++ledger_.evicted;
  }
  if (n) plan_valid_ = false;
  release_special_pages();
  return n;
}

int64_t PagedKVCache::execute_deferred_eviction() {
  check_no_step("execute_deferred_eviction");
  LINGBOT_CHECK(deferred_pending_, "execute_deferred_eviction: no append_frame(Eviction::Deferred) is pending");
  return evict();
}

void PagedKVCache::rollback_last_frame() {
  check_no_step("rollback_last_frame");
  LINGBOT_CHECK(deferred_pending_,
                "rollback_last_frame: nothing to roll back (no frame appended with deferred eviction pending)");
  // The frame went to the pinned list iff it filled a pinned slot.
  int32_t page;
  if (window_pages_.empty()) {
    page = pinned_pages_.back();
    pinned_pages_.pop_back();
  } else {
    page = window_pages_.back();
    window_pages_.pop_back();
  }
  free_pages_.push_back(page);
  --ledger_.stored;
  // Undo the special pages it added, newest first: fresh ones are the last allocated, reused ones
  // go back on the free list in the order they came off it.
  for (auto it = deferred_new_special_.rbegin(); it != deferred_new_special_.rend(); ++it) {
    if (!special_tail_.empty())
      special_tail_.pop_back();
    else
      special_head_.pop_back();
    if (it->fresh) {
      for (auto& pages : special_) pages.pop_back();
    } else {
      special_free_.push_back(it->id);
    }
  }
  deferred_pending_ = false;
  deferred_new_special_.clear();
  plan_valid_ = false;
}

int32_t PagedKVCache::frame_page(int64_t frame) const {
  const int64_t pinned = ledger_.pinned(opt_);
  if (frame < pinned) return pinned_pages_[static_cast<size_t>(frame)];
  const int64_t first_window = pinned + ledger_.evicted;
  LINGBOT_CHECK(frame >= first_window && frame < ledger_.stored, "write_frame: frame ", frame,
                " is not resident (resident: pinned [0, ", pinned, "), window [", first_window, ", ", ledger_.stored,
                "))");
  return window_pages_[static_cast<size_t>(frame - first_window)];
}

PagedKVCache::FrameSlots PagedKVCache::frame_slots(int block, int64_t frame) {
  LINGBOT_CHECK(block >= 0 && block < opt_.num_blocks, "write_frame: block ", block, " out of range [0, ",
                opt_.num_blocks, ")");
  const size_t es = dtype_size(opt_.dtype);
  const auto at = [&](unsigned char* base, int64_t row) { return base + static_cast<size_t>(row * row_) * es; };
  auto* page = static_cast<unsigned char*>(pools_[block].data()) + static_cast<size_t>(frame_page(frame)) * page_bytes_;
  const SpecialSlot where = special_slot(frame);
  auto* special = static_cast<unsigned char*>(special_[block][static_cast<size_t>(where.page)].data());
  // A page holds K in slots [0, page_size) and V in [page_size, 2 page_size).
  return {at(page, 0), at(page, page_size_), at(special, where.slot), at(special, page_size_ + where.slot)};
}

void PagedKVCache::write_frame(int block, int64_t frame, const kernels::KVSpan& kv) {
  LINGBOT_CHECK(kv.n_tokens == opt_.tokens_per_frame, "write_frame: kv has ", kv.n_tokens, " tokens, expected ",
                opt_.tokens_per_frame);
  LINGBOT_CHECK(kv.dtype == DType::F32, "write_frame: kv dtype ", dtype_name(kv.dtype), " must be f32");
  LINGBOT_CHECK(kv.token_stride >= row_, "write_frame: kv token_stride ", kv.token_stride, " < heads*head_dim ", row_);
  LINGBOT_CHECK(kv.k && kv.v, "write_frame: null k or v pointer");
  const FrameSlots to = frame_slots(block, frame);
  const int ns = opt_.num_special_tokens;
  const auto* k = static_cast<const float*>(kv.k);
  const auto* v = static_cast<const float*>(kv.v);
  kvdetail::store_rows(k + ns * kv.token_stride, kv.token_stride, to.patch_k, opt_.dtype, row_, patch_tokens_, row_);
  kvdetail::store_rows(v + ns * kv.token_stride, kv.token_stride, to.patch_v, opt_.dtype, row_, patch_tokens_, row_);
  kvdetail::store_rows(k, kv.token_stride, to.special_k, opt_.dtype, row_, ns, row_);
  kvdetail::store_rows(v, kv.token_stride, to.special_v, opt_.dtype, row_, ns, row_);
}

void PagedKVCache::build_plan() {
  PagePlan& p = plan_;
  p.page_ids.clear();
  p.start.clear();
  p.len.clear();
  p.special_page_ids.clear();
  p.special_start.clear();
  p.special_len.clear();
  p.special_stride.clear();
  for (int32_t id : pinned_pages_) {
    p.page_ids.push_back(id);
    p.start.push_back(0);
    p.len.push_back(patch_tokens_);
  }
  for (int32_t id : window_pages_) {
    p.page_ids.push_back(id);
    p.start.push_back(0);
    p.len.push_back(patch_tokens_);
  }
  p.patch_keys = static_cast<int64_t>(p.page_ids.size()) * patch_tokens_;
  const int ns = opt_.num_special_tokens;
  const int fpp = special_page_frames_;
  // Frames [a, b) contribute `per_frame` specials each: ns = all (contiguous), 1 = camera token only
  // (one slot per frame, stride ns), 0 = none. Runs never cross a special page.
  auto add = [&](int64_t a, int64_t b, int per_frame) {
    if (per_frame == 0) return;
    const bool all = per_frame == ns;
    const int32_t stride = all ? 1 : ns;
    for (int64_t f = a; f < b;) {
      const int64_t logical = f / fpp;
      const int32_t page = special_physical(logical);
      const int64_t end = std::min<int64_t>(b, (logical + 1) * fpp);
      const auto start = static_cast<int32_t>((f - logical * fpp) * ns);
      const auto len = static_cast<int32_t>(all ? (end - f) * ns : end - f);
      const size_t last = p.special_len.size();
      if (last > 0 && p.special_page_ids[last - 1] == page && p.special_stride[last - 1] == stride &&
          p.special_start[last - 1] + p.special_len[last - 1] * stride == start) {
        p.special_len[last - 1] += len;  // continues the previous run
        f = end;
        continue;
      }
      p.special_page_ids.push_back(page);
      p.special_start.push_back(start);
      p.special_len.push_back(len);
      p.special_stride.push_back(stride);
      f = end;
    }
  };
  const int64_t pinned = ledger_.pinned(opt_);
  const int64_t first_window = pinned + ledger_.evicted;
  add(0, pinned, ns);
  add(pinned + ledger_.dropped(opt_), first_window, kept_specials_per_evicted_frame(opt_));
  add(first_window, ledger_.stored, ns);
  p.visible_tokens = ledger_.visible_tokens(opt_);
  plan_valid_ = true;
}

const PagePlan& PagedKVCache::plan() {
  if (!plan_valid_) build_plan();
  return plan_;
}

void PagedKVCache::special_spans(int block, std::vector<kernels::KVSpan>& spans) const {
  const size_t es = dtype_size(opt_.dtype);
  const int64_t slots = page_size_;
  for (size_t i = 0; i < plan_.special_page_ids.size(); ++i) {
    const auto* base = static_cast<const unsigned char*>(special_[block][plan_.special_page_ids[i]].data());
    const int64_t s = plan_.special_start[i];
    spans.push_back(kernels::KVSpan{base + static_cast<size_t>(s * row_) * es,
                                    base + static_cast<size_t>((slots + s) * row_) * es, opt_.dtype,
                                    plan_.special_len[i], plan_.special_stride[i] * row_});
  }
}

kernels::PagePoolView PagedKVCache::pool_view(int block) const {
  return kernels::PagePoolView{pools_[block].data(), opt_.dtype, pool_pages_,
                               page_size_, opt_.heads,
                               opt_.head_dim};
}

const void* PagedKVCache::special_page(int block, int page) const {
  LINGBOT_CHECK(block >= 0 && block < opt_.num_blocks, "special_page: block ", block, " out of range [0, ",
                opt_.num_blocks, ")");
  LINGBOT_CHECK(page >= 0 && page < static_cast<int>(special_[block].size()), "special_page: page ", page,
                " out of range [0, ", special_[block].size(), ")");
  return special_[block][static_cast<size_t>(page)].data();
}

PagedKVCache::SpecialSlot PagedKVCache::special_slot(int64_t frame) const {
  const int64_t pinned = ledger_.pinned(opt_), dropped = ledger_.dropped(opt_);
  LINGBOT_CHECK(frame >= 0 && frame < ledger_.stored, "special_slot: frame ", frame, " is not stored (",
                ledger_.stored, " stored frames)");
  LINGBOT_CHECK(frame < pinned || frame >= pinned + dropped, "special_slot: the specials of frame ", frame,
                " were dropped (max_special_frames = ", opt_.max_special_frames, ")");
  return {special_physical(frame / special_page_frames_), (frame % special_page_frames_) * opt_.num_special_tokens};
}

kernels::VisibleKV PagedKVCache::visible(int block, std::span<const kernels::KVSpan> extra) {
  LINGBOT_CHECK(block >= 0 && block < opt_.num_blocks, "visible: block ", block, " out of range [0, ",
                opt_.num_blocks, ")");
  plan();
  spans_.clear();
  special_spans(block, spans_);
  spans_.insert(spans_.end(), extra.begin(), extra.end());
  kernels::VisibleKV keys;
  keys.layout = kernels::KeyLayout::Paged;
  keys.heads = opt_.heads;
  keys.head_dim = opt_.head_dim;
  keys.pool = pool_view(block);
  keys.table = plan_.patch_table();
  keys.table_keys = plan_.patch_keys;
  keys.spans = spans_;
  return keys;
}

// ---- KVCache steps ----

void PagedKVCache::begin_step(FrameMode mode, int n_frames) {
  kvdetail::check_begin_step(opt_, step_, ledger_, mode, n_frames);
  LINGBOT_CHECK(!deferred_pending_,
                "begin_step: a deferred eviction is pending (call execute_deferred_eviction or rollback_last_frame)");
  const int64_t first = ledger_.stored;
  if (mode != FrameMode::NonKeyframe) {
    kvdetail::check_special_cap(opt_, special_tokens_after(n_frames, mode != FrameMode::Deferred));
    std::vector<NewSpecialPage> added;
    reserve_special_pages(ledger_.stored + n_frames, &added);
    for (int i = 0; i < n_frames; ++i) append_unchecked();
    if (mode == FrameMode::Keyframe) evict();  // scale phase evicts in end_step, after its attention
    if (mode == FrameMode::Deferred) {         // = append_frame(Eviction::Deferred)
      deferred_pending_ = true;
      deferred_new_special_ = std::move(added);
    }
  }
  plan();
  step_.open = true;
  step_.mode = mode;
  step_.n_frames = n_frames;
  step_.keys = plan_.visible_tokens + (mode == FrameMode::NonKeyframe ? opt_.tokens_per_frame : 0);
  step_first_frame_ = first;
  std::fill(written_.begin(), written_.end(), 0);
}

kernels::VisibleKV PagedKVCache::store(int block, const kernels::KVSpan& kv) {
  kvdetail::check_store(opt_, step_, block, kv);
  if (step_.mode == FrameMode::NonKeyframe) {
    own_ = kvdetail::own_tokens_span(opt_, kv, opt_.tokens_per_frame, own_scratch_);
    return visible(block, std::span<const kernels::KVSpan>(&own_, 1));
  }
  LINGBOT_CHECK(!written_[block], "store: block ", block, " was already stored in this ",
                frame_mode_name(step_.mode), " step");
  const auto* k = static_cast<const float*>(kv.k);
  const auto* v = static_cast<const float*>(kv.v);
  for (int i = 0; i < step_.n_frames; ++i) {
    const int64_t off = int64_t{i} * opt_.tokens_per_frame * kv.token_stride;
    kernels::KVSpan frame{k + off, v + off, DType::F32, opt_.tokens_per_frame, kv.token_stride};
    write_frame(block, step_first_frame_ + i, frame);
  }
  written_[block] = 1;
  return visible(block, {});
}

void PagedKVCache::mark_block_written(int block) {
  kvdetail::check_mark_block_written(opt_, step_, block, written_);
  written_[block] = 1;
}

void PagedKVCache::end_step() {
  LINGBOT_CHECK(step_.open, "end_step: no step in progress");
  if (step_.mode != FrameMode::NonKeyframe) {
    for (int b = 0; b < opt_.num_blocks; ++b)
      LINGBOT_CHECK(written_[b], "end_step: block ", b, " was not stored in this ", frame_mode_name(step_.mode),
                    " step (its K/V would be missing)");
  }
  step_.open = false;
  if (step_.mode == FrameMode::ScalePhase) evict();
}

int64_t PagedKVCache::keys_in_step() const {
  LINGBOT_CHECK(step_.open, "keys_in_step: no step in progress");
  return step_.keys;
}

std::vector<unsigned char> PagedKVCache::live_bytes(int block) const {
  LINGBOT_CHECK(block >= 0 && block < opt_.num_blocks, "live_bytes: block ", block, " out of range [0, ",
                opt_.num_blocks, ")");
  const size_t es = dtype_size(opt_.dtype);
  const size_t tb = static_cast<size_t>(row_) * es;
  std::vector<unsigned char> out;
  auto put = [&](const unsigned char* page, int64_t slot, int64_t n) {
    const unsigned char* k = page + static_cast<size_t>(slot) * tb;
    const unsigned char* v = page + static_cast<size_t>(page_size_ + slot) * tb;
    out.insert(out.end(), k, k + n * tb);
    out.insert(out.end(), v, v + n * tb);
  };
  const auto* pool = static_cast<const unsigned char*>(pools_[block].data());
  for (int64_t f = 0; f < ledger_.stored; ++f) {
    const int64_t pinned = ledger_.pinned(opt_);
    if (f >= pinned && f < pinned + ledger_.evicted) continue;
    put(pool + static_cast<size_t>(frame_page(f)) * page_bytes_, 0, patch_tokens_);
  }
  const int64_t pinned = ledger_.pinned(opt_), dropped = ledger_.dropped(opt_);
  for (int64_t f = 0; f < ledger_.stored; ++f) {
    if (f >= pinned && f < pinned + dropped) continue;
    const SpecialSlot where = special_slot(f);
    put(static_cast<const unsigned char*>(special_[block][static_cast<size_t>(where.page)].data()), where.slot,
        opt_.num_special_tokens);
  }
  return out;
}

PagedCacheState PagedKVCache::state() const {
  PagedCacheState s;
  s.ledger = ledger_;
  s.pinned_pages = pinned_pages_;
  s.window_pages.assign(window_pages_.begin(), window_pages_.end());
  s.free_pages = free_pages_;
  s.special_held = special_head_;
  s.special_held.insert(s.special_held.end(), special_tail_.begin(), special_tail_.end());
  s.special_free = special_free_;
  s.special_tail_first = special_tail_first_;
  s.special_allocated = static_cast<int64_t>(special_[0].size());
  s.deferred_pending = deferred_pending_;
  return s;
}

CacheStats PagedKVCache::stats() const {
  CacheStats s;
  s.frames_stored = ledger_.stored;
  s.frames_resident = ledger_.resident(opt_);
  s.pinned_pages = static_cast<int64_t>(pinned_pages_.size());
  s.window_pages = static_cast<int64_t>(window_pages_.size());
  s.free_pages = static_cast<int64_t>(free_pages_.size());
  s.pool_pages = pool_pages_;
  s.special_frames_dropped = ledger_.dropped(opt_);
  s.special_tokens = (ledger_.stored - s.special_frames_dropped) * opt_.num_special_tokens;
  s.visible_tokens = ledger_.visible_tokens(opt_);
  s.kept_special_tokens = ledger_.kept(opt_) * kept_specials_per_evicted_frame(opt_);
  s.special_pages = static_cast<int64_t>(special_head_.size() + special_tail_.size());
  s.special_free_pages = static_cast<int64_t>(special_free_.size());
  const int64_t token_bytes = 2 * row_ * static_cast<int64_t>(dtype_size(opt_.dtype));
  s.bytes_used = opt_.num_blocks * token_bytes * (s.frames_resident * patch_tokens_ + s.special_tokens);
  s.patch_bytes_reserved = opt_.num_blocks * static_cast<int64_t>(page_bytes_) * pool_pages_;
  s.special_bytes_reserved = opt_.num_blocks * static_cast<int64_t>(page_bytes_) * special_pages_allocated();
  s.bytes_reserved = s.patch_bytes_reserved + s.special_bytes_reserved;
  return s;
}

void PagedKVCache::check_invariants() const {
  std::vector<uint8_t> seen(static_cast<size_t>(pool_pages_), 0);
  auto mark = [&](int32_t id, const char* where) {
    LINGBOT_CHECK(id >= 0 && id < pool_pages_, "invariant: page id ", id, " in ", where, " out of range [0, ",
                  pool_pages_, ")");
    LINGBOT_CHECK(!seen[id], "invariant: page id ", id, " appears twice (second time in ", where, ")");
    seen[id] = 1;
  };
  for (int32_t id : pinned_pages_) mark(id, "pinned pages");
  for (int32_t id : window_pages_) mark(id, "window pages");
  for (int32_t id : free_pages_) mark(id, "free list");
  const int64_t used = static_cast<int64_t>(pinned_pages_.size() + window_pages_.size());
  LINGBOT_CHECK(used + static_cast<int64_t>(free_pages_.size()) == pool_pages_, "invariant: used ", used, " + free ",
                free_pages_.size(), " != pool ", pool_pages_);
  LINGBOT_CHECK(static_cast<int64_t>(pinned_pages_.size()) == ledger_.pinned(opt_), "invariant: ",
                pinned_pages_.size(), " pinned pages for ", ledger_.pinned(opt_), " pinned frames");
  LINGBOT_CHECK(static_cast<int64_t>(window_pages_.size()) == ledger_.window(opt_), "invariant: ",
                window_pages_.size(), " window pages for ", ledger_.window(opt_), " window frames");
  const int64_t bound = int64_t{opt_.scale_frames} + opt_.sliding_window + (deferred_pending_ ? 1 : 0);
  LINGBOT_CHECK(used <= bound, "invariant: ", used, " patch pages in use > scale_frames + sliding_window",
                deferred_pending_ ? " + 1" : "", " = ", bound);
  const bool may_exceed = deferred_pending_ || (step_.open && step_.mode == FrameMode::ScalePhase);
  LINGBOT_CHECK(may_exceed || ledger_.excess(opt_) == 0, "invariant: window holds ", ledger_.window(opt_),
                " frames > sliding_window ", opt_.sliding_window);
  // Special stream: every physical id exactly once (held or free), the held logical pages are exactly
  // those of the stored frames minus the released ones, and a page is released iff all its frames'
  // specials are dropped.
  const int64_t allocated = special_pages_allocated();
  for (const auto& pages : special_)
    LINGBOT_CHECK(static_cast<int64_t>(pages.size()) == allocated, "invariant: blocks hold ", pages.size(), " and ",
                  allocated, " special pages");
  std::vector<uint8_t> seen_special(static_cast<size_t>(allocated), 0);
  auto mark_special = [&](int32_t id, const char* where) {
    LINGBOT_CHECK(id >= 0 && id < allocated, "invariant: special page id ", id, " in ", where, " out of range [0, ",
                  allocated, ")");
    LINGBOT_CHECK(!seen_special[static_cast<size_t>(id)], "invariant: special page id ", id,
                  " appears twice (second time in ", where, ")");
    seen_special[static_cast<size_t>(id)] = 1;
  };
  for (int32_t id : special_head_) mark_special(id, "special head");
  for (int32_t id : special_tail_) mark_special(id, "special tail");
  for (int32_t id : special_free_) mark_special(id, "special free list");
  const int64_t held = static_cast<int64_t>(special_head_.size() + special_tail_.size());
  LINGBOT_CHECK(held + static_cast<int64_t>(special_free_.size()) == allocated, "invariant: held ", held,
                " + free ", special_free_.size(), " special pages != allocated ", allocated);
  const int64_t need_special = (ledger_.stored + special_page_frames_ - 1) / special_page_frames_;
  LINGBOT_CHECK(special_logical_pages() == need_special, "invariant: ", special_logical_pages(),
                " logical special pages for ", ledger_.stored, " stored frames (expected ", need_special, ")");
  const int64_t released_to =
      opt_.max_special_frames == 0
          ? special_head_pages_
          : std::max(special_head_pages_, (ledger_.pinned(opt_) + ledger_.dropped(opt_)) / special_page_frames_);
  LINGBOT_CHECK(special_tail_first_ == released_to,
                "invariant: special tail starts at logical page ", special_tail_first_, ", expected ", released_to);
}

}  // namespace lingbot
