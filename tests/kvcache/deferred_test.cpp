// Deferred frames (flow keyframes, golden README "Windowed mode and flow keyframes" F3) on every
// backend, over randomized flag combinations and decision sequences:
//   * a Deferred step attends to exactly what a NonKeyframe step on the same cache attends to
//     (same key count; outputs equal to |a - b| <= 1e-5 * max(1, |b|), only the order of the keys
//     differs on the paged backend);
//   * rollback_deferred() leaves the cache exactly as before the step: live K/V bytes of every block
//     (hash), stats, and for the paged backend the whole bookkeeping state (pages, free-list order,
//     special pages);
//   * commit_deferred() leaves it exactly as a Keyframe step with the same K/V would have.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "core/error.h"
#include "kv_test_util.h"
#include "kvcache/dense_kv_cache.h"
#include "kvcache/paged_kv_cache.h"

using namespace lingbot;
using namespace kvtest;

namespace {

struct Frame {
  std::vector<std::vector<float>> q, k, v;  // [block][n_tokens * row]
};

Frame random_frames(const CacheOptions& o, int n_frames, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = int64_t{n_frames} * o.tokens_per_frame * o.heads * o.head_dim;
  Frame f;
  for (auto* t : {&f.q, &f.k, &f.v}) {
    t->resize(o.num_blocks);
    for (auto& b : *t) {
      b.resize(static_cast<size_t>(n));
      for (float& x : b) x = nd(rng);
    }
  }
  return f;
}

std::vector<std::vector<float>> run_step(KVCache& c, FrameMode mode, int n_frames, const Frame& f,
                                         int64_t* keys = nullptr) {
  const CacheOptions& o = c.options();
  const int nt = n_frames * o.tokens_per_frame;
  const int64_t row = int64_t{o.heads} * o.head_dim;
  std::vector<std::vector<float>> out(o.num_blocks, std::vector<float>(static_cast<size_t>(nt * row)));
  c.begin_step(mode, n_frames);
  if (keys) *keys = c.keys_in_step();
  for (int b = 0; b < o.num_blocks; ++b) {
    const kernels::QueryView q{f.q[b].data(), nt, o.heads, o.head_dim, row};
    const kernels::KVSpan kv{f.k[b].data(), f.v[b].data(), DType::F32, nt, row};
    kvtest::attend(c, b, q, kv, out[b].data());
  }
  c.end_step();
  return out;
}

std::vector<unsigned char> live(const KVCache& c, int block) {
  if (const auto* p = dynamic_cast<const PagedKVCache*>(&c)) return p->live_bytes(block);
  return dynamic_cast<const DenseKVCache&>(c).live_bytes(block);
}

// Everything that defines the cache's state: live bytes of every block, occupancy, paged bookkeeping.
struct Fingerprint {
  std::vector<uint64_t> blocks;
  int64_t stored = 0, resident = 0, special = 0, kept = 0, visible = 0, bytes_used = 0;
  std::optional<PagedCacheState> paged;
  bool operator==(const Fingerprint&) const = default;
};

Fingerprint fingerprint(const KVCache& c) {
  Fingerprint f;
  for (int b = 0; b < c.options().num_blocks; ++b) {
    const auto bytes = live(c, b);
    f.blocks.push_back(fnv1a(bytes.data(), bytes.size()));
  }
  const CacheStats s = c.stats();
  f.stored = s.frames_stored;
  f.resident = s.frames_resident;
  f.special = s.special_tokens;
  f.kept = s.kept_special_tokens;
  f.visible = s.visible_tokens;
  f.bytes_used = s.bytes_used;
  if (const auto* p = dynamic_cast<const PagedKVCache*>(&c)) f.paged = p->state();
  return f;
}

void expect_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t blk = 0; blk < a.size(); ++blk)
    for (size_t i = 0; i < a[blk].size(); ++i)
      worst = std::max(worst, std::abs(double(a[blk][i]) - b[blk][i]) / std::max(1.0, std::abs(double(b[blk][i]))));
  EXPECT_LE(worst, 1e-5);
}

}  // namespace

