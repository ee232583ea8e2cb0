#pragma once
// lingbot::Model: the loaded, immutable network (weights + ModelConfig). Share one Model
// between any number of Sessions (std::shared_ptr<const Model>); it is never modified after loading.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lingbot/dtype.h"
#include "lingbot/model_config.h"
#include "lingbot/tensor_map.h"

namespace lingbot {

struct ModelModules;  // the network's modules, for the streaming session (src/pipeline/model_modules.h)

// "group.field" = "value" pairs applied to the inferred configuration (ModelConfig::set keys).
using ConfigOverrides = std::vector<std::pair<std::string, std::string>>;

// How the weights are kept in memory.
struct ModelLoadOptions {
  // Storage dtype of the big linear layers, qkv, proj, fc1 and fc2 of every encoder and aggregator
  // block (~78% of the parameters; about three quarters of a frame's FLOPs at 518x378 while the KV
  // cache is short, less as the global attention grows with it), and of the DPT head's token
  // projections and convolutions (about a tenth of a frame's FLOPs at 518x378 by an operation count;
  // an eighth of the time, 3.6 of 28.2 CPU s a frame, in docs/performance.md's f32 measurement).
  // f16 / bf16 halve their memory; where the CPU has a native GEMM for the dtype (bf16: AVX512_BF16
  // or AMX, through oneDNN) they also run faster, with the activations rounded to the dtype at each
  // of these layers; elsewhere the weights are widened to f32 on the fly (slower than f32). Everything else (patch embedding, tokens, norms, LayerScale,
  // biases, camera head, the DPT head's transposed convolutions and last 1x1 convolution) stays f32:
  // the camera path amplifies weight error. kernels::gemm_path() / gemm_path_description() say what runs.
  DType weights_dtype = DType::F32;
};

// True for the tensor names ModelLoadOptions::weights_dtype applies to:
// "aggregator.{patch_embed.blocks,frame_blocks,global_blocks}.N.{attn.qkv,attn.proj,mlp.fc1,mlp.fc2}.weight"
// and the DPT head's "depth_head.projects.N.weight", "depth_head.resize_layers.3.weight" and
// "depth_head.scratch.*.weight" except "depth_head.scratch.output_conv2.2.weight".
bool uses_weights_dtype(std::string_view name);

// What Model::load did.
struct ModelLoadStats {
  double seconds = 0.0;        // wall time of load(): read/map, infer, validate, convert
  bool mapped = false;         // the checkpoint was memory-mapped (f32 weights: always)
  uint64_t file_bytes = 0;
  size_t borrowed_bytes = 0;   // weight bytes read straight from the mapping (no copy)
  size_t owned_bytes = 0;      // weight bytes held in the process's own memory
  // Checkpoint tensors of modules this model does not run (ModelConfig::is_model_key), dropped at
  // load: one entry per module (the key's first component), in name order.
  struct Ignored {
    std::string module;  // "point_head"
    int64_t tensors = 0, parameters = 0;
  };
  std::vector<Ignored> ignored;
  // "checkpoint tensors of modules this model does not run are ignored (as upstream's demo drops them):
  // point_head (34 tensors, 32505858 parameters)"; empty when nothing was ignored.
  std::string ignored_description() const;
};
// The checkpoint tensors a model would ignore (ModelLoadStats::ignored), from names and shapes.
std::vector<ModelLoadStats::Ignored> modules_not_run(const io::TensorInfoMap& index);

class Model {
 public:
  // Loads a checkpoint file (safetensors or a PyTorch .pt/.pth zip, by content), infers the configuration from the tensor shapes,
  // applies `overrides`, validates every key and shape, and converts the weights (see ModelLoadOptions).
  // With f32 weights the file is memory-mapped and tensors stored in f32 are used in place (no copy:
  // the pages are read when first used, so part of the load cost moves to the first frame); with
  // f16 / bf16 weights it is read and the big linear layers converted while loading.
  // Throws lingbot::Error naming the file and the problem.
  static std::shared_ptr<const Model> load(const std::string& path, const ConfigOverrides& overrides = {},
                                           const ModelLoadOptions& options = {});
  // Builds from an in-memory state_dict (consumed) and a configuration; validates both.
  static std::shared_ptr<const Model> from_weights(io::TensorMap weights, const ModelConfig& config,
                                                   const ModelLoadOptions& options = {});

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  int64_t patch_size() const { return config().encoder.patch_size; }
  DType weights_dtype() const;
  // load(): every field. from_weights(): `seconds` (its own time), `borrowed_bytes` and `owned_bytes`;
  // `mapped` false and `file_bytes` 0.
  const ModelLoadStats& load_stats() const;

 private:
  friend struct ModelModules;
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
