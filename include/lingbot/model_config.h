#pragma once
// ModelConfig: every hyperparameter of LingBot-Map (GCTStream), grouped by module.
//
// Defaults are the release model as upstream's demo.py builds it: DINOv2-L/14 with registers at 518 px, C = 1024, 24 frame+global block pairs, 16 heads x 64,
// camera head on 2C = 2048 with 4 trunk blocks, DPT features 256.
//
// Where values come from (ModelConfig::infer):
//   inferred from tensor shapes: encoder.{patch_size, embed_dim, depth, mlp_hidden,
//     num_register_tokens, img_size (pos-embed grid x patch)}, aggregator.{embed_dim, depth,
//     mlp_hidden, num_heads (embed_dim / q_norm width), num_register_tokens, qk_norm},
//     camera.{dim_in, trunk_depth, mlp_hidden, pose_dim, pose_branch_hidden},
//     dpt.{dim_in, features, out_channels, head_features_2, output_dim}
//   derived by rule (override when a checkpoint differs):
//     encoder.num_heads = embed_dim / 64 (DINOv2 head width)
//     aggregator.rope3d_fhw = [20, 22, 22] for head_dim 64, else upstream's automatic split
//       h = w = 2 * (head_dim / 6), t = head_dim - h - w   (gives [4, 2, 2] for head_dim 8)
//     aggregator.selected_layers = [4, 11, 17, 23] for depth 24 (upstream hard-codes these),
//       [0, 1, ..., depth-1] when depth == number of DPT inputs, else evenly spaced ending at depth-1
//   defaulted (not visible in weights): camera.num_heads 16, camera.num_iterations 4, every eps,
//     RoPE frequencies, image normalisation, the KV-cache settings.
// Any field can be overridden by name with set("group.field", "value") (the CLI's --set).
// Units: sizes and widths are counts (pixels for img_size / patch_size, channels for dims, tokens
// for token counts, frames for the KV-cache settings); a plain value type, freely copied.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lingbot/tensor.h"
#include "lingbot/tensor_map.h"

namespace lingbot {

// Image normalisation applied before the patch embedding: x' = (x - mean[c]) / std[c], x in [0, 1].
struct ImageNormConfig {
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
};

// DINOv2-with-registers patch encoder (aggregator.patch_embed.*).
struct EncoderConfig {
  int64_t img_size = 518;           // training resolution; pos-embed grid = img_size / patch_size per side
  int64_t patch_size = 14;          // conv kernel = stride
  int64_t embed_dim = 1024;
  int64_t depth = 24;               // number of blocks
  int64_t num_heads = 16;           // head_dim = embed_dim / num_heads (64)
  int64_t mlp_hidden = 4096;        // fc1 output width
  int64_t num_register_tokens = 4;  // inserted after cls, no position embedding
  float ln_eps = 1e-6f;             // block norms and final norm
  float interpolate_offset = 0.0f;  // pos-embed resize: no +0.1 offset
  bool interpolate_antialias = true;

  int64_t pos_grid() const { return img_size / patch_size; }  // M of the stored M x M table
  int64_t head_dim() const { return embed_dim / num_heads; }
};

// Alternating frame / global attention blocks (aggregator.frame_blocks.*, aggregator.global_blocks.*).
struct AggregatorConfig {
  int64_t embed_dim = 1024;         // C
  int64_t depth = 24;               // number of frame+global block pairs
  int64_t num_heads = 16;
  int64_t mlp_hidden = 4096;
  int64_t num_register_tokens = 4;
  int64_t num_special_tokens = 6;   // camera + registers + scale; patch tokens start here
  std::vector<int64_t> selected_layers{4, 11, 17, 23};  // block pairs whose outputs feed the heads
  bool qk_norm = true;              // LayerNorm over head_dim on q and k (eps ln_eps)
  float ln_eps = 1e-5f;
  double rope2d_frequency = 100.0;  // frame blocks: inv_freq = f^(-2i/(head_dim/2))
  bool enable_3d_rope = true;       // global blocks use 3D RoPE instead of 2D
  double rope3d_theta = 10000.0;
  std::array<int64_t, 3> rope3d_fhw{20, 22, 22};  // (time, height, width) split of head_dim
  int64_t rope3d_max_frames = 1024; // upstream max_frame_num (its time-index table length); kept for
                                    // the configuration's fidelity, unused here (the 3D RoPE is
                                    // computed for any time index)

