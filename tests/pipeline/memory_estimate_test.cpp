// The memory feasibility estimate of run and the Python module (pipeline/memory_estimate.h) is a
// lower bound: checked against what a session on the demo model really holds, per KV backend, KV
// dtype and weights dtype; an infeasible request names the option to lower, in either spelling.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "pipeline/demo_model.h"
#include "lingbot/keyframe_policy.h"
#include "lingbot/preprocess.h"
#include "lingbot/session.h"
#include "pipeline/memory_estimate.h"

using namespace lingbot;

namespace {

constexpr int kRunFrames = 6, kRunScaleFrames = 2, kRunKvWindow = 2;  // frames 5 and 6 evict

struct HeldBytes {
  int64_t weights, kv_cache, camera_cache;
};

HeldBytes run_demo_for_estimate(const std::shared_ptr<const Model>& model, KVBackend backend, DType kv_dtype,
                                int frames = kRunFrames, int64_t max_special_frames = 0) {
  SessionOptions o;
  o.max_special_frames = max_special_frames;
  o.scale_frames = kRunScaleFrames;
  o.kv_window = kRunKvWindow;
  o.kv_backend = backend;
  o.kv_dtype = kv_dtype;
  o.threads = 2;
  Session s(model, o);
  PreprocessOptions pre;
  pre.image_size = kDemoImageSize;
  for (int i = 0; i < frames; ++i) {
    const io::ImageU8 rgb = render_demo_frame(i);
    s.push_frame(preprocess_image(rgb.rgb.data(), rgb.width, rgb.height, pre));
  }
  s.finish();
  const SessionStats st = s.stats();
  return {static_cast<int64_t>(model->load_stats().owned_bytes + model->load_stats().borrowed_bytes),
          st.cache.bytes_reserved, st.camera_cache_bytes};
}

// The estimate's inputs for run_demo_for_estimate's session.
MemoryInputs demo_run_inputs(int frames = kRunFrames, int64_t max_special_frames = 0) {
  MemoryInputs in;
  in.width = kDemoFrameWidth;
  in.height = kDemoFrameHeight;
  in.frames = frames;
  in.scale_frames = kRunScaleFrames;
  in.kv_window = kRunKvWindow;
  in.keyframe_interval = 1;
  in.max_special_frames = max_special_frames;
  return in;
}

// A useful bound, not just any small number: at most what is held and at least a third of it (the
// dense cache grows its capacity by doubling, so it may hold up to twice the frames it keeps).
void expect_useful_lower_bound(int64_t estimate, int64_t held, const std::string& what) {
  EXPECT_LE(estimate, held) << what;
  EXPECT_GE(3 * estimate, held) << what;
}

}  // namespace

TEST(MemoryEstimate, MemoryEstimateIsALowerBoundOfWhatASessionHolds) {
  for (const DType weights : {DType::F32, DType::BF16}) {
    ModelLoadOptions lo;
    lo.weights_dtype = weights;
    const std::shared_ptr<const Model> model = make_demo_model(kDemoWeightSeed, lo);
    for (const KVBackend backend : {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull}) {
      for (const DType kv : {DType::F32, DType::BF16}) {
        const std::string what = std::string(dtype_name(weights)) + " weights, " + kv_backend_name(backend) + ", " +
                                 std::string(dtype_name(kv)) + " K/V";
        MemoryInputs in = demo_run_inputs();
        in.kv_backend = backend;
        in.kv_dtype = kv;
        in.weights_dtype = weights;
        const MemoryEstimate e = estimate_run_memory(model->config(), in);
        const HeldBytes held = run_demo_for_estimate(model, backend, kv);
        EXPECT_GT(e.weights, 0) << what;
        expect_useful_lower_bound(e.weights, held.weights, what);
        EXPECT_GT(e.kv_cache, 0) << what;
        expect_useful_lower_bound(e.kv_cache, held.kv_cache, what);
        expect_useful_lower_bound(e.camera_cache, held.camera_cache, what);
      }
    }
  }
}

