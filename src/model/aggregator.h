#pragma once
// Aggregator trunk (upstream AggregatorStream): per frame [camera, registers, scale, patches] tokens,
// then `depth` pairs of a frame block (attention within each frame, 2D RoPE) and a global block
// (attention over the streaming KV cache, 3D RoPE with the frame's time index). Only the selected
// depths' outputs are kept: cat(frame_block_out, global_block_out) -> [n_frames, P, 2C].
//
// The aggregator is stateless: the caller (the streaming session) owns the KV cache and decides per
// step which special-token variants and time indices the frames get (rules in DESIGN.md §2).
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "compute/backend.h"
#include "core/phase_clock.h"
#include "io/tensor_map.h"
#include "kvcache/kv_cache.h"
#include "lingbot/model_config.h"
#include "lingbot/tensor.h"
#include "model/blocks.h"

namespace lingbot::model {

// Patch grid of the frames of one stream.
struct FrameGrid {
  int64_t rows = 0, cols = 0;
  int64_t patches() const { return rows * cols; }
};

// The frames of one step (the scale phase: all scale frames; later: one frame).
struct StepFrames {
  int n_frames = 0;
  const float* patch_tokens = nullptr;  // f32 [n_frames, patches, C] from the encoder (backend memory)
  std::vector<int> camera_variant;      // per frame: 0 or 1 (index into the [2, ...] token tables)
  std::vector<int> register_variant;
  std::vector<int> scale_variant;
  std::vector<int64_t> time_index;      // per frame: 3D-RoPE time position
  std::function<void(int64_t blocks_done)> after_block;  // progress: 0 before the first block; empty = not called
};

struct AggregatorScratch {
  PhaseTime frame_blocks, global_blocks;  // accumulated over step() calls
  compute::Scratch tokens;
  BlockScratch block;
  FrameGrid rope2d_grid;
  compute::RopeTable rope2d;  // one frame's 2D table, rebuilt when the grid changes
};

class Aggregator {
 public:
  // Takes the aggregator.{camera,register,scale}_token and frame/global block tensors out of `weights`;
  // the blocks' Linear weights are kept in `weights_dtype`.
  Aggregator(const AggregatorConfig& config, io::TensorMap& weights, DType weights_dtype = DType::F32,
             const std::string& prefix = "aggregator.");

  const AggregatorConfig& config() const { return config_; }
  int64_t tokens_per_frame(const FrameGrid& g) const { return config_.num_special_tokens + g.patches(); }

  // Runs one step on `be`. `cache` must have been built for this geometry (tokens_per_frame, heads,
  // depth) and for be's memory; the step is bracketed by cache.begin_step(mode, n) / end_step().
  // `selected` receives one array [n_frames, P, 2C] in be's memory per selected layer (in config
  // order); nothing else is retained.
  void step(compute::Backend& be, const FrameGrid& grid, const StepFrames& frames, FrameMode mode, KVCache& cache,
            AggregatorScratch& scratch, std::vector<compute::Array>& selected) const;

 private:
  AggregatorConfig config_;
  Tensor camera_token_;    // [2, C]
  Tensor register_token_;  // [2, R, C]
  Tensor scale_token_;     // [2, C]
  std::vector<BlockWeights> frame_blocks_, global_blocks_;
  std::vector<int> selected_slot_;  // per depth: index into `selected`, or -1
};

}  // namespace lingbot::model
