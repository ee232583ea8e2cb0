// Model::load with ModelLoadOptions (issue #16): f32 weights memory-map the checkpoint and borrow
// tensors stored in f32; reduced-precision weights are read and converted, holding fewer bytes.
#include <gtest/gtest.h>

#include <string>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "lingbot/error.h"
#include "lingbot/model.h"
#include "test_temp_dir.h"

namespace lingbot {
namespace {

const std::string kTiny = std::string(LINGBOT_TESTDATA_DIR) + "/tiny";
using io::load_checkpoint;
using io::write_safetensors;

TEST(ModelLoad, ModelLoadMapsF32AndReadsReducedPrecision) {
  const auto f32 = Model::load(kTiny + "/weights.safetensors");
  EXPECT_TRUE(f32->load_stats().mapped);
  EXPECT_EQ(f32->weights_dtype(), DType::F32);
  // The tiny file stores f16, so f32 weights are converted copies: nothing stays borrowed.
  EXPECT_EQ(f32->load_stats().borrowed_bytes, 0u);
  EXPECT_EQ(f32->load_stats().owned_bytes, static_cast<size_t>(f32->config().parameter_count()) * 4);

  ModelLoadOptions o;
  o.weights_dtype = DType::BF16;
  const auto bf16 = Model::load(kTiny + "/weights.safetensors", {}, o);
  EXPECT_FALSE(bf16->load_stats().mapped);
  EXPECT_EQ(bf16->weights_dtype(), DType::BF16);
  EXPECT_LT(bf16->load_stats().owned_bytes, f32->load_stats().owned_bytes);
  EXPECT_GT(bf16->load_stats().seconds, 0.0);
}

// Upstream's base model class builds a point head (and can build a track head) that its streaming
// model does not; upstream's demo loads with strict=False, so a checkpoint carrying them runs there.
// They were refused here ("N unexpected key(s)"): now dropped and named (run's notice, a Python
// UserWarning, inspect's line), whether the file is mapped (f32) or read (bf16).
TEST(ModelLoad, TensorsOfHeadsTheModelDoesNotRunAreIgnoredAndNamed) {
  lingbot_test::TempDir dir;
  io::TensorMap w = load_checkpoint(kTiny + "/weights.safetensors").tensors;
  w.emplace("point_head.scratch.output_conv1.weight", Tensor(Shape{4, 8, 3, 3}));
  w.emplace("point_head.scratch.output_conv1.bias", Tensor(Shape{4}));
  w.emplace("track_head.fc.weight", Tensor(Shape{2, 5}));
  const std::string path = (dir.path / "with_heads.safetensors").string();
  write_safetensors(path, w);
  for (const DType wd : {DType::F32, DType::BF16}) {
    ModelLoadOptions o;
    o.weights_dtype = wd;
    const auto model = Model::load(path, {}, o);
    const ModelLoadStats& s = model->load_stats();
    ASSERT_EQ(s.ignored.size(), 2u);
    EXPECT_EQ(s.ignored[0].module, "point_head");
    EXPECT_EQ(s.ignored[0].tensors, 2);
    EXPECT_EQ(s.ignored[0].parameters, 4 * 8 * 3 * 3 + 4);
    EXPECT_EQ(s.ignored_description(),
              "checkpoint tensors of modules this model does not run are ignored (as upstream's demo drops them): "
              "point_head (2 tensors, 292 parameters), track_head (1 tensors, 10 parameters)");
    EXPECT_EQ(s.owned_bytes + s.borrowed_bytes, Model::load(kTiny + "/weights.safetensors", {}, o)->load_stats().owned_bytes +
                                                    Model::load(kTiny + "/weights.safetensors", {}, o)->load_stats().borrowed_bytes);
  }
  EXPECT_TRUE(Model::load(kTiny + "/weights.safetensors")->load_stats().ignored_description().empty());
  // Inside the model's own modules an unexpected key is still an error: another architecture.
  w.emplace("aggregator.extra_token", Tensor(Shape{4}));
  write_safetensors(path, w);
  try {
    Model::load(path);
    ADD_FAILURE() << "an unexpected key inside the aggregator was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint does not match the model config: 0 missing, 0 mis-shaped, 1 unexpected "
                                     "key(s):\n  unexpected aggregator.extra_token [4]");
  }
}

// A missing file is FileNotFound (a subclass of Error) with the CLI's words, whichever access the
// weights dtype picks (f32 maps the file, bf16 reads it: both opened it first and said "cannot open").
TEST(ModelLoad, AMissingFileIsFileNotFound) {
  lingbot_test::TempDir dir;
  const std::string path = (dir.path / "missing.pt").string();
  for (const DType dtype : {DType::F32, DType::BF16}) {
    ModelLoadOptions o;
    o.weights_dtype = dtype;
    try {
      Model::load(path, {}, o);
      ADD_FAILURE() << "no error";
    } catch (const FileNotFound& e) {
      EXPECT_EQ(std::string(e.what()), "model file not found: " + path);
    }
  }
}

TEST(ModelLoad, ModelLoadBorrowsF32StoredWeights) {
  lingbot_test::TempDir dir;
  const std::string path = (dir.path / "f32.safetensors").string();
  write_safetensors(path, load_checkpoint(kTiny + "/weights.safetensors").tensors, DType::F32);
  const auto m = Model::load(path);
  EXPECT_TRUE(m->load_stats().mapped);
  EXPECT_GT(m->load_stats().borrowed_bytes, 0u);
  EXPECT_EQ(m->load_stats().borrowed_bytes + m->load_stats().owned_bytes,
            static_cast<size_t>(m->config().parameter_count()) * 4);
}

TEST(ModelLoad, WeightsDtypeAppliesToBlockLinearsAndDptConvolutions) {
  for (const char* name : {"aggregator.frame_blocks.3.attn.qkv.weight", "aggregator.patch_embed.blocks.0.mlp.fc2.weight",
                           "depth_head.projects.2.weight", "depth_head.resize_layers.3.weight",
                           "depth_head.scratch.layer1_rn.weight", "depth_head.scratch.refinenet2.resConfUnit1.conv2.weight",
                           "depth_head.scratch.refinenet4.out_conv.weight", "depth_head.scratch.output_conv1.weight",
                           "depth_head.scratch.output_conv2.0.weight"})
    EXPECT_TRUE(uses_weights_dtype(name)) << name;
  for (const char* name : {"aggregator.frame_blocks.3.attn.qkv.bias", "aggregator.frame_blocks.3.norm1.weight",
                           "aggregator.patch_embed.patch_embed.proj.weight", "camera_head.trunk.0.attn.qkv.weight",
                           "depth_head.norm.weight", "depth_head.projects.2.bias", "depth_head.resize_layers.0.weight",
                           "depth_head.resize_layers.1.weight", "depth_head.scratch.output_conv2.2.weight",
                           "depth_head.scratch.refinenet2.resConfUnit1.conv2.bias"})
    EXPECT_FALSE(uses_weights_dtype(name)) << name;
  // The memory a bf16 model holds is exactly 2 bytes per parameter of those tensors, 4 for the rest.
  size_t expected = 0;
  for (const auto& [name, t] : load_checkpoint(kTiny + "/weights.safetensors").tensors)
    expected += static_cast<size_t>(t.numel()) * (uses_weights_dtype(name) ? 2 : 4);
  ModelLoadOptions o;
  o.weights_dtype = DType::BF16;
  EXPECT_EQ(Model::load(kTiny + "/weights.safetensors", {}, o)->load_stats().owned_bytes, expected);
}

}  // namespace
}  // namespace lingbot
