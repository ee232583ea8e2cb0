// ModelConfig: the release config reproduces the full-size manifest key for key; inference from the
// golden weights; validation lists every problem at once; overrides.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "lingbot/model_config.h"

namespace lingbot {
namespace {

const std::string kTestdata = LINGBOT_TESTDATA_DIR;
const std::string kGolden = LINGBOT_SHARED_GOLDEN_DIR;

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

TEST(ModelConfig, ReleaseConfigMatchesFullSizeManifest) {
  const nlohmann::json m = load_json(kTestdata + "/full-size-manifest.json");
  const auto& tensors = m["tensors"];
  const std::vector<ExpectedTensor> keys = ModelConfig::release().expected_keys();
  ASSERT_EQ(keys.size(), tensors.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i].name, tensors[i]["name"].get<std::string>()) << i;
    EXPECT_EQ(keys[i].shape, tensors[i]["shape"].get<Shape>()) << keys[i].name;
  }
  EXPECT_EQ(ModelConfig::release().parameter_count(), m["metadata"]["num_parameters"].get<int64_t>());
  EXPECT_EQ(ModelConfig::release().parameter_count(), 1157943540);
}

// Shapes-only state dict (zero-sized storage is enough for inference and validation).
io::TensorMap shapes_only(const std::vector<ExpectedTensor>& keys) {
  io::TensorMap m;
  for (const auto& k : keys) m.emplace(k.name, Tensor(k.shape, DType::F16));
  return m;
}

TEST(ModelConfig, InferReproducesReleaseStructure) {
  // The release structure (depth 24, head_dim 64, 4 trunk blocks) with narrow widths, so the weights
  // fit in a few MB: inference must recover every field, including the depth-24 selected layers and
  // the head_dim-64 RoPE split.
  ModelConfig rel = ModelConfig::release();
  for (auto [k, v] : {std::pair{"encoder.embed_dim", "128"}, {"encoder.num_heads", "2"}, {"encoder.mlp_hidden", "64"},
                      {"encoder.img_size", "56"}, {"aggregator.embed_dim", "128"}, {"aggregator.num_heads", "2"},
                      {"aggregator.mlp_hidden", "32"}, {"camera.dim_in", "256"}, {"camera.mlp_hidden", "32"},
                      {"camera.pose_branch_hidden", "128"}, {"dpt.dim_in", "256"}, {"dpt.features", "8"},
                      {"dpt.out_channels", "4,8,16,16"}})
    rel.set(k, v);
  const io::TensorMap w = shapes_only(rel.expected_keys());
  const ModelConfig c = ModelConfig::infer(w);
  EXPECT_EQ(c.describe(), rel.describe());
  EXPECT_NO_THROW(c.validate(w));
}

