#pragma once
// lingbot::Model: the loaded, immutable network (weights in f32 + ModelConfig). Share one Model
// between any number of Sessions (std::shared_ptr<const Model>); it is never modified after loading.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/tensor_map.h"
#include "model/config.h"

namespace lingbot {

namespace model {
class Encoder;
class Aggregator;
class CameraHead;
class DptHead;
}  // namespace model

// "group.field" = "value" pairs applied to the inferred configuration (ModelConfig::set keys).
using ConfigOverrides = std::vector<std::pair<std::string, std::string>>;

class Model {
 public:
  // Loads a checkpoint file (safetensors or a PyTorch .pt/.pth zip, by content), infers the configuration from the tensor shapes,
  // applies `overrides`, validates every key and shape, and converts the weights to f32.
  // Throws lingbot::Error naming the file and the problem.
  static std::shared_ptr<const Model> load(const std::string& path, const ConfigOverrides& overrides = {});
  // Builds from an in-memory state_dict (consumed) and a configuration; validates both.
  static std::shared_ptr<const Model> from_weights(io::TensorMap weights, const ModelConfig& config);

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  int64_t patch_size() const { return config().encoder.patch_size; }

  // Internal modules (used by the streaming session).
  const model::Encoder& encoder() const;
  const model::Aggregator& aggregator() const;
  const model::CameraHead& camera_head() const;
  const model::DptHead& dpt_head() const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
