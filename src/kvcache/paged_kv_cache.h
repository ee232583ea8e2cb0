#pragma once
// Two-stream paged KV cache (DESIGN.md §1-2). Use it through KVCache / make_kv_cache; the lower-level
// operations below (append, evict, deferred eviction, rollback, write, attend over the current
// visible set) are public for tests and tools.
//
// Memory, per block (all pages have the same shape [2 (K,V), page_size, heads, head_dim] in
// options.dtype, K of a page first, then V):
// page_size = max(patch_tokens, num_special_tokens), rounded up to a power of two on request.
//   * patch pool: one allocation of pool_pages() = max(pinned_cap + sliding_window + 1, scale_frames)
//     pages made at construction (pinned_cap = scale_frames with include_scale_frames, else 0). A
//     resident frame owns one page; slots [0, patch_tokens) hold its patch tokens, slots beyond are
//     padding (page_size rounded to a power of two on request) and never appear in a plan.
//     Eviction moves page ids to the free list; data never moves.
//   * special stream: the num_special_tokens specials of every stored frame, frame after frame, in
//     append-only special pages of special_page_frames() whole frames each: logical special page
//     L holds frames [L * special_page_frames(), (L + 1) * special_page_frames()). Each logical page is
//     backed by a physical special page (one allocation per block, made on demand, never moved or
//     copied, kept across reset() for reuse). With max_special_frames, a logical page whose frames'
//     specials are all dropped is released: its physical id goes to a free list and backs a later
//     logical page, so the stream holds at most the pages of the pinned frames plus
//     ceil((sliding_window + max_special_frames) / special_page_frames()) + 1 more.
// Page ids (patch pool ids and special page ids, two id spaces) are identical in every block, so
// the plan of a frame step is built once and reused by every block.
#include <deque>
#include <span>
#include <vector>

#include "kvcache/frame_ledger.h"
#include "kvcache/kv_cache.h"

namespace lingbot {

// The visible set of the current cache state as int32 arrays (ready to copy to a device).
struct PagePlan {
  // Patch pages: entry i covers slots [start[i], start[i]+len[i]) of patch pool page page_ids[i].
  std::vector<int32_t> page_ids, start, len;
  int64_t patch_keys = 0;  // sum of len
  // Special-stream runs: entry i covers len tokens of special page special_page_ids[i] starting at
  // slot special_start[i], `special_stride[i]` slots apart (1 = contiguous; num_special_tokens =
  // one token per frame, the camera tokens of camera_only frames). Adjacent runs are merged.
  std::vector<int32_t> special_page_ids, special_start, special_len, special_stride;
  int64_t visible_tokens = 0;

  kernels::PageTableView patch_table() const {
    return {page_ids.data(), start.data(), len.data(), static_cast<int>(page_ids.size())};
  }
};

// Bookkeeping snapshot (everything but K/V bytes); equal snapshots mean equal cache states.
struct PagedCacheState {
  kvdetail::FrameLedger ledger;
  std::vector<int32_t> pinned_pages, window_pages, free_pages;  // free list in pop order (back first)
  // Special stream: physical ids backing the held logical pages (those holding pinned frames, then
  // [special_tail_first, ...)), the free physical ids (pop order back first), and how many physical
  // pages are allocated.
  std::vector<int32_t> special_held, special_free;
  int64_t special_tail_first = 0;
  int64_t special_allocated = 0;
  bool deferred_pending = false;
  bool operator==(const PagedCacheState&) const = default;
};

class PagedKVCache final : public KVCache {
 public:
  PagedKVCache(const CacheOptions& options, Allocator& allocator);

  // KVCache
  void begin_step(FrameMode mode, int n_frames) override;
  kernels::VisibleKV store(int block, const kernels::KVSpan& kv) override;
  void end_step() override;
  void mark_block_written(int block) override;
  int64_t keys_in_step() const override;
  int64_t commit_deferred() override { return execute_deferred_eviction(); }
  void rollback_deferred() override { rollback_last_frame(); }
  bool deferred_pending() const override { return deferred_pending_; }
  void reset() override;
  CacheStats stats() const override;
  const CacheOptions& options() const override { return opt_; }

