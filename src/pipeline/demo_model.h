#pragma once
// The built-in demo of `lingbot-map run --demo`: a small LingBot-Map network with seeded random
// weights (the topology of the golden "tiny" case) and procedurally rendered frames of a camera
// moving through a textured room. It exercises the whole pipeline in seconds without a download;
// the reconstruction it produces is meaningless because the weights are random.
#include <cstdint>
#include <memory>

#include "io/image.h"
#include "io/tensor_map.h"
#include "lingbot/model.h"
#include "lingbot/model_config.h"

namespace lingbot {

// Demo frame size (width x height, pixels) and default frame count. 112 x 70 is 8 x 5 patches of 14,
// so crop preprocessing at image size 112 leaves the frames unchanged.
inline constexpr int kDemoFrameWidth = 112;
inline constexpr int kDemoFrameHeight = 70;
inline constexpr int kDemoImageSize = 112;
inline constexpr int64_t kDemoFrameCount = 12;
inline constexpr uint64_t kDemoWeightSeed = 20240601;

// Small widths as in the golden tiny case: encoder 128 wide (1 block, 2 heads), aggregator 128 wide
// (4 frame+global pairs, 16 heads of 8), camera head 256 (1 trunk block), DPT features 16.
ModelConfig demo_model_config();

// Seeded random weights for every key of `config` (same seed -> same bytes on every platform):
// LayerNorm weights 1, biases and tokens small, LayerScale 0.1, other matrices and kernels uniform in
// +-1/sqrt(fan_in). Works for any configuration (ModelConfig::release() gives the full-size model).
// The weights ModelLoadOptions::weights_dtype applies to (uses_weights_dtype) are made in
// `block_linear_dtype` (rounded from the same f32 values), so a reduced-precision model never holds
// them in f32; everything else is f32.
io::TensorMap demo_weights(const ModelConfig& config, uint64_t seed = kDemoWeightSeed,
                           DType block_linear_dtype = DType::F32);

// demo_model_config() + demo_weights(), validated through Model::from_weights with `options`.
std::shared_ptr<const Model> make_demo_model(uint64_t seed = kDemoWeightSeed, const ModelLoadOptions& options = {});

// Frame `index` of the demo sequence, rendered by ray casting: a room (floor, ceiling, three walls)
// with procedural checker / stripe / noise textures, seen by a pinhole camera that moves forward
// with a sideways sway and a slow yaw. Deterministic; any index >= 0.
io::ImageU8 render_demo_frame(int64_t index, int width = kDemoFrameWidth, int height = kDemoFrameHeight);

}  // namespace lingbot
