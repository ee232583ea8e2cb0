// Bad input gets a lingbot::Error with an exact message, and leaves the cache unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv_test_util.h"
#include "kvcache/dense_kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "bench/harness/kv_bookkeeping.h"
#include "test_errors.h"

using namespace lingbot;

namespace {

using lingbot_test::expect_error;

CacheOptions small_options() {
  CacheOptions o;
  o.num_blocks = 2;
  o.heads = 2;
  o.head_dim = 8;
  o.tokens_per_frame = 10;
  o.num_special_tokens = 6;
  o.scale_frames = 2;
  o.sliding_window = 2;
  return o;
}

TEST(KVCacheErrors, Options) {
  HostAllocator alloc;
  struct Case {
    std::function<void(CacheOptions&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](CacheOptions& o) { o.num_blocks = 0; }, "CacheOptions.num_blocks must be >= 1, got 0"},
      {[](CacheOptions& o) { o.heads = -1; }, "CacheOptions.heads must be >= 1, got -1"},
      {[](CacheOptions& o) { o.head_dim = 0; }, "CacheOptions.head_dim must be >= 1, got 0"},
      {[](CacheOptions& o) { o.num_special_tokens = 0; }, "CacheOptions.num_special_tokens must be >= 1, got 0"},
      {[](CacheOptions& o) { o.tokens_per_frame = 6; },
       "CacheOptions.tokens_per_frame must be > num_special_tokens (6), got 6"},
      {[](CacheOptions& o) { o.tokens_per_frame = 0; },
       "CacheOptions.tokens_per_frame must be > num_special_tokens (6), got 0"},
      {[](CacheOptions& o) { o.scale_frames = -2; }, "CacheOptions.scale_frames must be >= 0, got -2"},
      {[](CacheOptions& o) { o.sliding_window = 0; }, "CacheOptions.sliding_window must be >= 1, got 0"},
      {[](CacheOptions& o) { o.max_special_tokens = -1; },
       "CacheOptions.max_special_tokens must be >= 0 (0 = unlimited), got -1"},
      {[](CacheOptions& o) { o.max_special_frames = -2; },
       "CacheOptions.max_special_frames must be >= 0 (0 = keep all), got -2"},
  };
  for (KVBackend b : {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull})
    for (const auto& c : cases) {
      CacheOptions o = small_options();
      c.edit(o);
      expect_error([&] { make_kv_cache(b, o, alloc); }, c.message);
    }
  EXPECT_EQ(alloc.bytes_allocated(), 0u);
  expect_error([] { parse_kv_backend("flash"); }, "unknown KV backend 'flash' (expected paged, dense or dense-full)");
  EXPECT_EQ(parse_kv_backend("dense-full"), KVBackend::DenseFull);
  EXPECT_EQ(parse_kv_backend(kv_backend_name(KVBackend::Paged)), KVBackend::Paged);
  EXPECT_STREQ(kv_backend_name(KVBackend::Dense), "dense");
}

