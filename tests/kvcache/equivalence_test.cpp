// Randomized equivalence of the paged, dense and dense-full caches against an independent
// reference (kv_test_util.h: RefCache gathers the visible set from first principles and runs
// double-precision softmax attention), with the cache invariants checked at every step.
//
// Tolerances. All backends store the same values (K/V rounded once to the storage dtype; the
// reference rounds its f32 copies identically, also a non-keyframe's own tokens), so f16/bf16
// storage adds no error between them: only the order of f32 accumulation differs.
//   paged vs dense:   |a - b| <= 1e-5 * max(1, |b|)   (every output element, every dtype)
//   any vs reference: |a - r| <= 2e-5 * max(1, |r|)   (sampled query rows; the kernel's own bound)
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"
#include "kv_test_util.h"
#include "kvcache/dense_kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "bench/harness/kv_bookkeeping.h"

using namespace lingbot;
using namespace kvtest;

namespace {

constexpr double kPairTol = 1e-5;
constexpr double kRefTol = 2e-5;

struct Scenario {
  CacheOptions o;
  int n_scale = 0;            // frames of the scale phase (0: start with keyframes)
  std::vector<FrameMode> modes;  // streamed steps after the scale phase
  int64_t kv_stride_extra = 0;   // extra floats between tokens (like a packed qkv buffer)
  int threads = 1;               // attention kernel threads
};

Scenario random_scenario(std::mt19937& rng, int index) {
  auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  Scenario s;
  CacheOptions& o = s.o;
  // Every flag combination, dtype and rounding choice cycles deterministically with the index.
  o.cross_frame_special = index & 1;
  o.camera_only = (index >> 1) & 1;
  o.include_scale_frames = (index >> 2) & 1;
  o.round_pages_pow2 = (index >> 3) & 1;
  o.dtype = static_cast<DType>((index >> 4) % 3);
  static const int dims[] = {8, 12, 16, 24, 32, 64, 128};
  o.head_dim = dims[uni(0, 6)];
  o.heads = uni(1, std::max(1, std::min(16, 512 / o.head_dim)));
  o.num_blocks = uni(1, 3);
  o.num_special_tokens = uni(1, 6);
  o.tokens_per_frame = o.num_special_tokens + uni(1, 13);
  o.sliding_window = uni(1, 4);
  o.scale_frames = uni(0, 4);
  // The special-stream bound in a third of the configurations (longer streams, so it drops).
  const bool bounded = uni(0, 2) == 0;
  o.max_special_frames = bounded ? uni(1, 4) : 0;
  // One two-thread configuration; thread-count determinism itself is the kernels' test (and
  // OpenMP spin-waits make many small two-thread calls slow on a loaded machine).
  s.threads = index == 5 ? 2 : 1;
  s.n_scale = o.scale_frames > 0 ? uni(1, o.scale_frames) : 0;
  const int steps = bounded ? uni(10, 20) : uni(6, 12);
  const int pattern = uni(0, 2);  // all keyframes, keyframe interval 2..3, random
  const int interval = uni(2, 3);
  for (int i = 0; i < steps; ++i) {
    bool key = pattern == 0 || (pattern == 1 ? i % interval == 0 : uni(0, 1) == 1);
    if (s.n_scale == 0 && i == 0) key = true;
    s.modes.push_back(key ? FrameMode::Keyframe : FrameMode::NonKeyframe);
  }
  s.kv_stride_extra = uni(0, 1) ? 0 : 3;
  return s;
}

uint64_t paged_hash(const PagedKVCache& c) {
  uint64_t h = 0;
  for (int b = 0; b < c.options().num_blocks; ++b) {
    h = fnv1a(c.pool_view(b).data, c.page_bytes() * c.pool_pages(), h ^ b);
    for (int64_t p = 0; p < c.special_pages_allocated(); ++p)
      h = fnv1a(c.special_page(b, static_cast<int>(p)), c.page_bytes(), h);
  }
  return h;
}

uint64_t live_hash(const std::vector<unsigned char>& v) { return fnv1a(v.data(), v.size()); }

struct Counters {
  int configs = 0;
  int steps = 0;
  int rollbacks = 0;
  int dropped_steps = 0;  // steps with specials dropped by max_special_frames
  double max_pair_err = 0;
  double max_ref_err = 0;
};

void check_close(const std::vector<float>& a, const std::vector<float>& b, double tol, double& worst,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i])));
    worst = std::max(worst, e);
    ASSERT_LE(e, tol) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

