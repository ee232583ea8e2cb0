// Cache traces of the three golden scenarios (golden README table "aggregator-cache frames after each
// step", "retained special tokens after each step", "keys attended by global block 0 in each step",
// and case.json reference.cache_trace), reproduced by the paged and dense backends; plus the
// 10,000-frame real-shape memory run.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "kv_test_util.h"
#include "kvcache/kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "bench/harness/kv_bookkeeping.h"

using namespace lingbot;
using namespace kvtest;

namespace {

struct GoldenCase {
  const char* name;
  int scale_frames, window, num_frames, tokens_per_frame, keyframe_interval;
  std::vector<int64_t> frames_after, kept_specials_after, visible_after, keys_attended;
};

// Hard-coded from /work/shared/golden/README.md ("Cases" table) and each case.json's
// reference.cache_trace (kv_cache_frames_after_step, kv_cache_special_tokens_after_step,
// kv_cache_visible_tokens_after_step, keys_attended_per_step).
const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = {
      {"tiny", 2, 3, 10, 46, 1,
       {2, 3, 4, 5, 5, 5, 5, 5, 5},
       {0, 0, 0, 0, 6, 12, 18, 24, 30},
       {92, 138, 184, 230, 236, 242, 248, 254, 260},
       {92, 138, 184, 230, 236, 242, 248, 254, 260}},
      {"tiny-keyframes", 2, 3, 12, 46, 2,
       {2, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5},
       {0, 0, 0, 0, 0, 0, 0, 6, 6, 12, 12},
       {92, 138, 138, 184, 184, 230, 230, 236, 236, 242, 242},
       {92, 138, 184, 184, 230, 230, 276, 236, 282, 242, 288}},
      {"small-d24", 3, 2, 8, 51, 1,
       {3, 4, 5, 5, 5, 5},
       {0, 0, 0, 6, 12, 18},
       {153, 204, 255, 261, 267, 273},
       {153, 204, 255, 261, 267, 273}},
  };
  return cases;
}

// Runs a golden scenario with real (random) K/V through attend() and records the trace.
void run_golden(KVBackend backend, const GoldenCase& gc) {
  SCOPED_TRACE(::testing::Message() << gc.name << " / " << kv_backend_name(backend));
  CacheOptions o;
  o.num_blocks = 2;
  o.heads = 2;
  o.head_dim = 8;
  o.tokens_per_frame = gc.tokens_per_frame;
  o.num_special_tokens = 6;
  o.scale_frames = gc.scale_frames;
  o.sliding_window = gc.window;
  HostAllocator alloc;
  auto cache = make_kv_cache(backend, o, alloc);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<int64_t> frames, kept, visible, keys;
  const int64_t row = int64_t{o.heads} * o.head_dim;
  auto step = [&](FrameMode mode, int n) {
    cache->begin_step(mode, n);
    keys.push_back(cache->keys_in_step());
    const int nt = n * o.tokens_per_frame;
    std::vector<float> q(nt * row), k(nt * row), v(nt * row), out(nt * row);
    for (int b = 0; b < o.num_blocks; ++b) {
      for (auto* x : {&q, &k, &v})
        for (auto& e : *x) e = nd(rng);
      kvtest::attend(*cache, b, {q.data(), nt, o.heads, o.head_dim, row}, {k.data(), v.data(), DType::F32, nt, row},
                    out.data());
    }
    cache->end_step();
    const CacheStats s = cache->stats();
    frames.push_back(s.frames_resident);
    kept.push_back(s.kept_special_tokens);
    visible.push_back(s.visible_tokens);
  };
  step(FrameMode::ScalePhase, gc.scale_frames);
  for (int i = gc.scale_frames; i < gc.num_frames; ++i)
    step((i - gc.scale_frames) % gc.keyframe_interval == 0 ? FrameMode::Keyframe : FrameMode::NonKeyframe, 1);
  EXPECT_EQ(frames, gc.frames_after);
  EXPECT_EQ(kept, gc.kept_specials_after);
  EXPECT_EQ(visible, gc.visible_after);
  EXPECT_EQ(keys, gc.keys_attended);
  if (backend == KVBackend::Paged) {
    // upstream_paged's view of the same run: the special stream holds 6 tokens of every stored frame.
    EXPECT_EQ(cache->stats().special_tokens, 6 * cache->stats().frames_stored);
  }
}

TEST(KVCacheGoldenTrace, PagedMatchesReferenceTrace) {
  for (const auto& gc : golden_cases()) run_golden(KVBackend::Paged, gc);
}

TEST(KVCacheGoldenTrace, DenseMatchesReferenceTrace) {
  for (const auto& gc : golden_cases()) run_golden(KVBackend::Dense, gc);
}

