#include "lingbot/model.h"

#include <chrono>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/file_util.h"
#include "model/aggregator.h"
#include "model/camera_head.h"
#include "model/dpt_head.h"
#include "model/encoder.h"
#include "pipeline/model_modules.h"

namespace lingbot {

struct Model::Impl {
  ModelConfig config;
  ModelLoadOptions options;
  ModelLoadStats stats;
  std::unique_ptr<model::Encoder> encoder;
  std::unique_ptr<model::Aggregator> aggregator;
  std::unique_ptr<model::CameraHead> camera_head;
  std::unique_ptr<model::DptHead> dpt_head;
};

constexpr std::string_view kDptPrefix = "depth_head.";

bool uses_weights_dtype(std::string_view name) {
  if (name.starts_with(kDptPrefix)) return model::DptHead::keeps_weights_dtype(name.substr(kDptPrefix.size()));
  if (!name.starts_with("aggregator.") || name.find("blocks.") == std::string_view::npos) return false;
  for (std::string_view suffix : {".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc1.weight", ".mlp.fc2.weight"})
    if (name.ends_with(suffix)) return true;
  return false;
}

std::vector<ModelLoadStats::Ignored> modules_not_run(const io::TensorInfoMap& index) {
  std::vector<ModelLoadStats::Ignored> out;
  for (const auto& [name, info] : index) {  // in name order: one module's keys are consecutive
    if (ModelConfig::is_model_key(name)) continue;
    const std::string module = name.substr(0, name.find('.'));
    if (out.empty() || out.back().module != module) out.push_back({module});
    out.back().tensors += 1;
    out.back().parameters += io::checked_numel(info.shape, name);
  }
  return out;
}

std::string ModelLoadStats::ignored_description() const {
  if (ignored.empty()) return "";
  std::string s = "checkpoint tensors of modules this model does not run are ignored (as upstream's demo drops them):";
  for (size_t i = 0; i < ignored.size(); ++i)
    s += detail::concat(i ? ", " : " ", ignored[i].module, " (", ignored[i].tensors, " tensors, ", ignored[i].parameters,
                        " parameters)");
  return s;
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::load(const std::string& path, const ConfigOverrides& overrides,
                                         const ModelLoadOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  io::check_path_exists(path, "model file");  // FileNotFound, as the CLI and the Python module say it
  // f32 weights are used as stored: map the file. Reduced-precision weights are converted, and a
  // converted tensor's mapped source pages would stay in the RSS: read those files instead.
  const bool map = options.weights_dtype == DType::F32;
  io::Checkpoint ck =
      io::load_checkpoint(path, std::nullopt, map ? io::CheckpointAccess::Map : io::CheckpointAccess::Read);
  ModelConfig config = ModelConfig::infer(ck.tensors);
  for (const auto& [key, value] : overrides) config.set(key, value);
  auto model = from_weights(std::move(ck.tensors), config, options);
  ModelLoadStats& s = const_cast<Model&>(*model).impl_->stats;
  s.mapped = map;
  s.file_bytes = ck.file_bytes;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return model;
}

std::shared_ptr<const Model> Model::from_weights(io::TensorMap weights, const ModelConfig& config,
                                                 const ModelLoadOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  config.check();
  config.validate(weights);
  auto impl = std::make_unique<Impl>();
  impl->stats.ignored = modules_not_run(io::index_of(weights));
  std::erase_if(weights, [](const auto& entry) { return !ModelConfig::is_model_key(entry.first); });
  impl->config = config;
  impl->options = options;
  const DType wd = options.weights_dtype;
  size_t borrowed = 0, kept = 0;
  for (const auto& [name, t] : weights) {
    const DType as = uses_weights_dtype(name) ? wd : DType::F32;
    kept += static_cast<size_t>(t.numel()) * dtype_size(as);
    if (t.borrowed() && t.dtype() == as) borrowed += t.nbytes();  // taken as stored: stays borrowed
  }
  impl->encoder = std::make_unique<model::Encoder>(config.encoder, config.image_norm, weights, wd);
  impl->aggregator = std::make_unique<model::Aggregator>(config.aggregator, weights, wd);
  impl->camera_head = std::make_unique<model::CameraHead>(config.camera, weights);
  impl->dpt_head = std::make_unique<model::DptHead>(config.dpt, weights, wd, std::string(kDptPrefix));
  // validate() accepted exactly the expected keys (the other heads' were dropped), and every module took its own.
  LINGBOT_CHECK(weights.empty(), "checkpoint tensor '", weights.empty() ? "" : weights.begin()->first,
                "' is not used by any module");
  impl->stats.borrowed_bytes = borrowed;
  impl->stats.owned_bytes = kept - borrowed;
  impl->stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config; }
DType Model::weights_dtype() const { return impl_->options.weights_dtype; }
const ModelLoadStats& Model::load_stats() const { return impl_->stats; }
const model::Encoder& ModelModules::encoder(const Model& m) { return *m.impl_->encoder; }
const model::Aggregator& ModelModules::aggregator(const Model& m) { return *m.impl_->aggregator; }
const model::CameraHead& ModelModules::camera_head(const Model& m) { return *m.impl_->camera_head; }
const model::DptHead& ModelModules::dpt_head(const Model& m) { return *m.impl_->dpt_head; }

}  // namespace lingbot