  // ---- Lower-level operations (throw while a begin_step/end_step step is open) ----
  enum class Eviction : uint8_t { Immediate, Deferred };
  // Appends one stored frame (a patch page + its special slots; K/V to be written with write_frame)
  // and, unless deferred, evicts down to the window. Returns the frame's storage index.
  int64_t append_frame(Eviction eviction = Eviction::Immediate);
  // Evicts oldest unpinned frames while the window holds more than sliding_window; returns how many.
  int64_t evict();
  // Completes the eviction of a deferred append_frame (keeps the frame).
  int64_t execute_deferred_eviction();
  // Undoes the last append_frame(Eviction::Deferred) exactly (pages, free-list order, special
  // pages it allocated); throws if there is none pending.
  void rollback_last_frame();
  // Writes stored, resident frame `frame`'s K/V (tokens_per_frame f32 tokens) into `block`.
  void write_frame(int block, int64_t frame, const kernels::KVSpan& kv);
  // Where stored, resident frame `frame`'s K/V rows go in `block` (storage dtype, rows of heads x
  // head_dim, contiguous): K and V of its patch tokens (patch_tokens() rows each) in its patch page,
  // and of its special tokens (num_special_tokens rows each) in the special stream. write_frame()
  // fills them on the host; a device cache (CudaPagedKVCache) fills them with its own copies.
  struct FrameSlots {
    void* patch_k = nullptr;
    void* patch_v = nullptr;
    void* special_k = nullptr;
    void* special_v = nullptr;
  };
  FrameSlots frame_slots(int block, int64_t frame);
  // The keys of `block`'s current visible set plus `extra` spans (appended after the special runs), as
  // store() returns them; valid until the next visible()/store() or a state change.
  kernels::VisibleKV visible(int block, std::span<const kernels::KVSpan> extra);
  // The visible set of the current state (rebuilt only when the state changed).
  const PagePlan& plan();

  // ---- Introspection ----
  int patch_tokens() const { return patch_tokens_; }
  int page_size() const { return page_size_; }
  int pool_pages() const { return pool_pages_; }
  int special_page_frames() const { return special_page_frames_; }
  size_t page_bytes() const { return page_bytes_; }
  PagedCacheState state() const;
  kernels::PagePoolView pool_view(int block) const;
  // Physical special page `page` of `block` (the ids of PagePlan::special_page_ids), [2, page_size, row].
  const void* special_page(int block, int page) const;
  // Where stored frame `frame`'s specials live: physical special page and first slot. Throws when
  // they were dropped (max_special_frames) or the frame is not stored.
  struct SpecialSlot {
    int32_t page = 0;
    int64_t slot = 0;
  };
  SpecialSlot special_slot(int64_t frame) const;
  int64_t special_pages_allocated() const { return static_cast<int64_t>(special_[0].size()); }
  // Bytes of the live tokens of a block: resident frames' patch slots (storage order) then the
  // special stream [0, stored * num_special_tokens), K then V of each.
  std::vector<unsigned char> live_bytes(int block) const override;
  // Throws lingbot::Error describing the first broken invariant (ids unique, used + free = pool,
  // patch pages in use <= scale_frames + sliding_window (+1 while a deferred eviction is pending)).
  void check_invariants() const;

 private:
  void check_no_step(const char* op) const;
  struct NewSpecialPage {
    int32_t id = 0;
    bool fresh = false;  // allocated now (else taken from the free list)
  };
  // Backs logical pages up to ceil(frames / special_page_frames()), free ids first, fresh ones
  // allocated in all blocks all-or-nothing; appends what it added to `added` when given.
  void reserve_special_pages(int64_t frames, std::vector<NewSpecialPage>* added = nullptr);
  void release_special_pages();  // frees logical pages whose frames' specials are all dropped
  int64_t special_logical_pages() const;
  int32_t special_physical(int64_t logical) const;
  int64_t special_tokens_after(int n_frames, bool evicts) const;  // held after appending n_frames
  int64_t append_unchecked();
  int32_t frame_page(int64_t frame) const;
  void build_plan();
  void special_spans(int block, std::vector<kernels::KVSpan>& spans) const;

  CacheOptions opt_;
  Allocator* alloc_;
  int patch_tokens_ = 0;
  int page_size_ = 0;
  int pool_pages_ = 0;
  int special_page_frames_ = 0;
  int64_t row_ = 0;  // heads * head_dim
  size_t page_bytes_ = 0;

  std::vector<Buffer> pools_;                      // [block] patch pool
  std::vector<std::vector<Buffer>> special_;       // [block][physical special page]
  int64_t special_head_pages_ = 0;                 // logical pages holding pinned frames (never released)
  std::vector<int32_t> special_head_;              // physical ids of logical pages [0, special_head_pages_)
  std::deque<int32_t> special_tail_;               // physical ids of logical pages [special_tail_first_, ...)
  int64_t special_tail_first_ = 0;
  std::vector<int32_t> special_free_;              // stack: back() is the next id handed out

  kvdetail::FrameLedger ledger_;
  std::vector<int32_t> pinned_pages_;
  std::deque<int32_t> window_pages_;
  std::vector<int32_t> free_pages_;  // stack: back() is the next page handed out
  bool deferred_pending_ = false;
  std::vector<NewSpecialPage> deferred_new_special_;  // special pages the pending deferred append added

  kvdetail::StepState step_;
  int64_t step_first_frame_ = 0;
  std::vector<uint8_t> written_;  // [block] K/V of this step's frames written

  PagePlan plan_;
  bool plan_valid_ = false;
  std::vector<kernels::KVSpan> spans_;        // per store: special runs + own tokens
  kernels::KVSpan own_;                       // non-keyframe own tokens of the current store
  std::vector<unsigned char> own_scratch_;    // non-keyframe own tokens in storage dtype
};

}  // namespace lingbot