void expect_matches_case(const ModelConfig& c, const nlohmann::json& model, const nlohmann::json& kwargs) {
  const auto& agg = model["aggregator"];
  const auto& enc = model["patch_encoder"];
  const auto& cam = model["camera_head"];
  const auto& dpt = model["depth_head"];
  EXPECT_EQ(c.aggregator.embed_dim, model["embed_dim"].get<int64_t>());
  EXPECT_EQ(c.aggregator.depth, agg["depth"].get<int64_t>());
  EXPECT_EQ(c.aggregator.num_heads, agg["num_heads"].get<int64_t>());
  EXPECT_EQ(c.aggregator.mlp_hidden, agg["mlp_hidden"].get<int64_t>());
  EXPECT_EQ(c.aggregator.selected_layers, agg["selected_layers"].get<std::vector<int64_t>>());
  EXPECT_EQ(c.aggregator.num_register_tokens, agg["num_register_tokens"].get<int64_t>());
  EXPECT_EQ(c.aggregator.num_special_tokens, agg["special_tokens_per_frame"].get<int64_t>());
  EXPECT_EQ(c.aggregator.rope2d_frequency, agg["rope2d_frequency"].get<double>());
  EXPECT_EQ(c.aggregator.rope3d_theta, agg["rope3d_theta"].get<double>());
  EXPECT_EQ(c.aggregator.rope3d_fhw, (agg["rope3d_fhw_dim"].get<std::array<int64_t, 3>>()));
  EXPECT_EQ(c.aggregator.rope3d_max_frames, agg["rope3d_max_seq_len"].get<int64_t>());
  EXPECT_EQ(c.aggregator.qk_norm, agg["qk_norm"].get<bool>());
  EXPECT_EQ(c.image_norm.mean, (agg["image_normalization"]["mean"].get<std::array<float, 3>>()));
  EXPECT_EQ(c.image_norm.std, (agg["image_normalization"]["std"].get<std::array<float, 3>>()));
  EXPECT_EQ(c.encoder.img_size, enc["img_size"].get<int64_t>());
  EXPECT_EQ(c.encoder.patch_size, enc["patch_size"].get<int64_t>());
  EXPECT_EQ(c.encoder.pos_grid(), enc["pos_embed_grid"][0].get<int64_t>());
  EXPECT_EQ(c.encoder.embed_dim, enc["embed_dim"].get<int64_t>());
  EXPECT_EQ(c.encoder.depth, enc["depth"].get<int64_t>());
  EXPECT_EQ(c.encoder.num_heads, enc["num_heads"].get<int64_t>());
  EXPECT_EQ(c.encoder.mlp_hidden, enc["mlp_hidden"].get<int64_t>());
  EXPECT_EQ(c.encoder.num_register_tokens, enc["num_register_tokens"].get<int64_t>());
  EXPECT_EQ(c.encoder.interpolate_offset, enc["interpolate_offset"].get<float>());
  EXPECT_EQ(c.camera.dim_in, cam["dim_in"].get<int64_t>());
  EXPECT_EQ(c.camera.trunk_depth, cam["trunk_depth"].get<int64_t>());
  EXPECT_EQ(c.camera.num_heads, cam["num_heads"].get<int64_t>());
  EXPECT_EQ(c.camera.mlp_hidden, cam["mlp_hidden"].get<int64_t>());
  EXPECT_EQ(c.camera.num_iterations, cam["num_iterations"].get<int64_t>());
  EXPECT_EQ(c.camera.pose_branch_hidden, cam["pose_branch_hidden"].get<int64_t>());
  EXPECT_EQ(c.dpt.dim_in, dpt["dim_in"].get<int64_t>());
  EXPECT_EQ(c.dpt.features, dpt["features"].get<int64_t>());
  EXPECT_EQ(c.dpt.out_channels, (dpt["out_channels"].get<std::array<int64_t, 4>>()));
  EXPECT_EQ(c.dpt.intermediate_layer_idx, (dpt["intermediate_layer_idx"].get<std::array<int64_t, 4>>()));
  EXPECT_EQ(c.dpt.head_features_2, dpt["head_features_2"].get<int64_t>());
  EXPECT_EQ(c.dpt.output_dim, dpt["output_dim"].get<int64_t>());
  EXPECT_EQ(c.dpt.frames_chunk_size, dpt["frames_chunk_size"].get<int64_t>());
  EXPECT_EQ(c.dpt.patch_size, dpt["patch_size"].get<int64_t>());
  // KV-cache settings are per run, not in the weights: the case's values apply through set().
  ModelConfig k = c;
  k.set("kv_cache.sliding_window", std::to_string(kwargs["kv_cache_sliding_window"].get<int64_t>()));
  k.set("kv_cache.scale_frames", std::to_string(kwargs["kv_cache_scale_frames"].get<int64_t>()));
  EXPECT_EQ(k.kv_cache.sliding_window, kwargs["kv_cache_sliding_window"].get<int64_t>());
  EXPECT_EQ(k.kv_cache.cross_frame_special, kwargs["kv_cache_cross_frame_special"].get<bool>());
  EXPECT_EQ(k.kv_cache.include_scale_frames, kwargs["kv_cache_include_scale_frames"].get<bool>());
  EXPECT_EQ(k.kv_cache.camera_only, kwargs["kv_cache_camera_only"].get<bool>());
}

void check_case(const std::string& dir) {
  const nlohmann::json cs = load_json(dir + "/case.json");
  const io::TensorMap w = io::SafetensorsReader::open(dir + "/" + cs["weights_file"].get<std::string>()).read_all();
  const ModelConfig c = ModelConfig::infer(w);
  EXPECT_NO_THROW(c.validate(w));
  expect_matches_case(c, cs["model"], cs["constructor_kwargs"]);
  EXPECT_EQ(c.parameter_count(), io::total_numel(w));
}

TEST(ModelConfig, TinyGoldenWeightsInferAndValidate) { check_case(kTestdata + "/tiny"); }

TEST(ModelConfig, SmallD24GoldenWeightsInferAndValidate) {
  const std::string dir = kGolden + "/small-d24";
  if (!exists(dir + "/case.json")) GTEST_SKIP() << "shared golden data not found at " << dir << " (skipping small-d24)";
  check_case(dir);
}

TEST(ModelConfig, ValidateListsAllProblemsAtOnce) {
  io::TensorMap w = io::SafetensorsReader::open(kTestdata + "/tiny/weights.safetensors").read_all();
  const ModelConfig c = ModelConfig::infer(w);
  w.erase("camera_head.token_norm.bias");
  w.erase("aggregator.scale_token");
  w.at("depth_head.norm.weight") = Tensor(Shape{255}, DType::F16);
  w.emplace("aggregator.extra", Tensor(Shape{2, 2}));
  w.emplace("point_head.extra", Tensor(Shape{2, 2}));  // a module the model does not have: not a problem
  try {
    c.validate(w);
    FAIL() << "validate accepted a broken checkpoint";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "checkpoint does not match the model config: 2 missing, 1 mis-shaped, 1 unexpected key(s):\n"
                 "  missing aggregator.scale_token [1, 2, 1, 128]\n"
                 "  missing camera_head.token_norm.bias [256]\n"
                 "  wrong shape depth_head.norm.weight: expected [256], got [255]\n"
                 "  unexpected aggregator.extra [2, 2]");
  }
}

