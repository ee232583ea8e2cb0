// Causal camera head against the golden `tiny` case: the camera tokens of aggregated_3 (stored for all
// 10 frames) are streamed like the reference run (scale phase of 2 frames, then frames 2..9 as
// keyframes) and the per-iteration pose encodings are compared (tolerance 1e-4 absolute, README).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "geometry_golden_util.h"
#include "io/safetensors.h"
#include "lingbot/model_config.h"
#include "compute/cpu/cpu_backend.h"
#include "model/camera_head.h"
#include "model/geometry.h"


namespace lingbot::model {
namespace {

struct TinyCase {
  io::TensorMap weights;
  io::TensorMap ref;
  io::IntTensorMap ref_ints;
  CameraHeadConfig cfg;
};

std::optional<TinyCase> load_tiny() {
  const auto dir = test::golden_case_dir("tiny");
  if (!dir) return std::nullopt;
  TinyCase c;
  c.weights = io::SafetensorsReader::open(*dir + "/weights.safetensors").read_all(DType::F32);
  c.ref = io::SafetensorsReader::open(*dir + "/reference.safetensors").read_all(DType::F32, &c.ref_ints);
  c.cfg = ModelConfig::infer(c.weights).camera;
  return c;
}

// Cached load (the files are small, but every test needs them).
const TinyCase* tiny() {
  static std::optional<TinyCase> c = [] {
    try {
      return load_tiny();
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      return std::optional<TinyCase>();
    }
  }();
  return c ? &*c : nullptr;
}

io::TensorMap copy_weights(const io::TensorMap& w) {
  io::TensorMap out;
  for (const auto& [k, v] : w)
    if (k.rfind("camera_head.", 0) == 0) out.emplace(k, v.clone());
  return out;
}

// Camera tokens (token 0) of frames [f0, f0 + n) of aggregated_3 [S, P, 2C].
RowsView camera_rows(const Tensor& agg, int64_t f0, int64_t n) {
  const int64_t P = agg.dim(1), C2 = agg.dim(2);
  return {agg.f32() + f0 * P * C2, n, C2, P * C2};
}

// Streams frames 0..S-1 the way the tiny reference does; returns [iters, S, 9].
Tensor stream_tiny(compute::Backend& be, const CameraHead& head, CameraHeadCache& cache, const Tensor& agg,
                   int scale_frames, std::vector<int64_t>* cached = nullptr) {
  const int64_t S = agg.dim(0), iters = cache.num_iterations();
  Tensor all({iters, S, 9});
  auto put = [&](const Tensor& step, int64_t f0, int64_t n) {
    for (int64_t it = 0; it < iters; ++it)
      std::memcpy(all.f32() + (it * S + f0) * 9, step.f32() + it * n * 9, n * 9 * sizeof(float));
  };
  put(head.step(be, cache, FrameMode::ScalePhase, camera_rows(agg, 0, scale_frames)), 0, scale_frames);
  if (cached) cached->push_back(cache.frames());
  for (int64_t f = scale_frames; f < S; ++f) {
    put(head.step(be, cache, FrameMode::Keyframe, camera_rows(agg, f, 1)), f, 1);
    if (cached) cached->push_back(cache.frames());
  }
  return all;
}

TEST(CameraHeadGolden, TinyStreamMatchesReferencePoses) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  EXPECT_TRUE(w.empty()) << "the head takes every camera_head.* tensor";
  CameraHeadCache cache = head.make_cache(cpu);
  EXPECT_EQ(cache.num_iterations(), 4);
  std::vector<int64_t> cached;
  const Tensor got = stream_tiny(cpu, head, cache, c->ref.at("aggregated_3"), 2, &cached);
  const Tensor& ref_iters = c->ref.at("pose_enc_iters");
  ASSERT_EQ(got.shape(), ref_iters.shape());
  const test::Diff d = test::diff(got.f32(), ref_iters.f32(), got.numel());
  std::printf("[ INFO     ] tiny pose_enc_iters max|d| = %.3g (max|ref| %.3g)\n", d.max_abs, d.max_ref);
  EXPECT_LE(d.max_abs, 1e-4) << "at flat index " << d.argmax;
  const Tensor& ref_final = c->ref.at("pose_enc");
  EXPECT_LE(test::diff(got.f32() + 3 * 10 * 9, ref_final.f32(), 90).max_abs, 1e-4);
  // The camera cache holds every stored frame: 2 after the scale phase, then +1 per keyframe.
  EXPECT_EQ(cached, (std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9, 10}));
  // One f32 K and V row of dim_in per frame in each (iteration, block) cache.
  EXPECT_EQ(cache.bytes(), 10 * 2 * 256 * 4 * int64_t(c->cfg.num_iterations * c->cfg.trunk_depth));
}

