// The memory feasibility estimate of run and the Python module (pipeline/memory_estimate.h) is a
// lower bound: checked against what a session on the demo model really holds, per KV backend, KV
// dtype and weights dtype; an infeasible request names the option to lower, in either spelling.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "pipeline/demo_model.h"
#include "lingbot/preprocess.h"
#include "lingbot/session.h"
#include "pipeline/memory_estimate.h"

using namespace lingbot;

namespace {

constexpr int kRunFrames = 6, kRunScaleFrames = 2, kRunKvWindow = 2;  // frames 5 and 6 evict

struct HeldBytes {
  int64_t weights, kv_cache, camera_cache;
};

HeldBytes run_demo_for_estimate(const std::shared_ptr<const Model>& model, KVBackend backend, DType kv_dtype) {
  SessionOptions o;
  o.scale_frames = kRunScaleFrames;
  o.kv_window = kRunKvWindow;
  o.kv_backend = backend;
  o.kv_dtype = kv_dtype;
  o.threads = 2;
  Session s(model, o);
  PreprocessOptions pre;
  pre.image_size = kDemoImageSize;
  for (int i = 0; i < kRunFrames; ++i) {
    const io::ImageU8 rgb = render_demo_frame(i);
    s.push_frame(preprocess_image(rgb.rgb.data(), rgb.width, rgb.height, pre));
  }
  s.finish();
  const SessionStats st = s.stats();
  return {static_cast<int64_t>(model->load_stats().owned_bytes + model->load_stats().borrowed_bytes),
          st.cache.bytes_reserved, st.camera_cache_bytes};
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
        MemoryInputs in;
        in.width = kDemoFrameWidth;
        in.height = kDemoFrameHeight;
        in.frames = kRunFrames;
        in.scale_frames = kRunScaleFrames;
        in.kv_window = kRunKvWindow;
        in.keyframe_interval = 1;
        in.kv_backend = backend;
        in.kv_dtype = kv;
        in.weights_dtype = weights;
        const MemoryEstimate e = estimate_run_memory(model->config(), in);
        const HeldBytes held = run_demo_for_estimate(model, backend, kv);
        EXPECT_GT(e.weights, 0) << what;
        EXPECT_LE(e.weights, held.weights) << what;
        // A useful bound, not just any small number: at least a third of what is held (the dense
        // cache grows its capacity by doubling, so it may hold up to twice the frames it keeps).
        EXPECT_GE(3 * e.weights, held.weights) << what;
        EXPECT_GT(e.kv_cache, 0) << what;
        EXPECT_LE(e.kv_cache, held.kv_cache) << what;
        EXPECT_GE(3 * e.kv_cache, held.kv_cache) << what;
        EXPECT_LE(e.camera_cache, held.camera_cache) << what;
        EXPECT_GE(3 * e.camera_cache, held.camera_cache) << what;
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
  in.frames = 1000;
  EXPECT_EQ(estimate_run_memory(cfg, in).kv_cache, open_ended);  // a long run fills the pool
}

TEST(MemoryEstimate, InfeasibleRunNamesTheAdviceForItsLargestPart) {
  const MemoryAdvice advice{"the job", "shrink the KV", "shrink the f32 KV", "fewer frames", "smaller frames"};
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
