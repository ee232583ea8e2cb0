#include "lingbot/model.h"

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/aggregator.h"
#include "model/encoder.h"

namespace lingbot {

struct Model::Impl {
  ModelConfig config;
  std::unique_ptr<model::Encoder> encoder;
  std::unique_ptr<model::Aggregator> aggregator;
  io::TensorMap head_weights;
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
  impl->head_weights = std::move(weights);
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config; }
const model::Encoder& Model::encoder() const { return *impl_->encoder; }
const model::Aggregator& Model::aggregator() const { return *impl_->aggregator; }
const io::TensorMap& Model::head_weights() const { return impl_->head_weights; }

}  // namespace lingbot