TEST(KVCacheErrors, StepProtocolAndShapes) {
  for (KVBackend backend : {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull}) {
    SCOPED_TRACE(kv_backend_name(backend));
    HostAllocator alloc;
    const CacheOptions o = small_options();
    auto c = make_kv_cache(backend, o, alloc);
    const int64_t row = 16;
    std::vector<float> q(40 * row), k(40 * row), v(40 * row), out(40 * row);
    const kernels::KVSpan kv1{k.data(), v.data(), DType::F32, 10, row};

    expect_error([&] { c->store(0, kv1); }, "store: no step in progress (call begin_step first)");
    expect_error([&] { c->end_step(); }, "end_step: no step in progress");
    expect_error([&] { c->keys_in_step(); }, "keys_in_step: no step in progress");
    expect_error([&] { c->begin_step(FrameMode::Keyframe, 2); }, "begin_step: Keyframe takes n_frames = 1, got 2");
    expect_error([&] { c->begin_step(FrameMode::NonKeyframe, 0); }, "begin_step: NonKeyframe takes n_frames = 1, got 0");
    expect_error([&] { c->begin_step(FrameMode::ScalePhase, 3); },
                 "begin_step: ScalePhase n_frames must be in [1, scale_frames = 2], got 3");
    expect_error([&] { c->begin_step(FrameMode::ScalePhase, 0); },
                 "begin_step: ScalePhase n_frames must be in [1, scale_frames = 2], got 0");

    c->begin_step(FrameMode::ScalePhase, 2);
    expect_error([&] { c->begin_step(FrameMode::Keyframe, 1); },
                 "begin_step: the previous ScalePhase step was not ended (call end_step first)");
    const kernels::KVSpan kv2{k.data(), v.data(), DType::F32, 20, row};
    expect_error([&] { c->store(2, kv2); }, "store: block 2 out of range [0, 2)");
    expect_error([&] { c->store(-1, kv2); }, "store: block -1 out of range [0, 2)");
    expect_error([&] { c->store(0, kv1); }, "store: kv has 10 tokens, expected 20 (n_frames 2 x tokens_per_frame 10)");
    expect_error([&] { c->store(0, {k.data(), v.data(), DType::BF16, 20, row}); }, "store: kv dtype bf16 must be f32");
    expect_error([&] { c->store(0, {k.data(), nullptr, DType::F32, 20, row}); }, "store: null k or v pointer");
    expect_error([&] { c->store(0, {k.data(), v.data(), DType::F32, 20, 8}); },
                 "store: kv token_stride 8 < heads*head_dim 16");
    // The keys a store hands out carry the cache's geometry; the kernel checks the queries against it.
    const kernels::VisibleKV keys = c->store(1, kv2);
    const kernels::AttentionParams params{1.0f, 1};
    expect_error([&] { kernels::attention({q.data(), 20, 4, 4, row}, keys, out.data(), params); },
                 "attention: query heads 4 != key heads 2");
    expect_error([&] { kernels::attention({q.data(), 20, 2, 4, row}, keys, out.data(), params); },
                 "attention: query head_dim 4 != key head_dim 8");
    kernels::attention({q.data(), 20, 2, 8, row}, keys, out.data(), params);
    expect_error([&] { c->store(1, kv2); }, "store: block 1 was already stored in this ScalePhase step");
    expect_error([&] { c->end_step(); },
                 "end_step: block 0 was not stored in this ScalePhase step (its K/V would be missing)");
    kvtest::attend(*c, 0, {q.data(), 20, 2, 8, row}, kv2, out.data());
    c->end_step();
    expect_error([&] { c->begin_step(FrameMode::ScalePhase, 1); },
                 "begin_step: ScalePhase needs an empty cache, but 2 frames are stored (call reset() first)");
    c->reset();
    c->begin_step(FrameMode::ScalePhase, 1);  // allowed again after reset
    c->reset();                               // reset also abandons an open step
    EXPECT_EQ(c->stats().frames_stored, 0);
  }
}

TEST(KVCacheErrors, SpecialCapIsCheckedBeforeAnythingChanges) {
  HostAllocator alloc;
  CacheOptions o = small_options();
  o.max_special_tokens = 24;  // paged: specials of 4 stored frames
  PagedKVCache paged(o, alloc);
  bench::bookkeeping_step(paged, FrameMode::ScalePhase, 2);
  bench::bookkeeping_step(paged, FrameMode::Keyframe, 1);
  bench::bookkeeping_step(paged, FrameMode::Keyframe, 1);
  bench::bookkeeping_step(paged, FrameMode::NonKeyframe, 1);  // not stored: no special tokens
  const PagedCacheState before = paged.state();
  const size_t bytes = alloc.bytes_allocated();
  const std::string msg =
      "special stream would hold 30 tokens per block, over max_special_tokens = 24 (raise "
      "max_special_tokens, or set it to 0 for unlimited)";
  expect_error([&] { paged.begin_step(FrameMode::Keyframe, 1); }, msg);
  expect_error([&] { paged.append_frame(); }, msg);
  EXPECT_EQ(paged.state(), before);
  EXPECT_EQ(alloc.bytes_allocated(), bytes);
  paged.begin_step(FrameMode::NonKeyframe, 1);  // still usable
  paged.end_step();

  // Dense: the cap bounds the side buffer of kept specials (6 per evicted frame).
  o.max_special_tokens = 6;
  DenseKVCache dense(o, alloc, KVBackend::Dense);
  bench::bookkeeping_step(dense, FrameMode::ScalePhase, 2);
  bench::bookkeeping_step(dense, FrameMode::Keyframe, 1);
  bench::bookkeeping_step(dense, FrameMode::Keyframe, 1);
  bench::bookkeeping_step(dense, FrameMode::Keyframe, 1);  // evicts frame 2: 6 kept specials
  const CacheStats ds = dense.stats();
  expect_error([&] { dense.begin_step(FrameMode::Keyframe, 1); },
               "special stream would hold 12 tokens per block, over max_special_tokens = 6 (raise "
               "max_special_tokens, or set it to 0 for unlimited)");
  EXPECT_EQ(dense.stats().frames_stored, ds.frames_stored);
  EXPECT_EQ(dense.stats().bytes_reserved, ds.bytes_reserved);
}