TEST(DeferredFrames, RollbackRestoresAndCommitEqualsKeyframeOnEveryBackend) {
  std::mt19937 rng(1234);
  HostAllocator alloc;
  int rollbacks = 0, commits = 0;
  for (int config = 0; config < 24; ++config) {
    CacheOptions o;
    o.cross_frame_special = config & 1;
    o.camera_only = (config >> 1) & 1;
    o.include_scale_frames = (config >> 2) & 1;
    o.dtype = static_cast<DType>(config % 3);
    o.num_blocks = 2;
    o.heads = 2;
    o.head_dim = 8;
    o.num_special_tokens = 3;
    o.tokens_per_frame = 3 + 1 + config % 5;
    o.sliding_window = 1 + config % 3;
    o.scale_frames = 1 + (config / 3) % 3;
    for (KVBackend backend : {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull}) {
      SCOPED_TRACE(std::string(kv_backend_name(backend)) + " config " + std::to_string(config));
      auto main = make_kv_cache(backend, o, alloc);
      auto twin = make_kv_cache(backend, o, alloc);
      const Frame scale = random_frames(o, o.scale_frames, rng);
      run_step(*main, FrameMode::ScalePhase, o.scale_frames, scale);
      run_step(*twin, FrameMode::ScalePhase, o.scale_frames, scale);
      for (int step = 0; step < 14; ++step) {
        const Frame f = random_frames(o, 1, rng);
        const bool keep = std::bernoulli_distribution(0.5)(rng);
        const Fingerprint before = fingerprint(*main);
        ASSERT_EQ(before, fingerprint(*twin));
        int64_t deferred_keys = 0, nonkey_keys = 0;
        const auto deferred_out = run_step(*main, FrameMode::Deferred, 1, f, &deferred_keys);
        EXPECT_TRUE(main->deferred_pending());
        const auto nonkey_out = run_step(*twin, FrameMode::NonKeyframe, 1, f, &nonkey_keys);
        EXPECT_EQ(deferred_keys, nonkey_keys);
        expect_close(deferred_out, nonkey_out);
        if (keep) {
          main->commit_deferred();
          run_step(*twin, FrameMode::Keyframe, 1, f);
          EXPECT_EQ(fingerprint(*main), fingerprint(*twin));
          ++commits;
        } else {
          main->rollback_deferred();
          EXPECT_EQ(fingerprint(*main), before);
          ++rollbacks;
        }
        EXPECT_FALSE(main->deferred_pending());
        if (const auto* p = dynamic_cast<const PagedKVCache*>(main.get())) p->check_invariants();
      }
    }
  }
  EXPECT_GT(rollbacks, 100);
  EXPECT_GT(commits, 100);
}

TEST(DeferredFrames, ProtocolErrorsNameTheCall) {
  HostAllocator alloc;
  CacheOptions o;
  o.num_blocks = 1;
  o.heads = 1;
  o.head_dim = 8;
  o.num_special_tokens = 2;
  o.tokens_per_frame = 4;
  o.scale_frames = 1;
  o.sliding_window = 1;
  std::mt19937 rng(7);
  for (KVBackend backend : {KVBackend::Paged, KVBackend::Dense}) {
    auto c = make_kv_cache(backend, o, alloc);
    run_step(*c, FrameMode::ScalePhase, 1, random_frames(o, 1, rng));
    const bool paged = backend == KVBackend::Paged;
    try {
      c->commit_deferred();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), paged ? "execute_deferred_eviction: no append_frame(Eviction::Deferred) is pending"
                                             : "commit_deferred: no Deferred frame is pending");
    }
    run_step(*c, FrameMode::Deferred, 1, random_frames(o, 1, rng));
    try {
      c->begin_step(FrameMode::Keyframe, 1);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                paged ? "begin_step: a deferred eviction is pending (call execute_deferred_eviction or rollback_last_frame)"
                      : "begin_step: a deferred frame is pending (call commit_deferred or rollback_deferred)");
    }
    c->rollback_deferred();
    EXPECT_NO_THROW(run_step(*c, FrameMode::Keyframe, 1, random_frames(o, 1, rng)));
  }
}

// reset() while a Deferred frame is pending: the pending flag goes too, so the cache is a fresh one
// (paged: the same bookkeeping state as a newly built cache, its special pages kept free) and a new
// sequence starts with its scale phase instead of failing on a stale "deferred pending".
TEST(DeferredFrames, ResetWhileDeferredPendingStartsFresh) {
  HostAllocator alloc;
  CacheOptions o;
  o.num_blocks = 2;
  o.heads = 1;
  o.head_dim = 8;
  o.num_special_tokens = 2;
  o.tokens_per_frame = 5;
  o.scale_frames = 2;
  o.sliding_window = 1;
  o.include_scale_frames = true;
  std::mt19937 rng(99);
  for (KVBackend backend : {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull}) {
    SCOPED_TRACE(kv_backend_name(backend));
    auto c = make_kv_cache(backend, o, alloc);
    run_step(*c, FrameMode::ScalePhase, o.scale_frames, random_frames(o, o.scale_frames, rng));
    run_step(*c, FrameMode::Deferred, 1, random_frames(o, 1, rng));
    ASSERT_TRUE(c->deferred_pending());
    c->reset();
    EXPECT_FALSE(c->deferred_pending());
    EXPECT_EQ(c->stats().frames_stored, 0);
    if (const auto* p = dynamic_cast<const PagedKVCache*>(c.get())) {
      EXPECT_EQ(p->state(), state_after_reset(o, alloc, p->special_pages_allocated()));
    }
    EXPECT_NO_THROW(run_step(*c, FrameMode::ScalePhase, o.scale_frames, random_frames(o, o.scale_frames, rng)));
    EXPECT_EQ(c->stats().frames_stored, o.scale_frames);
  }
}
