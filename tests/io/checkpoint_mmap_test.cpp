// Memory-mapped checkpoint loading (issue #16): tensors kept in their stored dtype borrow the
// mapping (no copy) and equal what the pread path reads, stay valid after the checkpoint object is
// gone, never write the file, and converted tensors are owned copies. (Model::load's use of it:
// tests/pipeline/model_load_test.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "test_temp_dir.h"
#include "test_files.h"

namespace lingbot::io {
namespace {

using lingbot_test::kTinyDir;

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.shape(), u.shape()) << name;
    ASSERT_EQ(t.dtype(), u.dtype()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), u.raw(), t.nbytes()), 0) << name;
  }
}

TEST(CheckpointMmap, SafetensorsAndTorchBorrowTheMappingAndMatchRead) {
  for (const char* file : {"/weights.safetensors", "/model.pt"}) {
    const Checkpoint read = load_checkpoint(kTinyDir + file, std::nullopt, CheckpointAccess::Read);
    const Checkpoint mapped = load_checkpoint(kTinyDir + file, std::nullopt, CheckpointAccess::Map);
    expect_same(read.tensors, mapped.tensors);
    size_t borrowed = 0;
    for (const auto& [name, t] : mapped.tensors) borrowed += t.borrowed();
    for (const auto& [name, t] : read.tensors) EXPECT_FALSE(t.borrowed()) << file << " " << name;
    // Every tensor of these files is contiguous and aligned: all are borrowed.
    EXPECT_EQ(borrowed, mapped.tensors.size()) << file;
  }
}

TEST(CheckpointMmap, ConvertedTensorsAreOwned) {
  const Checkpoint mapped = load_checkpoint(kTinyDir + "/weights.safetensors", DType::F32, CheckpointAccess::Map);
  for (const auto& [name, t] : mapped.tensors) {
    EXPECT_EQ(t.dtype(), DType::F32) << name;
    EXPECT_FALSE(t.borrowed()) << name << " (stored f16, converted)";
  }
}

TEST(CheckpointMmap, BorrowedTensorsOutliveTheCheckpointAndNeverWriteTheFile) {
  lingbot_test::TempDir dir;
  const std::string path = (dir.path / "w.safetensors").string();
  TensorMap src;
  src.emplace("a", Tensor::from_f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}));
  write_safetensors(path, src);
  std::ifstream in0(path, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(in0)), std::istreambuf_iterator<char>());
  Tensor a;
  {
    Checkpoint ck = load_checkpoint(path, std::nullopt, CheckpointAccess::Map);
    a = std::move(ck.tensors.at("a"));
  }  // checkpoint and source gone; the tensor keeps the mapping
  ASSERT_TRUE(a.borrowed());
  EXPECT_EQ(a.f32()[5], 6.0f);
  a.f32()[0] = 42.0f;  // private copy-on-write page
  EXPECT_EQ(a.f32()[0], 42.0f);
  std::ifstream in1(path, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(in1)), std::istreambuf_iterator<char>());
  EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace lingbot::io