// With max_special_frames the cap is checked against the stream after the frame's own eviction:
// 2 pinned + 3 window + 2 kept evicted frames hold (2 + 3 + 2) * 6 = 42 special tokens, and an
// immediate append or a Keyframe step (which evict the oldest window frame and drop its oldest kept
// specials) stays at 42 forever. Counting before that eviction would see 48 and refuse at frame 8.
// A Deferred step postpones its eviction, so it really holds 48 until committed: refused.
TEST(KVCacheErrors, SpecialCapCountsTheStepsOwnEviction) {
  HostAllocator alloc;
  CacheOptions o = small_options();
  o.include_scale_frames = true;
  o.scale_frames = 2;
  o.sliding_window = 3;
  o.max_special_frames = 2;
  o.num_special_tokens = 6;
  o.max_special_tokens = (2 + 3 + 2) * 6;
  PagedKVCache appended(o, alloc);
  for (int64_t n = 1; n <= 40; ++n) {
    ASSERT_NO_THROW(appended.append_frame()) << "frame " << n;
    EXPECT_EQ(appended.stats().special_tokens, std::min<int64_t>(n, 7) * 6) << "frame " << n;
  }
  EXPECT_EQ(appended.stats().special_frames_dropped, 40 - 7);

  PagedKVCache stepped(o, alloc);
  bench::bookkeeping_step(stepped, FrameMode::ScalePhase, 2);
  for (int i = 0; i < 38; ++i) {
    ASSERT_NO_THROW(bench::bookkeeping_step(stepped, FrameMode::Keyframe, 1)) << "keyframe " << i;
    ASSERT_NO_THROW(bench::bookkeeping_step(stepped, FrameMode::NonKeyframe, 1)) << "keyframe " << i;
  }
  EXPECT_EQ(stepped.stats().frames_stored, 40);
  EXPECT_EQ(stepped.stats().special_tokens, 42);
  EXPECT_EQ(stepped.state(), appended.state());
  const PagedCacheState before = stepped.state();
  expect_error([&] { stepped.begin_step(FrameMode::Deferred, 1); },
               "special stream would hold 48 tokens per block, over max_special_tokens = 42 (raise "
               "max_special_tokens, or set it to 0 for unlimited)");
  EXPECT_EQ(stepped.state(), before);
}

TEST(KVCacheErrors, LowLevelPagedOperations) {
  HostAllocator alloc;
  const CacheOptions o = small_options();
  PagedKVCache c(o, alloc);
  expect_error([&] { c.rollback_last_frame(); },
               "rollback_last_frame: nothing to roll back (no frame appended with deferred eviction pending)");
  expect_error([&] { c.execute_deferred_eviction(); },
               "execute_deferred_eviction: no append_frame(Eviction::Deferred) is pending");
  c.append_frame();
  expect_error([&] { c.rollback_last_frame(); },
               "rollback_last_frame: nothing to roll back (no frame appended with deferred eviction pending)");
  c.append_frame(PagedKVCache::Eviction::Deferred);
  expect_error([&] { c.append_frame(); },
               "append_frame: a deferred eviction is pending (call execute_deferred_eviction or rollback_last_frame)");
  expect_error([&] { c.begin_step(FrameMode::Keyframe, 1); },
               "begin_step: a deferred eviction is pending (call execute_deferred_eviction or rollback_last_frame)");
  c.rollback_last_frame();
  c.begin_step(FrameMode::Keyframe, 1);
  expect_error([&] { c.append_frame(); }, "append_frame: a Keyframe step is in progress (call end_step first)");
  expect_error([&] { c.evict(); }, "evict: a Keyframe step is in progress (call end_step first)");
  expect_error([&] { c.rollback_last_frame(); },
               "rollback_last_frame: a Keyframe step is in progress (call end_step first)");
  c.reset();
  for (int i = 0; i < 5; ++i) c.append_frame();  // pinned 0,1; evicted 2; window 3,4
  std::vector<float> k(10 * 16), v(10 * 16);
  expect_error([&] { c.write_frame(0, 2, {k.data(), v.data(), DType::F32, 10, 16}); },
               "write_frame: frame 2 is not resident (resident: pinned [0, 2), window [3, 5))");
  expect_error([&] { c.write_frame(0, 3, {k.data(), v.data(), DType::F32, 9, 16}); },
               "write_frame: kv has 9 tokens, expected 10");
  expect_error([&] { c.write_frame(3, 3, {k.data(), v.data(), DType::F32, 10, 16}); },
               "write_frame: block 3 out of range [0, 2)");
  c.write_frame(1, 4, {k.data(), v.data(), DType::F32, 10, 16});
}