TEST(KVCacheGoldenTrace, DenseFullNeverEvicts) {
  CacheOptions o;
  o.num_blocks = 1;
  o.heads = 1;
  o.head_dim = 8;
  o.tokens_per_frame = 46;
  o.scale_frames = 2;
  o.sliding_window = 3;
  HostAllocator alloc;
  auto cache = make_kv_cache(KVBackend::DenseFull, o, alloc);
  bench::bookkeeping_step(*cache, FrameMode::ScalePhase, 2);
  for (int i = 2; i < 12; ++i) {
    bench::bookkeeping_step(*cache, i % 2 ? FrameMode::NonKeyframe : FrameMode::Keyframe, 1);
    const CacheStats s = cache->stats();
    EXPECT_EQ(s.frames_resident, s.frames_stored);
    EXPECT_EQ(s.visible_tokens, 46 * s.frames_stored);
    EXPECT_EQ(s.special_tokens, 0);
  }
  EXPECT_EQ(cache->stats().frames_stored, 7);
}

// 10,000 frames at the release shape (24 blocks, 16 heads x 64, 999 + 6 tokens, window 64, scale 8,
// bf16), bookkeeping only (no K/V written; LazyAllocator never touches the pages). Reserved patch
// memory never changes (the pool is allocated at construction, 8 + 64 + 1 pages per block) and
// the special stream grows by exactly 6 tokens per frame per block.
TEST(KVCacheLongRun, TenThousandFramesRealShapeBoundedPatchMemory) {
  CacheOptions o;
  o.num_blocks = 24;
  o.heads = 16;
  o.head_dim = 64;
  o.tokens_per_frame = 1005;
  o.num_special_tokens = 6;
  o.sliding_window = 64;
  o.scale_frames = 8;
  o.dtype = DType::BF16;
  LazyAllocator alloc;
  PagedKVCache cache(o, alloc);
  const int64_t page_bytes = int64_t{2} * 999 * 16 * 64 * 2;
  ASSERT_EQ(cache.page_size(), 999);
  ASSERT_EQ(static_cast<int64_t>(cache.page_bytes()), page_bytes);
  ASSERT_EQ(cache.pool_pages(), 73);
  const int64_t patch_reserved = cache.stats().patch_bytes_reserved;
  ASSERT_EQ(patch_reserved, 24 * 73 * page_bytes);

  bench::bookkeeping_step(cache, FrameMode::ScalePhase, 8);
  CacheStats prev = cache.stats();
  CacheStats at72{};
  for (int frame = 8; frame < 10000; ++frame) {
    bench::bookkeeping_step(cache, FrameMode::Keyframe, 1);
    const CacheStats s = cache.stats();
    ASSERT_EQ(s.frames_stored, frame + 1);
    ASSERT_EQ(s.special_tokens - prev.special_tokens, 6) << "frame " << frame;
    ASSERT_EQ(s.special_tokens, 6 * s.frames_stored);
    ASSERT_EQ(s.patch_bytes_reserved, patch_reserved);
    ASSERT_EQ(s.pinned_pages + s.window_pages + s.free_pages, s.pool_pages);
    ASSERT_EQ(s.special_bytes_reserved, 24 * page_bytes * s.special_pages);
    ASSERT_EQ(s.special_pages, (s.frames_stored + 165) / 166);  // 166 frames' specials per page
    ASSERT_EQ(static_cast<size_t>(s.bytes_reserved), alloc.bytes_allocated());
    if (frame + 1 >= 72) {
      ASSERT_EQ(s.frames_resident, 72);
      ASSERT_EQ(s.pinned_pages, 8);
      ASSERT_EQ(s.window_pages, 64);
      ASSERT_EQ(s.free_pages, 1);
    }
    if (frame + 1 == 72) at72 = s;
    prev = s;
  }
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.special_tokens, 60000);
  EXPECT_EQ(s.kept_special_tokens, 6 * (10000 - 72));
  EXPECT_EQ(s.visible_tokens, 72 * 1005 + 6 * (10000 - 72));
  EXPECT_EQ(s.bytes_used, int64_t{24} * 16 * 64 * 2 * 2 * (72 * 999 + 60000));
  std::printf("[ info ] 10,000 frames, 24 blocks, bf16: patch pool reserved %.3f GiB (constant), special stream "
              "%lld pages = %.3f GiB reserved (%.3f GiB at frame 72), used %.3f GiB, total reserved %.3f GiB\n",
              patch_reserved / 1073741824.0, static_cast<long long>(s.special_pages),
              s.special_bytes_reserved / 1073741824.0, at72.special_bytes_reserved / 1073741824.0,
              s.bytes_used / 1073741824.0, s.bytes_reserved / 1073741824.0);
}

}  // namespace