TEST(CameraHeadGolden, FewerIterationsAreExactPrefixes) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  const Tensor& agg = c->ref.at("aggregated_3");
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  CameraHeadCache cache4 = head.make_cache(cpu, 4);
  const Tensor full = stream_tiny(cpu, head, cache4, agg, 2);
  for (int iters = 1; iters <= 3; ++iters) {
    CameraHeadCache cache = head.make_cache(cpu, iters);
    const Tensor got = stream_tiny(cpu, head, cache, agg, 2);
    ASSERT_EQ(got.shape(), (Shape{iters, 10, 9}));
    EXPECT_EQ(std::memcmp(got.f32(), full.f32(), got.nbytes()), 0) << iters << " iterations";
  }
}

TEST(CameraHeadGolden, ThreadCountAndResetDoNotChangeResults) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  const Tensor& agg = c->ref.at("aggregated_3");
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  compute::CpuBackend cpu2(2);
  CameraHeadCache c1 = head.make_cache(cpu), c2 = head.make_cache(cpu2);
  const Tensor a = stream_tiny(cpu, head, c1, agg, 2);
  const Tensor b = stream_tiny(cpu2, head, c2, agg, 2);
  EXPECT_EQ(std::memcmp(a.f32(), b.f32(), a.nbytes()), 0);
  const int64_t reserved = c2.bytes_reserved();
  c2.reset();
  EXPECT_EQ(c2.frames(), 0);
  EXPECT_EQ(c2.bytes(), 0);
  EXPECT_EQ(c2.bytes_reserved(), reserved) << "reset keeps the capacity";
  const Tensor again = stream_tiny(cpu2, head, c2, agg, 2);
  EXPECT_EQ(std::memcmp(a.f32(), again.f32(), a.nbytes()), 0);
}

TEST(CameraHeadGolden, NonKeyframeLeavesTheCacheUnchanged) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  const Tensor& agg = c->ref.at("aggregated_3");
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  CameraHeadCache a = head.make_cache(cpu), b = head.make_cache(cpu);
  head.step(cpu, a, FrameMode::ScalePhase, camera_rows(agg, 0, 2));
  head.step(cpu, b, FrameMode::ScalePhase, camera_rows(agg, 0, 2));
  // b sees frame 2 as a non-keyframe first: it gets a pose, but nothing is stored.
  const int64_t bytes_before = b.bytes();
  const Tensor nk = head.step(cpu, b, FrameMode::NonKeyframe, camera_rows(agg, 2, 1));
  EXPECT_EQ(b.frames(), 2);
  EXPECT_EQ(b.bytes(), bytes_before);
  const Tensor ka = head.step(cpu, a, FrameMode::Keyframe, camera_rows(agg, 2, 1));
  // Frame 2 as a non-keyframe attends to {0, 1, 2}, exactly the keys it sees as a keyframe.
  EXPECT_LE(test::diff(nk.f32(), ka.f32(), nk.numel()).max_abs, 1e-6);
  // Later frames see the same caches in both heads.
  head.step(cpu, b, FrameMode::Keyframe, camera_rows(agg, 2, 1));
  const Tensor a3 = head.step(cpu, a, FrameMode::Keyframe, camera_rows(agg, 3, 1));
  const Tensor b3 = head.step(cpu, b, FrameMode::Keyframe, camera_rows(agg, 3, 1));
  EXPECT_EQ(std::memcmp(a3.f32(), b3.f32(), a3.nbytes()), 0);
  EXPECT_EQ(a.frames(), 4);
  EXPECT_EQ(b.frames(), 4);
}