// mark_block_written (a device cache writing the pools itself, bookkeeping-only studies): same step
// rules as store() in every backend, and a step closed through it leaves the same bookkeeping as a
// step whose blocks were really stored, scale-phase eviction included.
TEST(KVCacheErrors, MarkBlockWrittenFollowsTheStepProtocol) {
  for (KVBackend backend : {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull}) {
    SCOPED_TRACE(kv_backend_name(backend));
    HostAllocator alloc;
    CacheOptions o = small_options();
    o.include_scale_frames = false;
    o.scale_frames = 3;  // scale phase larger than the window: evicted in end_step
    auto c = make_kv_cache(backend, o, alloc), ref = make_kv_cache(backend, o, alloc);
    const int64_t row = 16;
    std::vector<float> k(30 * row, 0.5f), v(30 * row, 0.25f);
    expect_error([&] { c->mark_block_written(0); }, "mark_block_written: no ScalePhase, Keyframe or Deferred step in progress");
    c->begin_step(FrameMode::ScalePhase, 3);
    expect_error([&] { c->mark_block_written(2); }, "mark_block_written: block 2 out of range [0, 2)");
    c->mark_block_written(0);
    expect_error([&] { c->mark_block_written(0); },
                 "mark_block_written: block 0 was already written in this ScalePhase step");
    expect_error([&] { c->store(0, {k.data(), v.data(), DType::F32, 30, row}); },
                 "store: block 0 was already stored in this ScalePhase step");
    expect_error([&] { c->end_step(); },
                 "end_step: block 1 was not stored in this ScalePhase step (its K/V would be missing)");
    c->mark_block_written(1);
    c->end_step();
    ref->begin_step(FrameMode::ScalePhase, 3);
    for (int b = 0; b < o.num_blocks; ++b) ref->store(b, {k.data(), v.data(), DType::F32, 30, row});
    ref->end_step();
    auto same_bookkeeping = [&] {
      const CacheStats a = c->stats(), r = ref->stats();
      EXPECT_EQ(a.frames_stored, r.frames_stored);
      EXPECT_EQ(a.frames_resident, r.frames_resident);
      EXPECT_EQ(a.window_pages, r.window_pages);
      EXPECT_EQ(a.special_tokens, r.special_tokens);
      EXPECT_EQ(a.visible_tokens, r.visible_tokens);
      EXPECT_EQ(a.bytes_reserved, r.bytes_reserved);
      if (backend == KVBackend::Paged) {
        EXPECT_TRUE(dynamic_cast<PagedKVCache&>(*c).state() == dynamic_cast<PagedKVCache&>(*ref).state());
      }
    };
    same_bookkeeping();
    EXPECT_EQ(c->stats().frames_resident, backend == KVBackend::DenseFull ? 3 : 2);  // window 2
    c->begin_step(FrameMode::NonKeyframe, 1);
    expect_error([&] { c->mark_block_written(0); }, "mark_block_written: no ScalePhase, Keyframe or Deferred step in progress");
    c->end_step();
    bench::bookkeeping_step(*c, FrameMode::Keyframe, 1);
    ref->begin_step(FrameMode::Keyframe, 1);
    for (int b = 0; b < o.num_blocks; ++b) ref->store(b, {k.data(), v.data(), DType::F32, 10, row});
    ref->end_step();
    same_bookkeeping();
    if (backend == KVBackend::Paged) dynamic_cast<PagedKVCache&>(*c).check_invariants();
  }
}

}  // namespace