void run_scenario(const Scenario& sc, std::mt19937& rng, Counters& cnt) {
  const CacheOptions& o = sc.o;
  SCOPED_TRACE(::testing::Message() << "heads " << o.heads << " head_dim " << o.head_dim << " tpf "
                                    << o.tokens_per_frame << " ns " << o.num_special_tokens << " window "
                                    << o.sliding_window << " scale " << o.scale_frames << " n_scale " << sc.n_scale
                                    << " cfs " << o.cross_frame_special << " cam " << o.camera_only << " incl "
                                    << o.include_scale_frames << " pow2 " << o.round_pages_pow2 << " dtype "
                                    << dtype_name(o.dtype) << " blocks " << o.num_blocks << " max_special_frames "
                                    << o.max_special_frames);
  HostAllocator alloc;
  PagedKVCache paged(o, alloc);
  DenseKVCache dense(o, alloc, KVBackend::Dense);
  DenseKVCache full(o, alloc, KVBackend::DenseFull);
  RefCache ref(o, false), ref_full(o, true);
  const int64_t row = int64_t{o.heads} * o.head_dim;
  const int64_t kv_stride = row + sc.kv_stride_extra;
  std::normal_distribution<float> normal(0.f, 1.f);

  std::vector<FrameMode> modes;
  if (sc.n_scale > 0) modes.push_back(FrameMode::ScalePhase);
  modes.insert(modes.end(), sc.modes.begin(), sc.modes.end());

  for (size_t step = 0; step < modes.size(); ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const FrameMode mode = modes[step];
    const int nf = mode == FrameMode::ScalePhase ? sc.n_scale : 1;
    const int nt = nf * o.tokens_per_frame;
    // Per block q [nt, row], k/v [nt, kv_stride].
    std::vector<std::vector<float>> q(o.num_blocks), k(o.num_blocks), v(o.num_blocks);
    for (int b = 0; b < o.num_blocks; ++b) {
      q[b].resize(nt * row);
      k[b].assign(nt * kv_stride, 0.f);
      v[b].assign(nt * kv_stride, 0.f);
      for (auto& x : q[b]) x = 1.5f * normal(rng);
      for (int t = 0; t < nt; ++t)
        for (int64_t e = 0; e < row; ++e) {
          k[b][t * kv_stride + e] = normal(rng);
          v[b][t * kv_stride + e] = normal(rng);
        }
    }
    // Rounded f32 copies for the reference, one RefFrame per frame.
    std::vector<RefFrame> rf(nf);
    for (int f = 0; f < nf; ++f) {
      rf[f].k.resize(o.num_blocks);
      rf[f].v.resize(o.num_blocks);
      for (int b = 0; b < o.num_blocks; ++b)
        for (int t = 0; t < o.tokens_per_frame; ++t)
          for (int64_t e = 0; e < row; ++e) {
            const int64_t src = (int64_t{f} * o.tokens_per_frame + t) * kv_stride + e;
            rf[f].k[b].push_back(round_to(o.dtype, k[b][src]));
            rf[f].v[b].push_back(round_to(o.dtype, v[b][src]));
          }
    }
    const PagedCacheState paged_before = paged.state();
    const uint64_t paged_bytes_before = paged_hash(paged);
    std::vector<uint64_t> dense_before(o.num_blocks), full_before(o.num_blocks);
    for (int b = 0; b < o.num_blocks; ++b) {
      dense_before[b] = live_hash(dense.live_bytes(b));
      full_before[b] = live_hash(full.live_bytes(b));
    }
    const CacheStats dense_stats_before = dense.stats(), full_stats_before = full.stats();

    paged.begin_step(mode, nf);
    dense.begin_step(mode, nf);
    full.begin_step(mode, nf);
    if (mode != FrameMode::NonKeyframe) {
      for (int f = 0; f < nf; ++f) {
        ref.store(rf[f]);
        ref_full.store(rf[f]);
      }
      if (mode == FrameMode::Keyframe) ref.evict();
    }
    const int64_t own = mode == FrameMode::NonKeyframe ? o.tokens_per_frame : 0;
    ASSERT_EQ(paged.keys_in_step(), ref.visible_tokens() + own);
    ASSERT_EQ(dense.keys_in_step(), ref.visible_tokens() + own);
    ASSERT_EQ(full.keys_in_step(), ref_full.visible_tokens() + own);

    std::vector<int> order(o.num_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int b : order) {
      const kernels::QueryView qv{q[b].data(), nt, o.heads, o.head_dim, row};
      const kernels::KVSpan kv{k[b].data(), v[b].data(), DType::F32, nt, kv_stride};
      std::vector<float> out_p(nt * row), out_d(nt * row), out_f(nt * row);
      kvtest::attend(paged, b, qv, kv, out_p.data(), sc.threads);
      kvtest::attend(dense, b, qv, kv, out_d.data(), sc.threads);
      kvtest::attend(full, b, qv, kv, out_f.data(), sc.threads);
      check_close(out_p, out_d, kPairTol, cnt.max_pair_err, "paged vs dense");
      if (::testing::Test::HasFatalFailure()) return;
      // Reference on a few sampled query rows.
      for (int rep = 0; rep < 2; ++rep) {
        const RefCache& r = rep == 0 ? ref : ref_full;
        std::vector<const float*> ks, vs;
        r.gather(b, ks, vs);
        std::vector<float> own_k, own_v;
        if (mode == FrameMode::NonKeyframe) {
          own_k = rf[0].k[b];
          own_v = rf[0].v[b];
          for (int t = 0; t < o.tokens_per_frame; ++t) {
            ks.push_back(own_k.data() + t * row);
            vs.push_back(own_v.data() + t * row);
          }
        }
        ASSERT_EQ(static_cast<int64_t>(ks.size()), rep == 0 ? paged.keys_in_step() : full.keys_in_step());
        for (int sample = 0; sample < 3; ++sample) {
          const int t = std::uniform_int_distribution<int>(0, nt - 1)(rng);
          std::vector<double> expect(row);
          ref_attention_row(q[b].data() + t * row, o.heads, o.head_dim, ks, vs, expect.data());
          std::vector<float> exp_f(expect.begin(), expect.end());
          const auto slice = [&](const std::vector<float>& out) {
            return std::vector<float>(out.begin() + t * row, out.begin() + (t + 1) * row);
          };
          if (rep == 0) {
            check_close(slice(out_p), exp_f, kRefTol, cnt.max_ref_err, "paged vs reference");
            check_close(slice(out_d), exp_f, kRefTol, cnt.max_ref_err, "dense vs reference");
          } else {
            check_close(slice(out_f), exp_f, kRefTol, cnt.max_ref_err, "dense-full vs reference");
          }
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
    paged.check_invariants();
    paged.end_step();
    dense.end_step();
    full.end_step();
    if (mode == FrameMode::ScalePhase) ref.evict();
    ++cnt.steps;

    // Invariants and stats after the step.
    paged.check_invariants();
    const CacheStats ps = paged.stats(), ds = dense.stats(), fs = full.stats();
    ASSERT_EQ(ps.pinned_pages + ps.window_pages + ps.free_pages, ps.pool_pages);
    ASSERT_LE(ps.pinned_pages + ps.window_pages, int64_t{o.scale_frames} + o.sliding_window);
    ASSERT_LE(ps.window_pages, o.sliding_window);
    ASSERT_EQ(ps.frames_stored, static_cast<int64_t>(ref.stored()));
    ASSERT_EQ(ps.frames_resident, ref.resident_frames());
    ASSERT_EQ(ps.visible_tokens, ref.visible_tokens());
    ASSERT_EQ(ps.kept_special_tokens, ref.kept_specials());
    ASSERT_EQ(ps.special_frames_dropped, ref.dropped_frames());
    cnt.dropped_steps += ps.special_frames_dropped > 0;
    ASSERT_EQ(ds.special_frames_dropped, ref.dropped_frames());
    ASSERT_EQ(ps.special_tokens, (ps.frames_stored - ps.special_frames_dropped) * o.num_special_tokens);
    if (o.max_special_frames > 0) {
      // Bounded: the pinned frames' pages, then at most the pages spanning window + kept frames
      // (+1 for a partial first page, +1 reserved before the step's release).
      const int64_t fpp = paged.special_page_frames();
      const int64_t pinned_pages = o.include_scale_frames ? (o.scale_frames + fpp - 1) / fpp : 0;
      const int64_t bound = pinned_pages + (o.sliding_window + o.max_special_frames + fpp - 1) / fpp + 2;
      ASSERT_LE(ps.special_pages, bound);
      ASSERT_LE(ps.special_pages + ps.special_free_pages, bound);
    } else {
      ASSERT_EQ(ps.special_free_pages, 0);
    }
    ASSERT_EQ(ds.frames_resident, ref.resident_frames());
    ASSERT_EQ(ds.visible_tokens, ref.visible_tokens());
    ASSERT_EQ(ds.special_tokens, ref.kept_specials());
    ASSERT_EQ(fs.frames_resident, ref_full.resident_frames());
    ASSERT_EQ(fs.visible_tokens, ref_full.visible_tokens());
    ASSERT_EQ(ps.bytes_reserved, static_cast<int64_t>(paged.page_bytes()) * o.num_blocks *
                                     (ps.pool_pages + ps.special_pages + ps.special_free_pages));
    ASSERT_EQ(ps.bytes_used, int64_t{2} * row * static_cast<int64_t>(dtype_size(o.dtype)) * o.num_blocks *
                                 (ps.frames_resident * paged.patch_tokens() + ps.special_tokens));
    ASSERT_EQ(ds.bytes_used, int64_t{2} * row * static_cast<int64_t>(dtype_size(o.dtype)) * o.num_blocks *
                                 (ds.frames_resident * o.tokens_per_frame + ds.special_tokens));
    ASSERT_EQ(static_cast<size_t>(ps.bytes_reserved + ds.bytes_reserved + fs.bytes_reserved), alloc.bytes_allocated());

    if (mode == FrameMode::NonKeyframe) {
      // Attend-without-persist: byte-for-byte the same caches and bookkeeping.
      ASSERT_EQ(paged.state(), paged_before);
      ASSERT_EQ(paged_hash(paged), paged_bytes_before);
      for (int b = 0; b < o.num_blocks; ++b) {
        ASSERT_EQ(live_hash(dense.live_bytes(b)), dense_before[b]);
        ASSERT_EQ(live_hash(full.live_bytes(b)), full_before[b]);
      }
      const CacheStats d2 = dense.stats(), f2 = full.stats();
      ASSERT_EQ(d2.bytes_reserved, dense_stats_before.bytes_reserved);
      ASSERT_EQ(f2.bytes_reserved, full_stats_before.bytes_reserved);

      // The same non-keyframe through the lower-level deferred-eviction path: append (eviction
      // deferred), write, attend, roll back -> same keys as the KVCache path, exact prior state.
      std::vector<std::vector<unsigned char>> live(o.num_blocks);
      for (int b = 0; b < o.num_blocks; ++b) live[b] = paged.live_bytes(b);
      const int64_t frame = paged.append_frame(PagedKVCache::Eviction::Deferred);
      const CacheStats mid = paged.stats();
      ASSERT_LE(mid.pinned_pages + mid.window_pages, int64_t{o.scale_frames} + o.sliding_window + 1);
      paged.check_invariants();
      for (int b = 0; b < o.num_blocks; ++b) {
        const kernels::KVSpan kv{k[b].data(), v[b].data(), DType::F32, o.tokens_per_frame, kv_stride};
        paged.write_frame(b, frame, kv);
      }
      for (int b = 0; b < o.num_blocks; ++b) {
        const kernels::QueryView qv{q[b].data(), nt, o.heads, o.head_dim, row};
        std::vector<float> low(nt * row), step_out(nt * row);
        kernels::attention(qv, paged.visible(b, {}), low.data(),
                           {1.0f / std::sqrt(static_cast<float>(o.head_dim)), 1, kernels::AttentionCompute::F32});
        // Recompute the KVCache-path output for this block (the cache is unchanged by it).
        const kernels::KVSpan kv{k[b].data(), v[b].data(), DType::F32, nt, kv_stride};
        dense.begin_step(FrameMode::NonKeyframe, 1);
        kvtest::attend(dense, b, qv, kv, step_out.data());
        dense.end_step();
        check_close(low, step_out, kPairTol, cnt.max_pair_err, "deferred append vs non-keyframe step");
        if (::testing::Test::HasFatalFailure()) return;
      }
      paged.rollback_last_frame();
      ASSERT_EQ(paged.state(), paged_before);
      for (int b = 0; b < o.num_blocks; ++b) ASSERT_EQ(paged.live_bytes(b), live[b]);
      paged.check_invariants();
      ++cnt.rollbacks;
    }
  }
  ++cnt.configs;

  // reset(): back to the initial bookkeeping without any new allocation, and the cache works again.
  const uint64_t allocs = alloc.allocation_count();
  const int64_t special_pages = paged.special_pages_allocated();
  paged.reset();
  dense.reset();
  ASSERT_EQ(paged.state(), state_after_reset(o, alloc, special_pages));  // makes a fresh cache
  ASSERT_EQ(paged.stats().frames_stored, 0);
  ASSERT_EQ(dense.stats().frames_stored, 0);
  ASSERT_EQ(dense.stats().visible_tokens, 0);
  const uint64_t allocs_after_fresh = alloc.allocation_count();
  EXPECT_EQ(allocs_after_fresh - allocs, static_cast<uint64_t>(o.num_blocks));  // only the fresh cache's pools
  // Replaying the same frame count after reset needs no allocation in the paged cache.
  for (size_t i = 0; i < ref.stored(); ++i) bench::bookkeeping_step(paged, FrameMode::Keyframe, 1);
  EXPECT_EQ(alloc.allocation_count(), allocs_after_fresh);
}

TEST(KVCacheEquivalence, RandomConfigurationsPagedDenseReference) {
  std::mt19937 rng(20240601);
  Counters cnt;
  const int kConfigs = 240;
  for (int i = 0; i < kConfigs; ++i) {
    SCOPED_TRACE(::testing::Message() << "config " << i);
    const Scenario sc = random_scenario(rng, i);
    run_scenario(sc, rng, cnt);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GE(cnt.configs, 200);
  EXPECT_GE(cnt.steps, 2000);
  EXPECT_GT(cnt.rollbacks, 200);
  EXPECT_GT(cnt.dropped_steps, 300);
  std::printf("[ info ] %d configurations, %d steps (%d with max_special_frames dropping), %d deferred-append rollbacks; max rel err paged-dense %.2e, vs reference %.2e\n",
              cnt.configs, cnt.steps, cnt.dropped_steps, cnt.rollbacks, cnt.max_pair_err, cnt.max_ref_err);
}

}  // namespace
