// Aggregator scale phase on the tiny golden case, driven directly (no session): the two scale frames
// attend bidirectionally through a dense-full cache; their selected-layer outputs must match the
// reference rows. Plus argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "compute/cpu/cpu_backend.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "lingbot/model_config.h"
#include "model/aggregator.h"
#include "model/encoder.h"

namespace {

using namespace lingbot;

struct Tiny {
  ModelConfig cfg;
  std::unique_ptr<model::Encoder> enc;
  std::unique_ptr<model::Aggregator> agg;
  Tensor images;
  io::SafetensorsReader ref = io::SafetensorsReader::open(std::string(LINGBOT_TESTDATA_DIR) + "/tiny/reference.safetensors");
  Tiny() {
    io::TensorMap w =
        io::SafetensorsReader::open(std::string(LINGBOT_TESTDATA_DIR) + "/tiny/weights.safetensors").read_all();
    cfg = ModelConfig::infer(w);
    enc = std::make_unique<model::Encoder>(cfg.encoder, cfg.image_norm, w);
    agg = std::make_unique<model::Aggregator>(cfg.aggregator, w);
    images = ref.read("images", DType::F32);
  }
};

CacheOptions cache_options(const ModelConfig& cfg, int tpf) {
  CacheOptions co;
  co.num_blocks = static_cast<int>(cfg.aggregator.depth);
  co.heads = static_cast<int>(cfg.aggregator.num_heads);
  co.head_dim = static_cast<int>(cfg.aggregator.head_dim());
  co.tokens_per_frame = tpf;
  co.scale_frames = 2;
  co.sliding_window = 3;
  return co;
}

}  // namespace

TEST(Aggregator, TinyScalePhaseMatchesReference) {
  Tiny t;
  const int64_t H = t.images.dim(2), W = t.images.dim(3), p = t.cfg.encoder.patch_size, C = t.cfg.aggregator.embed_dim;
  const model::FrameGrid grid{H / p, W / p};
  compute::CpuBackend be(2);
  const compute::Array pos = t.enc->position_embedding(be, H, W);
  std::vector<float> tokens(static_cast<size_t>(2 * grid.patches() * C));
  model::EncoderScratch es;
  for (int f = 0; f < 2; ++f)
    t.enc->forward(be, t.images.f32() + f * 3 * H * W, H, W, pos, tokens.data() + f * grid.patches() * C, es);
  HostAllocator alloc;
  const int tpf = static_cast<int>(t.agg->tokens_per_frame(grid));
  auto cache = make_kv_cache(KVBackend::DenseFull, cache_options(t.cfg, tpf), alloc);
  model::StepFrames frames;
  frames.n_frames = 2;
  frames.patch_tokens = tokens.data();
  frames.camera_variant = {0, 1};
  frames.register_variant = {0, 1};
  frames.scale_variant = {0, 0};
  frames.time_index = {0, 1};
  model::AggregatorScratch as;
  std::vector<compute::Array> selected;
  t.agg->step(be, grid, frames, FrameMode::ScalePhase, *cache, as, selected);
  ASSERT_EQ(selected.size(), t.cfg.aggregator.selected_layers.size());
  const auto idx = t.ref.read_int("aggregated_frame_index").values;
  ASSERT_EQ(idx[0], 0);
  ASSERT_EQ(idx[1], 1);
  for (size_t j = 0; j < selected.size(); ++j) {
    ASSERT_EQ(selected[j].shape(), (Shape{2, tpf, 2 * C}));
    const Tensor r = t.ref.read("aggregated_" + std::to_string(j), DType::F32);
    double err = 0, rmax = 0;
    for (int64_t i = 0; i < selected[j].numel(); ++i) {  // rows 0 and 1 of the reference are frames 0, 1
      err = std::max(err, std::abs(static_cast<double>(selected[j].data()[i]) - r.f32()[i]));
      rmax = std::max(rmax, std::abs(static_cast<double>(r.f32()[i])));
    }
    EXPECT_LE(err, 1e-4 * rmax) << "layer " << j;
  }
  EXPECT_EQ(cache->stats().frames_stored, 2);
}

TEST(Aggregator, RejectsInconsistentStepArguments) {
  Tiny t;
  const model::FrameGrid grid{5, 8};
  HostAllocator alloc;
  auto cache = make_kv_cache(KVBackend::Dense, cache_options(t.cfg, 46), alloc);
  std::vector<float> tokens(static_cast<size_t>(40 * t.cfg.aggregator.embed_dim));
  model::StepFrames frames;
  frames.n_frames = 1;
  frames.patch_tokens = tokens.data();
  frames.camera_variant = {0};
  frames.register_variant = {0};
  frames.scale_variant = {0};
  compute::CpuBackend be(1);
  model::AggregatorScratch as;
  std::vector<compute::Array> selected;
  try {
    t.agg->step(be, grid, frames, FrameMode::ScalePhase, *cache, as, selected);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "aggregator step: per-frame variant/time vectors must have 1 entries");
  }
  frames.time_index = {0};
  try {
    t.agg->step(be, model::FrameGrid{5, 9}, frames, FrameMode::ScalePhase, *cache, as, selected);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "aggregator step: cache was built for 46 tokens per frame, the frames have 51");
  }
}