// The paged pool is reserved whole but becomes resident page by page as frames are written: a run of
// 10 frames with the default window needs the memory of 10 frames, not of 72 (a full-size probe
// measured 4.43 GiB peak against 9.6 GiB estimated when the pool counted whole).
TEST(MemoryEstimate, AShortPagedRunCountsTheFramesItStores) {
  const ModelConfig cfg = demo_model_config();
  MemoryInputs in;
  in.width = kDemoFrameWidth;
  in.height = kDemoFrameHeight;
  in.scale_frames = 8;
  in.kv_window = 64;
  in.kv_backend = KVBackend::Paged;
  const int64_t open_ended = estimate_run_memory(cfg, in).kv_cache;  // length unknown: the whole pool
  in.frames = 10;
  EXPECT_EQ(estimate_run_memory(cfg, in).kv_cache * 72, open_ended * 10);
  EXPECT_EQ(estimate_run_memory(cfg, in).kv_reserved, open_ended);  // reserved whole all the same
  in.frames = 1000;  // a long run fills the pool, and the special tokens of the 928 frames evicted stay
  const int64_t special_bytes = cfg.aggregator.depth * 2 * cfg.aggregator.num_special_tokens * cfg.aggregator.embed_dim * 4;
  EXPECT_EQ(estimate_run_memory(cfg, in).kv_cache, open_ended + 928 * special_bytes);
}

