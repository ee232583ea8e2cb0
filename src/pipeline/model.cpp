#include "lingbot/model.h"

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/aggregator.h"
#include "model/camera_head.h"
#include "model/dpt_head.h"
#include "model/encoder.h"

namespace lingbot {

struct Model::Impl {
  ModelConfig config;
  std::unique_ptr<model::Encoder> encoder;
  std::unique_ptr<model::Aggregator> aggregator;
  std::unique_ptr<model::CameraHead> camera_head;
  std::unique_ptr<model::DptHead> dpt_head;
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::load(const std::string& path, const ConfigOverrides& overrides) {
  io::TensorMap weights = io::load_checkpoint(path).tensors;
  ModelConfig config = ModelConfig::infer(weights);
  for (const auto& [key, value] : overrides) config.set(key, value);
  return from_weights(std::move(weights), config);
}

std::shared_ptr<const Model> Model::from_weights(io::TensorMap weights, const ModelConfig& config) {
  config.check();
  config.validate(weights);
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->encoder = std::make_unique<model::Encoder>(config.encoder, config.image_norm, weights);
  impl->aggregator = std::make_unique<model::Aggregator>(config.aggregator, weights);
  impl->camera_head = std::make_unique<model::CameraHead>(config.camera, weights);
  impl->dpt_head = std::make_unique<model::DptHead>(config.dpt, weights);
  // validate() accepted exactly the expected keys, and every module took its own.
  LINGBOT_CHECK(weights.empty(), "checkpoint tensor '", weights.empty() ? "" : weights.begin()->first,
                "' is not used by any module");
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config; }
const model::Encoder& Model::encoder() const { return *impl_->encoder; }
const model::Aggregator& Model::aggregator() const { return *impl_->aggregator; }
const model::CameraHead& Model::camera_head() const { return *impl_->camera_head; }
const model::DptHead& Model::dpt_head() const { return *impl_->dpt_head; }

}  // namespace lingbot
