// PyTorch checkpoint reader: golden .pt files against their safetensors twins (bit-identical),
// strided views, dtypes, state-dict discovery, inert unknown objects, and error messages.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/torch_checkpoint.h"
#include "test_files.h"

namespace lingbot::io {
namespace {

using lingbot_test::kTestdata;
const std::string kGolden = LINGBOT_SHARED_GOLDEN_DIR;
const std::string kTorch = kTestdata + "/torch";

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::string error_of(const std::string& path) {
  try {
    load_torch_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every tensor of the .pt equals the safetensors twin (f16 there) bit for bit, in the .pt's dtype.
void expect_same_as_safetensors(const std::string& dir, DType pt_dtype) {
  const TorchCheckpoint pt = load_torch_checkpoint(dir + "/model.pt");
  EXPECT_EQ(pt.location, "model");
  EXPECT_TRUE(pt.int_tensors.empty());
  const TensorMap st = SafetensorsReader::open(dir + "/weights.safetensors").read_all(pt_dtype);
  ASSERT_EQ(pt.tensors.size(), st.size());
  for (const auto& [name, t] : st) {
    auto it = pt.tensors.find(name);
    ASSERT_NE(it, pt.tensors.end()) << name;
    ASSERT_EQ(it->second.dtype(), pt_dtype) << name;
    ASSERT_EQ(it->second.shape(), t.shape()) << name;
    ASSERT_EQ(std::memcmp(it->second.raw(), t.raw(), t.nbytes()), 0) << name;
  }
}

TEST(TorchCheckpoint, TinyGoldenMatchesSafetensorsBitForBit) { expect_same_as_safetensors(kTestdata + "/tiny", DType::F32); }

TEST(TorchCheckpoint, SmallD24GoldenMatchesSafetensorsBitForBit) {
  const std::string dir = kGolden + "/small-d24";
  if (!exists(dir + "/model.pt")) GTEST_SKIP() << "shared golden data not found at " << dir << " (skipping small-d24)";
  expect_same_as_safetensors(dir, DType::F16);
}

TEST(TorchCheckpoint, ConvertsWhileReading) {
  const TorchCheckpoint pt = load_torch_checkpoint(kTestdata + "/tiny/model.pt", DType::F16);
  const TensorMap st = SafetensorsReader::open(kTestdata + "/tiny/weights.safetensors").read_all();
  for (const auto& [name, t] : st) ASSERT_EQ(std::memcmp(pt.tensors.at(name).raw(), t.raw(), t.nbytes()), 0) << name;
}

std::vector<float> values(const Tensor& t) {
  const Tensor f = t.to(DType::F32);
  return std::vector<float>(f.f32(), f.f32() + f.numel());
}

TEST(TorchCheckpoint, ViewsDtypesAndInertObjects) {
  std::remove("/tmp/lingbot_pwned");
  const TorchCheckpoint c = load_torch_checkpoint(kTorch + "/views.pt");
  EXPECT_EQ(c.location, "state_dict");
  const auto& t = c.tensors;
  EXPECT_EQ(values(t.at("a")), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(t.at("a_t").shape(), (Shape{4, 3}));
  EXPECT_EQ(values(t.at("a_t")), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(values(t.at("a_slice")), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(values(t.at("a_row")), (std::vector<float>{8, 9, 10, 11}));
  EXPECT_EQ(values(t.at("expanded")), (std::vector<float>{2, 3, 4, 2, 3, 4}));
  EXPECT_EQ(t.at("scalar").shape(), Shape{});
  EXPECT_EQ(values(t.at("scalar")), (std::vector<float>{7}));
  EXPECT_EQ(t.at("empty").shape(), (Shape{0, 3}));
  EXPECT_EQ(t.at("half").dtype(), DType::F16);
  EXPECT_EQ(values(t.at("half")), (std::vector<float>{0.5f, -2.0f, 65504.0f}));
  EXPECT_EQ(t.at("bf").dtype(), DType::BF16);
  EXPECT_EQ(values(t.at("bf")), (std::vector<float>{1.0f, -0.15625f, 0x1p100f}));
  EXPECT_EQ(t.at("dbl").dtype(), DType::F32);
  EXPECT_EQ(values(t.at("dbl")), (std::vector<float>{0.25f, -1.5f}));
  EXPECT_EQ(c.int_tensors.at("steps").values, (std::vector<int64_t>{7, -1, int64_t{1} << 40}));
  EXPECT_EQ(c.int_tensors.at("steps").dtype, StorageDType::I64);
  EXPECT_EQ(c.int_tensors.at("mask").values, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(t.size(), 10u);
  EXPECT_FALSE(exists("/tmp/lingbot_pwned")) << "the pickle's posix.system call was executed";
}

TEST(TorchCheckpoint, StripsModulePrefix) {
  const TorchCheckpoint c = load_torch_checkpoint(kTorch + "/module_prefix.pt");
  EXPECT_TRUE(c.stripped_module_prefix);
  EXPECT_EQ(c.location, "");
  EXPECT_EQ(values(c.tensors.at("x")), (std::vector<float>{1, 2}));
  EXPECT_EQ(values(c.tensors.at("y")), (std::vector<float>{2}));
}

TEST(TorchCheckpoint, ErrorMessages) {
  EXPECT_EQ(error_of(kTorch + "/no_state_dict.pt"),
            kTorch + "/no_state_dict.pt: no state dict found (the checkpoint holds a dict with keys 'epoch', 'args'; expected "
                     "tensors under 'model', 'state_dict' or at the top level)");
  EXPECT_EQ(error_of(kTorch + "/duplicate_key.pt"), kTorch + "/duplicate_key.pt: state dict key 'w' appears more than once");
  EXPECT_EQ(error_of(kTorch + "/view_out_of_range.pt"),
            kTorch + "/view_out_of_range.pt (a/data.pkl): corrupt pickle stream: tensor view (offset 2, size [2], stride [1]) "
                     "reaches element 3 of storage '0' with 3 elements at byte 157");
  EXPECT_EQ(error_of(kTorch + "/storage_too_small.pt"),
            kTorch + "/storage_too_small.pt: storage '0' declares 1000 elements of 4 bytes but its entry holds 8 bytes");
  EXPECT_EQ(error_of(kTorch + "/legacy.pt"),
            kTorch + "/legacy.pt: legacy (pre-1.6, non-zip) PyTorch checkpoint format is not supported; re-save it with a "
                     "current torch.save or convert it to safetensors");
  EXPECT_EQ(error_of(kTestdata + "/tiny/weights.safetensors"),
            kTestdata + "/tiny/weights.safetensors: not a PyTorch checkpoint (no zip signature) or safetensors file");
  EXPECT_NE(error_of("/nonexistent.pt").find("cannot open '/nonexistent.pt'"), std::string::npos);
}

TEST(Checkpoint, SniffsFormatFromContent) {
  const Checkpoint a = load_checkpoint(kTestdata + "/tiny/model.pt");
  const Checkpoint b = load_checkpoint(kTestdata + "/tiny/weights.safetensors", DType::F32);
  EXPECT_EQ(a.format, CheckpointFormat::Torch);
  EXPECT_EQ(b.format, CheckpointFormat::Safetensors);
  EXPECT_EQ(a.tensors.size(), 258u);
  for (const auto& [name, t] : b.tensors) ASSERT_EQ(std::memcmp(a.tensors.at(name).raw(), t.raw(), t.nbytes()), 0) << name;
  try {
    load_checkpoint(ByteSource::from_memory({'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, "x.bin"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "x.bin: unrecognised checkpoint format (neither a PyTorch zip checkpoint nor safetensors)");
  }
  EXPECT_THROW(load_checkpoint(ByteSource::from_memory({}, "empty")), Error);
}

}  // namespace
}  // namespace lingbot::io