// Flow keyframes: a Deferred frame is stored like a keyframe (same poses); rollback_deferred() leaves
// every (iteration, block) cache byte-identical to before, commit_deferred() to the keyframe path.
TEST(CameraHeadGolden, DeferredFrameRollsBackExactlyAndCommitsLikeAKeyframe) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  const Tensor& agg = c->ref.at("aggregated_3");
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  CameraHeadCache a = head.make_cache(cpu), b = head.make_cache(cpu);
  head.step(cpu, a, FrameMode::ScalePhase, camera_rows(agg, 0, 2));
  head.step(cpu, b, FrameMode::ScalePhase, camera_rows(agg, 0, 2));
  for (int64_t f = 2; f < agg.dim(0); ++f) {
    const bool keep = f % 3 != 0;  // 3, 6, 9 rolled back
    const std::vector<unsigned char> before = b.live_bytes();
    const int64_t frames_before = b.frames();
    const Tensor d = head.step(cpu, b, FrameMode::Deferred, camera_rows(agg, f, 1));
    EXPECT_TRUE(b.deferred_pending());
    EXPECT_EQ(b.frames(), frames_before + 1);
    EXPECT_THROW(head.step(cpu, b, FrameMode::Keyframe, camera_rows(agg, f, 1)), Error);  // decide first
    if (keep) {
      b.commit_deferred();
      const Tensor k = head.step(cpu, a, FrameMode::Keyframe, camera_rows(agg, f, 1));
      EXPECT_EQ(std::memcmp(d.f32(), k.f32(), d.nbytes()), 0) << "frame " << f;
      EXPECT_EQ(b.live_bytes(), a.live_bytes()) << "frame " << f;
    } else {
      b.rollback_deferred();
      EXPECT_EQ(b.live_bytes(), before) << "frame " << f;
      EXPECT_EQ(b.frames(), frames_before);
    }
    EXPECT_FALSE(b.deferred_pending());
  }
  EXPECT_EQ(a.frames(), b.frames());
  EXPECT_THROW(b.rollback_deferred(), Error);
}

// History bound (SessionOptions::max_special_frames): the cache keeps the first K stored frames and
// the newest R; results are bit-identical to the unbounded head until it first drops a frame, then
// differ (the bound is honoured); memory stops growing.
TEST(CameraHeadGolden, HistoryBoundKeepsFirstAndNewestFrames) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  const Tensor& agg = c->ref.at("aggregated_3");
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  CameraHeadCache full = head.make_cache(cpu), bounded = head.make_cache(cpu);
  constexpr int64_t K = 2, R = 3;
  bounded.set_history_bound(K, R);
  head.step(cpu, full, FrameMode::ScalePhase, camera_rows(agg, 0, 2));
  head.step(cpu, bounded, FrameMode::ScalePhase, camera_rows(agg, 0, 2));
  int64_t reserved_after_first_drop = -1;
  bool diverged = false;
  for (int64_t i = 2; i < 40; ++i) {
    const RowsView rows = camera_rows(agg, i % 10, 1);  // the 10 reference frames, looped
    const Tensor a = head.step(cpu, full, FrameMode::Keyframe, rows);
    const Tensor b = head.step(cpu, bounded, FrameMode::Keyframe, rows);
    const int64_t stored = i + 1;
    EXPECT_EQ(full.frames(), stored);
    EXPECT_EQ(bounded.frames(), std::min(stored, K + R));
    EXPECT_EQ(bounded.frames_dropped(), stored - bounded.frames());
    EXPECT_EQ(bounded.bytes(), bounded.frames() * 2 * 256 * 4 * int64_t(c->cfg.num_iterations * c->cfg.trunk_depth));
    const bool same = std::memcmp(a.f32(), b.f32(), a.nbytes()) == 0;
    // Frame i attends to the held frames + itself: identical while nothing was dropped before it.
    if (i <= K + R) {
      EXPECT_TRUE(same) << "frame " << i;
    }
    diverged |= !same;
    // The first (iteration, block) cache's K rows depend on the frame's token alone, so the bounded
    // cache holds exactly the full cache's rows of frames [0, K) and the newest R, across the
    // reallocations of its buffers (capacity 16 rows, 40 frames).
    const std::vector<unsigned char> fb = full.live_bytes(), bb = bounded.live_bytes();
    const size_t row = 256 * sizeof(float);
    std::vector<unsigned char> expect(fb.begin(), fb.begin() + static_cast<std::ptrdiff_t>(std::min(stored, K) * row));
    if (stored > K) {
      const int64_t from = std::max(K, stored - R);
      expect.insert(expect.end(), fb.begin() + static_cast<std::ptrdiff_t>(from * row),
                    fb.begin() + static_cast<std::ptrdiff_t>(stored * row));
    }
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), bb.begin())) << "frame " << i;
    if (stored == K + R + 1) reserved_after_first_drop = bounded.bytes_reserved();
    if (stored > K + R + 1) {
      EXPECT_EQ(bounded.bytes_reserved(), reserved_after_first_drop) << "frame " << i;
    }
  }
  EXPECT_TRUE(diverged);
  bounded.reset();
  EXPECT_EQ(bounded.frames(), 0);
  EXPECT_EQ(bounded.frames_dropped(), 0);
  try {
    bounded.set_history_bound(-1, 2);
    ADD_FAILURE() << "a negative history bound was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "camera head: history bound must be >= 0, got keep_first -1, keep_recent 2");
  }
}

