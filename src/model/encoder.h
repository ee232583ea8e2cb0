#pragma once
// DINOv2-with-registers patch encoder (upstream aggregator.patch_embed): ImageNet normalisation,
// 14x14 stride-14 patch conv, cls token + position embedding (resampled to the input's patch grid
// with antialiased bicubic when it differs from the stored grid or the image is not square),
// 4 register tokens without position embedding, `depth` pre-norm blocks (no QK-norm, no RoPE),
// final LayerNorm; returns the normalised patch tokens only.
#include <cstdint>
#include <vector>

#include "compute/backend.h"
#include "io/tensor_map.h"
#include "lingbot/model_config.h"
#include "lingbot/tensor.h"
#include "model/blocks.h"

namespace lingbot::model {

struct EncoderScratch {
  compute::Scratch image, tokens;
  BlockScratch block;
};

class Encoder {
 public:
  // Takes the aggregator.patch_embed.* tensors out of `weights`; the blocks' Linear weights are kept
  // in `weights_dtype`.
  Encoder(const EncoderConfig& config, const ImageNormConfig& norm, io::TensorMap& weights,
          DType weights_dtype = DType::F32, const std::string& prefix = "aggregator.patch_embed.");

  const EncoderConfig& config() const { return config_; }

  // Position embedding for an H x W image: [1 + (H/p)(W/p), C] (cls row first) in be's memory.
  // Compute once per image size and pass to forward().
  compute::Array position_embedding(compute::Backend& be, int64_t H, int64_t W) const;

  // image: f32 [3, H, W] in [0, 1]; out: f32 [(H/p)(W/p), C] patch tokens, row-major patches; both
  // in be's memory.
  void forward(compute::Backend& be, const float* image, int64_t H, int64_t W, const compute::Array& pos_embed,
               float* out, EncoderScratch& scratch) const;

 private:
  EncoderConfig config_;
  ImageNormConfig norm_;
  Tensor patch_w_, patch_b_;  // [C, 3, p, p], [C]
  Tensor cls_token_;          // [C]
  Tensor pos_embed_;          // [1 + M*M, C]
  Tensor register_tokens_;    // [R, C]
  std::vector<BlockWeights> blocks_;
  LayerNormW final_norm_;
};

}  // namespace lingbot::model