  int64_t head_dim() const { return embed_dim / num_heads; }
};

// Causal camera head with iterative pose refinement (camera_head.*).
struct CameraHeadConfig {
  int64_t dim_in = 2048;            // 2C
  int64_t trunk_depth = 4;
  int64_t num_heads = 16;
  int64_t mlp_hidden = 8192;
  int64_t num_iterations = 4;       // refinement iterations
  int64_t pose_dim = 9;             // absT (3) + quaternion xyzw (4) + FoV (2)
  int64_t pose_branch_hidden = 1024;  // dim_in / 2
  float ln_eps = 1e-5f;             // trunk blocks, token_norm, trunk_norm
  float adaln_eps = 1e-6f;          // affine-free LayerNorm of the adaLN modulation

  int64_t head_dim() const { return dim_in / num_heads; }
};

// DPT depth head (depth_head.*).
struct DptHeadConfig {
  int64_t dim_in = 2048;            // 2C
  int64_t patch_size = 14;
  int64_t features = 256;
  std::array<int64_t, 4> out_channels{256, 512, 1024, 1024};
  std::array<int64_t, 4> intermediate_layer_idx{0, 1, 2, 3};  // indexes the selected outputs, not blocks
  int64_t head_features_2 = 32;
  int64_t output_dim = 2;           // depth + confidence
  float ln_eps = 1e-5f;
  int64_t frames_chunk_size = 8;    // frames per head pass (does not change results)
};

// Default streaming KV-cache settings (config keys kv_cache.*, upstream's names), used by a Session
// for each SessionOptions field left at 0 / unset; see SessionOptions for what they do.
struct KvCacheDefaults {
  int64_t scale_frames = 8;           // SessionOptions::scale_frames (--scale-frames)
  int64_t sliding_window = 64;        // SessionOptions::kv_window (--kv-window): stored frames besides the scale frames
  bool cross_frame_special = true;    // SessionOptions::cross_frame_special: evicted frames' specials stay visible
  bool include_scale_frames = true;   // SessionOptions::include_scale_frames: scale frames pinned
  bool camera_only = false;           // SessionOptions::camera_only: evicted frames keep only the camera token
};

// One expected state_dict entry.
struct ExpectedTensor {
  std::string name;
  Shape shape;
};

struct ModelConfig {
  ImageNormConfig image_norm;
  EncoderConfig encoder;
  AggregatorConfig aggregator;
  CameraHeadConfig camera;
  DptHeadConfig dpt;
  KvCacheDefaults kv_cache;

  // The release model (all defaults).
  static ModelConfig release() { return {}; }

  // Infers the shape-visible fields from a state_dict (see the header comment); other fields keep
  // their defaults. Throws Error when a key needed for inference is missing or malformed.
  static ModelConfig infer(const io::TensorMap& weights);
  static ModelConfig infer(const io::TensorInfoMap& index);  // from names/shapes only (no data read)

  // Sets one field by dotted name ("aggregator.num_heads", "kv_cache.sliding_window",
  // "aggregator.selected_layers" = "4,11,17,23", booleans "true"/"false"); throws naming the key/value.
  void set(std::string_view key, std::string_view value);
  static std::vector<std::string> settable_keys();

  // Internal consistency (heads divide widths, RoPE split sums to head_dim, selected layers in range,
  // ...); throws Error listing every violation.
  void check() const;

  // Every state_dict key this configuration needs, with its exact shape, in upstream order.
  std::vector<ExpectedTensor> expected_keys() const;

  // Whether a checkpoint key lies under one of this model's modules (aggregator, camera_head,
  // depth_head). Keys that do not are tensors of heads this model does not run (upstream's
  // point_head / track_head, which checkpoints of its base model class carry; upstream's demo loads
  // with strict=False and drops them): validate() and problems() leave them out, Model::load ignores
  // them and says which (ModelLoadStats::ignored). Unexpected keys under the modules stay errors.
  static bool is_model_key(std::string_view key);

  // Throws one Error listing all missing, unexpected and mis-shaped keys (and non-float tensors).
  void validate(const io::TensorMap& weights) const;
  void validate(const io::TensorInfoMap& index) const;
  // The same check as a list of problems (empty when valid): "missing <key> <shape>",
  // "wrong shape <key>: ...", "wrong dtype <key>: ...", "unexpected <key> <shape>" (is_model_key keys only).
  std::vector<std::string> problems(const io::TensorMap& weights) const;
  std::vector<std::string> problems(const io::TensorInfoMap& index) const;

  // Multi-line human-readable dump ("group.field = value" lines, the names set() accepts).
  std::string describe() const;
  // Total parameter count implied by expected_keys().
  int64_t parameter_count() const;
};

}  // namespace lingbot