TEST(CameraHeadGolden, PosesDecodeToReferenceCameras) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  CameraHeadCache cache = head.make_cache(cpu);
  const Tensor got = stream_tiny(cpu, head, cache, c->ref.at("aggregated_3"), 2);
  Tensor final_pose({10, 9});
  std::memcpy(final_pose.f32(), got.f32() + 3 * 90, 90 * sizeof(float));
  const CameraTensors cams = cameras_from_pose_encodings(final_pose, {70, 112});
  EXPECT_LE(test::diff(cams.extrinsic.f32(), c->ref.at("extrinsic").f32(), 120).max_abs, 1e-4);
  EXPECT_LE(test::diff(cams.extrinsic_c2w.f32(), c->ref.at("extrinsic_c2w").f32(), 120).max_abs, 1e-4);
  EXPECT_LE(test::max_rel(cams.intrinsic.f32(), c->ref.at("intrinsic").f32(), 90, 1e-6), 1e-5);
}

TEST(CameraHeadErrors, BadInputsNameTheProblem) {
  const TinyCase* c = tiny();
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  const Tensor& agg = c->ref.at("aggregated_3");
  io::TensorMap w = copy_weights(c->weights);
  const CameraHead head(c->cfg, w);
  compute::CpuBackend cpu(1);
  CameraHeadCache cache = head.make_cache(cpu);
  auto expect_error = [](auto&& fn, const std::string& msg) {
    try {
      fn();
      ADD_FAILURE() << "expected error: " << msg;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  };
  expect_error([&] { head.step(cpu, cache, FrameMode::ScalePhase, {agg.f32(), 2, 128, 0}); },
               "camera head: camera tokens must be [n >= 1, 256] with row stride >= 256, got [2, 128] stride 128");
  expect_error([&] { head.step(cpu, cache, FrameMode::Keyframe, camera_rows(agg, 0, 2)); },
               "camera head: a keyframe step takes 1 frame, got 2");
  head.step(cpu, cache, FrameMode::ScalePhase, camera_rows(agg, 0, 2));
  expect_error([&] { head.step(cpu, cache, FrameMode::ScalePhase, camera_rows(agg, 0, 2)); },
               "camera head: scale phase needs an empty cache, it holds 2 frames (call reset())");
  expect_error([&] { head.step(cpu, cache, FrameMode::NonKeyframe, camera_rows(agg, 2, 3)); },
               "camera head: a non-keyframe step takes 1 frame, got 3");
  EXPECT_EQ(cache.frames(), 2);

  io::TensorMap missing = copy_weights(c->weights);
  missing.erase("camera_head.trunk_norm.bias");
  expect_error([&] { CameraHead h(c->cfg, missing); }, "missing weight camera_head.trunk_norm.bias");
  io::TensorMap bad = copy_weights(c->weights);
  bad["camera_head.embed_pose.weight"] = Tensor({256, 8});
  expect_error([&] { CameraHead h(c->cfg, bad); },
               "camera_head.embed_pose.weight: expected shape [256, 9], got [256, 8]");
  expect_error([&] { head.make_cache(cpu, -1); }, "camera head: num_iterations must be >= 1, got -1");
  // A cache made by a head of another shape is refused.
  io::TensorMap w2 = copy_weights(c->weights);
  for (const std::string n : {"norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                              "attn.proj.bias", "ls1.gamma", "norm2.weight", "norm2.bias", "mlp.fc1.weight",
                              "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias", "ls2.gamma"})
    w2.emplace("camera_head.trunk.1." + n, w2.at("camera_head.trunk.0." + n).clone());
  CameraHeadConfig deeper = c->cfg;
  deeper.trunk_depth = 2;
  const CameraHead head2(deeper, w2);
  CameraHeadCache other = head2.make_cache(cpu);
  expect_error([&] { head.step(cpu, other, FrameMode::ScalePhase, camera_rows(agg, 0, 2)); },
               "camera head: the cache was made for another head (trunk depth 2, dim 256; this head has 1, 256)");
  // A cache belongs to the backend it was made on (its rows live in that backend's memory).
  compute::CpuBackend cpu2(1);
  CameraHeadCache fresh = head.make_cache(cpu2);
  expect_error([&] { head.step(cpu, fresh, FrameMode::ScalePhase, camera_rows(agg, 0, 2)); },
               "camera head: the cache was made on another backend; run every step of a cache on the backend it "
               "was made on");
}

}  // namespace
}  // namespace lingbot::model
