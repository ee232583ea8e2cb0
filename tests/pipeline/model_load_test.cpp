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
