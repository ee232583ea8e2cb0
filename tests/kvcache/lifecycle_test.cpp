// Paged-cache lifecycle details: plan layout, padding never attended, exact rollback of a special
// page allocation, reset without reallocation for both backends.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kv_test_util.h"
#include "kvcache/dense_kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "bench/harness/kv_bookkeeping.h"

using namespace lingbot;
using namespace kvtest;

namespace {

CacheOptions options(int tpf, int ns, int scale, int window) {
  CacheOptions o;
  o.num_blocks = 2;
  o.heads = 2;
  o.head_dim = 8;
  o.tokens_per_frame = tpf;
  o.num_special_tokens = ns;
  o.scale_frames = scale;
  o.sliding_window = window;
  return o;
}

// The plan lists pinned then window patch pages (len = patch tokens, never the padded page size)
// and merges the special stream into runs: one per special page when every special is visible,
// strided camera-token runs for evicted frames with camera_only.
TEST(PagedKVCachePlan, LayoutAndRunMerging) {
  HostAllocator alloc;
  CacheOptions o = options(6 + 27, 6, 2, 3);  // 27 patches -> page 27 (32 with pow2), 4 (5) frames of specials per page
  o.round_pages_pow2 = true;
  PagedKVCache c(o, alloc);
  EXPECT_EQ(c.page_size(), 32);
  EXPECT_EQ(c.special_page_frames(), 5);
  for (int i = 0; i < 12; ++i) c.append_frame();  // pinned 0,1; evicted 2..8; window 9..11
  const PagePlan& p = c.plan();
  ASSERT_EQ(p.page_ids.size(), 5u);
  for (size_t i = 0; i < p.page_ids.size(); ++i) {
    EXPECT_EQ(p.start[i], 0);
    EXPECT_EQ(p.len[i], 27);
  }
  EXPECT_EQ(p.page_ids[0], 0);
  EXPECT_EQ(p.page_ids[1], 1);
  // 12 frames' specials on pages of 5 frames: 3 runs (30, 30, 12 tokens).
  EXPECT_EQ(p.special_page_ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.special_len, (std::vector<int32_t>{30, 30, 12}));
  EXPECT_EQ(p.special_stride, (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(p.visible_tokens, 5 * 33 + 7 * 6);

  o.camera_only = true;
  PagedKVCache cam(o, alloc);
  for (int i = 0; i < 12; ++i) cam.append_frame();
  const PagePlan& q = cam.plan();
  // page 0: frames 0,1 all (0..11), frames 2,3,4 camera (12, 18, 24);
  // page 1: frames 5..9 camera except 9 (window): camera 5..8, then frame 9 all;
  // page 2: frames 10, 11 all.
  EXPECT_EQ(q.special_page_ids, (std::vector<int32_t>{0, 0, 1, 1, 2}));
  EXPECT_EQ(q.special_start, (std::vector<int32_t>{0, 12, 0, 24, 0}));
  EXPECT_EQ(q.special_len, (std::vector<int32_t>{12, 3, 4, 6, 12}));
  EXPECT_EQ(q.special_stride, (std::vector<int32_t>{1, 6, 6, 1, 1}));
  EXPECT_EQ(q.visible_tokens, 5 * 33 + 7);

  o.cross_frame_special = false;
  PagedKVCache none(o, alloc);
  for (int i = 0; i < 12; ++i) none.append_frame();
  EXPECT_EQ(none.plan().special_len, (std::vector<int32_t>{12, 6, 12}));
  EXPECT_EQ(none.plan().visible_tokens, 5 * 33);
}

// Rounding to a power of two leaves a slot count that already is one alone: 32 patches (or 8
// specials) need a page of 32 (8) slots, not 64 (16), and the pools reserve exactly
// num_blocks * pool_pages * 2 (K, V) * page_size * row * 4 bytes (f32), as without rounding.
TEST(PagedKVCachePlan, PowerOfTwoSlotCountsAreNotRoundedFurther) {
  struct Case {
    int tpf, ns, page, special_page_frames;
  };
  for (const Case& k : {Case{6 + 32, 6, 32, 5}, Case{6 + 8, 6, 8, 1}, Case{8 + 4, 8, 8, 1}}) {
    SCOPED_TRACE("tokens_per_frame " + std::to_string(k.tpf));
    for (bool pow2 : {true, false}) {
      HostAllocator alloc;
      CacheOptions o = options(k.tpf, k.ns, 2, 3);
      o.round_pages_pow2 = pow2;
      PagedKVCache c(o, alloc);
      EXPECT_EQ(c.page_size(), k.page);
      EXPECT_EQ(c.special_page_frames(), k.special_page_frames);
      EXPECT_EQ(c.pool_pages(), 2 + 3 + 1);  // pinned + window + 1
      EXPECT_EQ(c.page_bytes(), size_t{2} * k.page * 16 * 4);
      EXPECT_EQ(alloc.bytes_allocated(), size_t{2} * 6 * 2 * k.page * 16 * 4);  // no special page before a frame
    }
  }
}

// Pages are handed out from the free list and returned to it on eviction; ids are reused, never copied.
TEST(PagedKVCachePlan, EvictionMovesPageIdsOnly) {
  HostAllocator alloc;
  PagedKVCache c(options(10, 6, 1, 2), alloc);
  EXPECT_EQ(c.pool_pages(), 4);  // 1 pinned + 2 window + 1
  for (int i = 0; i < 3; ++i) c.append_frame();
  EXPECT_EQ(c.state().pinned_pages, (std::vector<int32_t>{0}));
  EXPECT_EQ(c.state().window_pages, (std::vector<int32_t>{1, 2}));
  c.append_frame();  // takes page 3, evicts frame 1 (page 1)
  EXPECT_EQ(c.state().window_pages, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(c.state().free_pages, (std::vector<int32_t>{1}));
  c.append_frame();  // reuses page 1, evicts page 2
  EXPECT_EQ(c.state().window_pages, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(c.state().free_pages, (std::vector<int32_t>{2}));
}

// Padding slots of patch pages and unused special slots are filled with NaN: an attention that
// read any of them would return NaN.
TEST(PagedKVCachePlan, PaddingIsNeverAttended) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    HostAllocator alloc;
    CacheOptions o = options(6 + 5, 6, 1, 2);  // 5 patches -> page 8 slots
    o.round_pages_pow2 = true;
    o.dtype = dt;
    o.camera_only = true;
    PagedKVCache c(o, alloc);
    ASSERT_EQ(c.page_size(), 8);
    const int64_t row = 16, tpf = 11;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::vector<float> q(tpf * row), k(tpf * row), v(tpf * row), out(tpf * row);
    auto fill_nan = [&](void* page) {
      std::vector<float> nan(static_cast<size_t>(c.page_size() * row) * 2, std::numeric_limits<float>::quiet_NaN());
      convert_from_f32(nan.data(), page, dt, nan.size());
    };
    for (int b = 0; b < 2; ++b)
      for (int p = 0; p < c.pool_pages(); ++p)
        fill_nan(static_cast<unsigned char*>(const_cast<void*>(c.pool_view(b).data)) + p * c.page_bytes());
    int filled = 0;  // special pages are poisoned as soon as they exist (K/V are written in attend)
    for (int step = 0; step < 8; ++step) {
      c.begin_step(step == 0 ? FrameMode::ScalePhase : step % 3 == 2 ? FrameMode::NonKeyframe : FrameMode::Keyframe, 1);
      for (; filled < c.stats().special_pages; ++filled)
        for (int b = 0; b < 2; ++b) fill_nan(const_cast<void*>(c.special_page(b, filled)));
      for (int b = 0; b < 2; ++b) {
        for (auto* x : {&q, &k, &v})
          for (auto& e : *x) e = nd(rng);
        kvtest::attend(c, b, {q.data(), int(tpf), 2, 8, row}, {k.data(), v.data(), DType::F32, int(tpf), row}, out.data());
        for (float x : out) ASSERT_TRUE(std::isfinite(x)) << "step " << step << " dtype " << dtype_name(dt);
      }
      c.end_step();
    }
    EXPECT_GT(c.stats().kept_special_tokens, 0);
  }
}

// A deferred append that opened a new special page is rolled back completely (page freed).
TEST(PagedKVCacheLifecycle, RollbackReleasesSpecialPageItAllocated) {
  HostAllocator alloc;
  PagedKVCache c(options(8, 6, 1, 1), alloc);  // page 6 slots: one frame of specials per page
  ASSERT_EQ(c.special_page_frames(), 1);
  c.append_frame();
  const PagedCacheState before = c.state();
  const size_t bytes = alloc.bytes_allocated();
  c.append_frame(PagedKVCache::Eviction::Deferred);
  EXPECT_EQ(c.stats().special_pages, 2);
  EXPECT_EQ(alloc.bytes_allocated(), bytes + c.page_bytes() * 2);
  c.rollback_last_frame();
  EXPECT_EQ(c.state(), before);
  EXPECT_EQ(alloc.bytes_allocated(), bytes);
  // Deferred + execute_deferred_eviction = immediate append.
  PagedKVCache d(options(8, 6, 1, 1), alloc);
  d.append_frame();
  for (int i = 0; i < 4; ++i) {
    c.append_frame(PagedKVCache::Eviction::Deferred);
    EXPECT_EQ(c.stats().window_pages, i == 0 ? 1 : 2);  // window + 1 while deferred
    c.check_invariants();
    EXPECT_EQ(c.execute_deferred_eviction(), i == 0 ? 0 : 1);
    d.append_frame(PagedKVCache::Eviction::Immediate);
    EXPECT_EQ(c.state(), d.state());
  }
}

// max_special_frames: a long stream recycles special page ids (no allocation once the stream is
// full, memory flat), keeps the kept frames' data in place (never moved), and a deferred append that
// took a recycled page rolls back exactly (free list order included). Pinned frames keep their page.
TEST(PagedKVCacheLifecycle, BoundedSpecialStreamRecyclesPages) {
  HostAllocator alloc;
  CacheOptions o = options(8, 6, 2, 2);  // page 6 slots: one frame of specials per special page
  o.max_special_frames = 3;
  o.include_scale_frames = true;
  PagedKVCache c(o, alloc);
  ASSERT_EQ(c.special_page_frames(), 1);
  const int64_t row = 16, tpf = 8;
  std::vector<float> k(tpf * row), v(tpf * row);
  bench::bookkeeping_step(c, FrameMode::ScalePhase, 2);
  const PagedKVCache::SpecialSlot pinned0 = c.special_slot(0);
  size_t warm_bytes = 0;
  uint64_t warm_allocs = 0;
  std::vector<int> seen_as_page(64, 0);
  for (int i = 0; i < 60; ++i) {
    const int64_t f = c.append_frame();
    for (int b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < tpf * row; ++t) k[t] = v[t] = static_cast<float>(f * 1000 + t);
      c.write_frame(b, f, {k.data(), v.data(), DType::F32, int(tpf), row});
    }
    c.check_invariants();
    const CacheStats s = c.stats();
    // Visible: 2 pinned + 2 window frames whole, the specials of the 3 newest evicted frames.
    const int64_t evicted = std::max<int64_t>(0, s.frames_stored - 4);
    EXPECT_EQ(s.special_frames_dropped, std::max<int64_t>(0, evicted - 3));
    EXPECT_EQ(s.visible_tokens, (s.frames_stored - evicted) * tpf + std::min<int64_t>(evicted, 3) * 6);
    EXPECT_EQ(c.plan().visible_tokens, s.visible_tokens);
    // Held special pages: 2 pinned + 2 window + 3 kept frames.
    EXPECT_EQ(s.special_pages, std::min<int64_t>(s.frames_stored, 7));
    ++seen_as_page[static_cast<size_t>(c.special_slot(f).page)];
    if (i == 10) {
      warm_bytes = alloc.bytes_allocated();
      warm_allocs = alloc.allocation_count();
    }
    if (i > 10) {
      EXPECT_EQ(alloc.bytes_allocated(), warm_bytes);
      EXPECT_EQ(alloc.allocation_count(), warm_allocs);
    }
  }
  EXPECT_EQ(c.special_slot(0).page, pinned0.page);  // the pinned frames' specials never move
  EXPECT_LE(c.special_pages_allocated(), 8);
  int reused = 0;
  for (int n : seen_as_page) reused += n > 1;
  EXPECT_GT(reused, 0);
  // The kept frames' specials are where write_frame put them (data never moved).
  const int64_t stored = c.stats().frames_stored;
  for (int64_t f = stored - 5; f < stored; ++f) {
    const auto where = c.special_slot(f);
    const auto* page = static_cast<const float*>(c.special_page(1, where.page));
    EXPECT_EQ(page[where.slot * row], static_cast<float>(f * 1000)) << "frame " << f;
  }
  try {
    c.special_slot(2);  // frame 2: first unpinned frame, long dropped
    ADD_FAILURE() << "special_slot of a dropped frame did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "special_slot: the specials of frame 2 were dropped (max_special_frames = 3)");
  }
  // Deferred append taking a recycled page, then rollback: exact prior state, nothing allocated.
  const PagedCacheState before = c.state();
  ASSERT_FALSE(before.special_free.empty());
  c.append_frame(PagedKVCache::Eviction::Deferred);
  EXPECT_EQ(alloc.bytes_allocated(), warm_bytes);
  c.check_invariants();
  c.rollback_last_frame();
  EXPECT_EQ(c.state(), before);
  // ... and committed, the same as an immediate append.
  PagedKVCache d(o, alloc);
  bench::bookkeeping_step(d, FrameMode::ScalePhase, 2);
  for (int64_t i = 2; i < stored; ++i) d.append_frame();
  EXPECT_EQ(d.state(), c.state());
  c.append_frame(PagedKVCache::Eviction::Deferred);
  c.execute_deferred_eviction();
  d.append_frame();
  EXPECT_EQ(d.state(), c.state());
}

// reset(): both backends return to empty keeping their memory; replaying a run allocates nothing.
TEST(KVCacheLifecycle, ResetKeepsMemoryAndAllocatesNothing) {
  for (KVBackend backend : {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull}) {
    SCOPED_TRACE(kv_backend_name(backend));
    HostAllocator alloc;
    auto c = make_kv_cache(backend, options(20, 6, 2, 3), alloc);
    auto run = [&] {
      bench::bookkeeping_step(*c, FrameMode::ScalePhase, 2);
      for (int i = 0; i < 30; ++i) bench::bookkeeping_step(*c, i % 4 == 3 ? FrameMode::NonKeyframe : FrameMode::Keyframe, 1);
    };
    run();
    const CacheStats full = c->stats();
    const uint64_t count = alloc.allocation_count();
    c->reset();
    const CacheStats empty = c->stats();
    EXPECT_EQ(empty.frames_stored, 0);
    EXPECT_EQ(empty.frames_resident, 0);
    EXPECT_EQ(empty.special_tokens, 0);
    EXPECT_EQ(empty.visible_tokens, 0);
    EXPECT_EQ(empty.bytes_used, 0);
    EXPECT_EQ(empty.bytes_reserved, full.bytes_reserved);
    run();
    EXPECT_EQ(alloc.allocation_count(), count);
    const CacheStats again = c->stats();
    EXPECT_EQ(again.frames_stored, full.frames_stored);
    EXPECT_EQ(again.visible_tokens, full.visible_tokens);
    EXPECT_EQ(again.bytes_used, full.bytes_used);
    EXPECT_EQ(again.bytes_reserved, full.bytes_reserved);
  }
}

}  // namespace