// Past the window a stream keeps every stored frame's special tokens and camera-head entries, or the
// newest max_special_frames: the estimate counted neither the special stream nor the bound, so a
// 40,000-frame run with --max-special-frames 256 was refused for a camera cache it never holds.
TEST(MemoryEstimate, LongStreamsCountTheSpecialStreamAndItsBound) {
  const std::shared_ptr<const Model> model = make_demo_model(kDemoWeightSeed, {});
  constexpr int kFrames = 14;  // 2 scale frames + 12 keyframes, 10 of them evicted from a window of 2
  for (const int64_t bound : {int64_t{0}, int64_t{3}}) {
    const MemoryEstimate e = estimate_run_memory(model->config(), demo_run_inputs(kFrames, bound));
    const HeldBytes held = run_demo_for_estimate(model, KVBackend::Paged, DType::F32, kFrames, bound);
    const std::string what = "max_special_frames " + std::to_string(bound);
    expect_useful_lower_bound(e.kv_cache, held.kv_cache, what);
    expect_useful_lower_bound(e.camera_cache, held.camera_cache, what);
  }
  const ModelConfig cfg = demo_model_config();
  const int64_t camera_frame_bytes = cfg.camera.trunk_depth * cfg.camera.num_iterations * 2 * cfg.camera.dim_in * 4;
  MemoryInputs in;
  in.width = kDemoFrameWidth;
  in.height = kDemoFrameHeight;
  in.frames = 40'000;
  in.scale_frames = 8;
  in.kv_window = 64;
  EXPECT_EQ(estimate_run_memory(cfg, in).camera_cache, 40'000 * camera_frame_bytes);
  in.max_special_frames = 256;
  EXPECT_EQ(estimate_run_memory(cfg, in).camera_cache, (8 + 64 + 256) * camera_frame_bytes);
  in.max_special_frames = kMaxSpecialFrames;  // no overflow in the sums
  EXPECT_EQ(estimate_run_memory(cfg, in).camera_cache, 40'000 * camera_frame_bytes);
  // Flow keyframes store at least one frame in every max_non_keyframe_gap (counting every frame as
  // stored was an upper bound, which refused runs that fit).
  in.max_special_frames = 0;
  in.keyframe_interval = FlowKeyframes(5.0, 30).max_keyframe_spacing();
  EXPECT_EQ(estimate_run_memory(cfg, in).camera_cache, (8 + (40'000 - 8 + 29) / 30) * camera_frame_bytes);
  in.keyframe_interval = 0;  // a policy without a bound: the scale frames only
  EXPECT_EQ(estimate_run_memory(cfg, in).camera_cache, 8 * camera_frame_bytes);
  in.keyframe_interval = 1;
  in.camera_iterations = 1;  // the session's count, not the model's default of 4
  EXPECT_EQ(estimate_run_memory(cfg, in).camera_cache * cfg.camera.num_iterations, 40'000 * camera_frame_bytes);
  // Dense keeps the visible specials of evicted frames: none without cross_frame_special (paged keeps
  // them all in its stream, hidden or not).
  ModelConfig hidden = cfg;
  hidden.kv_cache.cross_frame_special = false;
  in.kv_backend = KVBackend::Dense;
  EXPECT_EQ(estimate_run_memory(hidden, in).kv_special, 0);
  EXPECT_GT(estimate_run_memory(cfg, in).kv_special, 0);
  in.kv_backend = KVBackend::Paged;
  EXPECT_EQ(estimate_run_memory(hidden, in).kv_special, estimate_run_memory(cfg, in).kv_special);
}

TEST(MemoryEstimate, InfeasibleRunNamesTheAdviceForItsLargestPart) {
  const MemoryAdvice advice{"the job", "shrink the KV", "shrink the f32 KV", "fewer frames", "smaller frames",
                            "bound the specials"};
  MemoryEstimate e;
  e.weights = int64_t{1} << 30;
  e.kv_cache = int64_t{3} << 30;
  e.kv_f32 = true;
  const auto error_of = [&](const MemoryEstimate& m) -> std::string {
    try {
      check_memory_feasible(m, int64_t{2} << 30, advice);
    } catch (const Error& err) {
      return err.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of(e), "the job needs at least 4.00 GiB of memory (weights 1.00 GiB, KV cache 3.00 GiB, camera cache "
                         "0 B, activations 0 B) but 2.00 GiB are available: shrink the f32 KV");
  e.kv_f32 = false;
  EXPECT_TRUE(error_of(e).ends_with(": shrink the KV")) << error_of(e);
  MemoryEstimate camera = e;
  camera.camera_cache = int64_t{4} << 30;
  EXPECT_TRUE(error_of(camera).ends_with(": fewer frames")) << error_of(camera);
  MemoryEstimate specials = e;  // a long stream: most of the KV cache is special tokens past the window
  specials.kv_special = int64_t{2} << 30;
  EXPECT_TRUE(error_of(specials).ends_with(": bound the specials")) << error_of(specials);
  specials.kv_special = int64_t{1} << 30;  // half or less: the window's advice
  EXPECT_TRUE(error_of(specials).ends_with(": shrink the KV")) << error_of(specials);
  MemoryEstimate act = e;
  act.activations = int64_t{4} << 30;
  EXPECT_TRUE(error_of(act).ends_with(": smaller frames")) << error_of(act);
  MemoryEstimate weights = e;
  weights.weights = int64_t{5} << 30;
  EXPECT_TRUE(error_of(weights).ends_with(": the model's weights alone do not fit: use a machine with more memory"));
  EXPECT_NO_THROW(check_memory_feasible(e, int64_t{4} << 30, advice));
  EXPECT_NO_THROW(check_memory_feasible(e, 0, advice));  // unknown: no check
  // A pool reserved whole up front must fit the machine's memory and swap, resident or not.
  e.kv_reserved = int64_t{10} << 30;
  EXPECT_NO_THROW(check_memory_feasible(e, int64_t{4} << 30, advice, int64_t{11} << 30));
  try {
    check_memory_feasible(e, int64_t{4} << 30, advice, int64_t{8} << 30);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "the job needs at least 11.00 GiB of memory to reserve its KV cache up front (weights "
                             "1.00 GiB, KV cache pool 10.00 GiB) but the machine has 8.00 GiB of memory and swap: "
                             "shrink the KV");
  }
}
