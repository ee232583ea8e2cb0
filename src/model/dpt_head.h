#pragma once
// DPT depth head (upstream `heads/dpt_head.py: DPTHead`, output_dim 2, activation exp, conf expp1).
//
// Per frame, from the patch tokens of the 4 selected aggregator outputs (token rows after the 6
// special tokens, row-major patches, 2C channels each):
//   for layer l: LayerNorm(2C, eps 1e-5) -> [2C, h, w] -> 1x1 conv projects[l] -> + 0.1·posembed
//                -> resize_layers[l] (ConvT k4 s4 | ConvT k2 s2 | identity | Conv k3 s2 p1)
//   layerN_rn (conv3x3, no bias); RefineNet fusion 4 -> 1 with residual conv units
//   (RCU(x) = conv2(relu(conv1(relu(x)))) + relu(x): upstream's in-place ReLU also rewrites the skip
//   input), bilinear align_corners=True up-sampling to the next level's size (the last one ×2), 1x1 out_conv;
//   output_conv1 (3x3); bilinear align_corners=True to (14h, 14w); + 0.1·posembed;
//   conv3x3 -> ReLU -> conv1x1 -> depth = exp(ch0), conf = 1 + exp(ch1).
// The position embedding is the sin/cos UV embedding of `heads/utils.py` (x half then y half, each
// [sin(p·ω), cos(p·ω)], ω_i = 100^(−i/(D/4)), grid of aspect W/H normalised by the diagonal), computed
// in float64 from a float32 linspace grid, then rounded to float32.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "compute/backend.h"
#include "io/tensor_map.h"
#include "lingbot/model_config.h"
#include "lingbot/tensor.h"
#include "model/geometry.h"
#include "model/rows_view.h"

namespace lingbot::model {

struct DepthOutput {
  Tensor depth;  // f32 [H, W], exp activation (positive)
  Tensor conf;   // f32 [H, W], 1 + exp (> 1)
};

class DptHead {
 public:
  // Takes the `prefix`-named tensors (e.g. "depth_head.projects.0.weight") out of `weights` (moved and
  // erased). The token projections and the convolutions up to output_conv2.0 keep their weights in
  // `weights_dtype` (a bf16/f16 model runs them as reduced-precision GEMMs, see Backend::conv2d); the
  // transposed convolutions, the last 1x1 convolution (it feeds exp()), the norm and every bias stay f32.
  // Throws Error naming the first missing or mis-shaped tensor.
  // Immutable afterwards: one head serves any number of streams.
  DptHead(const DptHeadConfig& config, io::TensorMap& weights, DType weights_dtype = DType::F32,
          const std::string& prefix = "depth_head.");

  // Whether the checkpoint tensor `name` (without the prefix, e.g. "scratch.layer1_rn.weight") is kept in
  // the weights dtype; the model's memory accounting asks.
  static bool keeps_weights_dtype(std::string_view name);

  // One frame on `be`. layers[i] are the patch tokens of aggregator output intermediate_layer_idx[i]
  // in be's memory: (H/p)·(W/p) rows (row-major patches) of dim_in floats. image: the model input
  // size, H and W multiples of patch_size. Returns depth and confidence at H×W (host tensors).
  // Results do not depend on the CPU backend's thread count.
  DepthOutput forward(compute::Backend& be, const std::array<RowsView, 4>& layers, ImageSize image) const;

  const DptHeadConfig& config() const { return cfg_; }

 private:
  struct Conv {
    Tensor w, b;  // b empty when the conv has no bias
    const Tensor* bias() const { return b.empty() ? nullptr : &b; }
  };
  struct Rcu {
    Conv conv1, conv2;
  };
  struct Fusion {
    bool has_residual = true;
    Rcu rcu1, rcu2;
    Conv out_conv;
  };

  compute::Array rcu(compute::Backend& be, const Rcu& u, const compute::Array& x) const;
  compute::Array fusion(compute::Backend& be, const Fusion& f, const compute::Array& x, const compute::Array* skip,
                        int64_t out_h, int64_t out_w) const;

  DptHeadConfig cfg_;
  Tensor norm_w_, norm_b_;
  std::array<Conv, 4> projects_, layer_rn_;
  Conv resize0_, resize1_, resize3_;  // resize_layers.2 is the identity
  std::array<Fusion, 4> refine_;      // refinenet1..4
  Conv out_conv1_, out_conv2a_, out_conv2b_;
};

// The DPT position embedding, f32 [channels, h, w] = 0.1 · sincos(UV grid of w×h, aspect W/H), is
// separable: its first channels/2 planes vary along x only, the others along y only. The head adds
// it from these two tables (Backend::add_axis_tables) and never forms the map, which at 518x378 is
// 100 MB for the last stage. channels must be a multiple of 4.
struct DptPositionTables {
  Tensor columns;  // f32 [channels/2, w]: sin rows then cos rows of the x coordinate
  Tensor rows;     // f32 [channels/2, h]: the same of the y coordinate
};
DptPositionTables dpt_position_tables(int64_t channels, int64_t h, int64_t w, double aspect_w_over_h);
// The whole map from those tables (tests: the reference add_axis_tables must equal).
Tensor dpt_position_embedding(int64_t channels, int64_t h, int64_t w, double aspect_w_over_h);

}  // namespace lingbot::model