// A checkpoint of another size misses whole blocks: the message lists the first five of each kind and
// counts the rest (it listed all, 144 lines for one block too many, burying the mis-shaped keys).
TEST(ModelConfig, ValidateListsTheFirstFewOfEachKind) {
  io::TensorMap w = io::SafetensorsReader::open(kTestdata + "/tiny/weights.safetensors").read_all();
  const ModelConfig c = ModelConfig::infer(w);
  std::vector<std::string> block;
  for (const auto& [name, t] : w)
    if (name.rfind("aggregator.frame_blocks.0.", 0) == 0) block.push_back(name);
  ASSERT_GT(block.size(), 6u);
  for (const auto& name : block) w.erase(name);
  w.at("depth_head.norm.weight") = Tensor(Shape{255});
  try {
    c.validate(w);
    FAIL() << "validate accepted a broken checkpoint";
  } catch (const Error& e) {
    const std::string what = e.what();
    const auto lines = std::count(what.begin(), what.end(), '\n');
    EXPECT_EQ(lines, 5 + 1 + 1 + 1) << what;  // 5 missing, "... and N more missing", 1 mis-shaped, the hint
    EXPECT_EQ(what.rfind(detail::concat("checkpoint does not match the model config: ", block.size(),
                                        " missing, 1 mis-shaped, 0 unexpected key(s):\n  missing aggregator.frame_blocks.0."),
                         0), 0u) << what;
    EXPECT_NE(what.find(detail::concat("\n  ... and ", block.size() - 5, " more missing\n"
                                       "  wrong shape depth_head.norm.weight: expected [256], got [255]\n"
                                       "(lingbot-map inspect MODEL lists every key)")),
              std::string::npos) << what;
  }
}

// Tensors of heads the model does not have are not problems (tests/pipeline/model_load_test.cpp:
// ModelLoad.TensorsOfHeadsTheModelDoesNotRunAreIgnoredAndNamed); unexpected keys inside the model's
// modules are (ValidateListsAllProblemsAtOnce).
TEST(ModelConfig, KeysOutsideTheModelsModulesAreNotProblems) {
  io::TensorMap w = io::SafetensorsReader::open(kTestdata + "/tiny/weights.safetensors").read_all();
  const ModelConfig c = ModelConfig::infer(w);
  w.emplace("point_head.scratch.output_conv1.weight", Tensor(Shape{4, 8, 3, 3}));
  w.emplace("point_head.scratch.output_conv1.bias", Tensor(Shape{4}));
  w.emplace("track_head.fc.weight", Tensor(Shape{2, 5}));
  EXPECT_TRUE(c.problems(w).empty());
  EXPECT_TRUE(ModelConfig::is_model_key("depth_head.norm.weight"));
  EXPECT_FALSE(ModelConfig::is_model_key("depth_headx.norm.weight"));
  EXPECT_FALSE(ModelConfig::is_model_key("point_head.norm.weight"));
  // Not one key of the model: said in one line (every key listed as missing hid the prefix).
  io::TensorMap prefixed;
  for (auto& [name, t] : w) prefixed.emplace("model." + name, std::move(t));
  try {
    c.validate(prefixed);
    FAIL() << "a checkpoint without one model key was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "checkpoint holds no tensor of this model: no key starts with aggregator., camera_head. or "
                           "depth_head. (its keys start with 'model.'): a checkpoint of another model, or one whose "
                           "keys carry a prefix");
  }
}

TEST(ModelConfig, SetOverridesAndErrors) {
  ModelConfig c;
  c.set("camera.num_heads", "8");
  c.set("aggregator.selected_layers", "[1, 2,3,4]");
  c.set("kv_cache.camera_only", "true");
  c.set("aggregator.rope3d_fhw", "16,24,24");
  c.set("image_norm.mean", "0.5,0.5,0.5");
  EXPECT_EQ(c.camera.num_heads, 8);
  EXPECT_EQ(c.aggregator.selected_layers, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(c.kv_cache.camera_only);
  EXPECT_EQ(c.image_norm.mean[2], 0.5f);
  EXPECT_NO_THROW(c.check());
  auto msg = [&](const char* k, const char* v) {
    try {
      c.set(k, v);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg("camera.heads", "8"), "unknown config key 'camera.heads' (see `lingbot-map inspect` for the list)");
  EXPECT_EQ(msg("camera.num_heads", "eight"), "config camera.num_heads: 'eight' is not an integer");
  EXPECT_EQ(msg("kv_cache.camera_only", "maybe"), "config kv_cache.camera_only: 'maybe' is not a boolean (true/false)");
  EXPECT_EQ(msg("aggregator.rope3d_fhw", "1,2"), "config aggregator.rope3d_fhw: expected 3 integers, got '1,2'");
  c.set("aggregator.num_heads", "5");
  c.set("aggregator.selected_layers", "0,1,2,24");
  try {
    c.check();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "invalid model config:\n"
                 "  aggregator.num_heads 5 must divide aggregator.embed_dim 1024\n"
                 "  aggregator.selected_layers entry 24 out of range [0, 24)");
  }
  EXPECT_EQ(ModelConfig::settable_keys().size(), 49u);
}

}  // namespace
}  // namespace lingbot
