// DINOv2 encoder against the golden patch tokens of frame 0 (tiny from the project's test data,
// small-d24 from ../shared/golden when present).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "compute/cpu/cpu_backend.h"
#include "io/safetensors.h"
#include "lingbot/model_config.h"
#include "model/encoder.h"

namespace {

namespace fs = std::filesystem;
using namespace lingbot;

double max_abs(const float* a, const float* b, int64_t n, double* ref_max) {
  double m = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
    r = std::max(r, std::abs(static_cast<double>(b[i])));
  }
  *ref_max = r;
  return m;
}

void check_case(const fs::path& dir) {
  io::TensorMap w = io::SafetensorsReader::open((dir / "weights.safetensors").string()).read_all();
  const ModelConfig cfg = ModelConfig::infer(w);
  model::Encoder enc(cfg.encoder, cfg.image_norm, w);
  const auto ref = io::SafetensorsReader::open((dir / "reference.safetensors").string());
  const Tensor images = ref.read("images", DType::F32);
  const Tensor expected = ref.read("patch_tokens_frame0", DType::F32);
  const int64_t H = images.dim(2), W = images.dim(3);
  for (int threads : {1, 2}) {
    compute::CpuBackend be(threads);
    const compute::Array pos = enc.position_embedding(be, H, W);
    compute::Array image = be.upload_array(images);
    compute::Array out_b(be, expected.shape());
    model::EncoderScratch scratch;
    enc.forward(be, image.data(), H, W, pos, out_b.data(), scratch);
    const Tensor out = be.download_array(out_b);
    double ref_max = 0;
    const double err = max_abs(out.f32(), expected.f32(), out.numel(), &ref_max);
    EXPECT_LE(err, 1e-4 * ref_max) << dir << " threads " << threads;
  }
}

}  // namespace

TEST(Encoder, TinyPatchTokensFrame0) { check_case(fs::path(LINGBOT_TESTDATA_DIR) / "tiny"); }

TEST(Encoder, SmallD24PatchTokensFrame0) {
  const fs::path dir = fs::path(LINGBOT_SHARED_GOLDEN_DIR) / "small-d24";
  if (!fs::exists(dir / "reference.safetensors"))
    GTEST_SKIP() << "shared golden case not present: " << dir << " (only the committed tiny case runs)";
  check_case(dir);
}

TEST(Encoder, SquareMatchingGridUsesStoredTableAndBitIdenticalThreads) {
  io::TensorMap w = io::SafetensorsReader::open(std::string(LINGBOT_TESTDATA_DIR) + "/tiny/weights.safetensors").read_all();
  const Tensor stored = w.at("aggregator.patch_embed.pos_embed").to(DType::F32);
  const ModelConfig cfg = ModelConfig::infer(w);
  model::Encoder enc(cfg.encoder, cfg.image_norm, w);
  const int64_t side = cfg.encoder.img_size;  // 98 -> 7x7 grid, the stored one
  compute::CpuBackend be1(1), be2(2);
  const compute::Array same = enc.position_embedding(be1, side, side);
  ASSERT_EQ(same.numel(), stored.numel());
  EXPECT_EQ(0, std::memcmp(same.data(), stored.f32(), static_cast<size_t>(same.numel()) * sizeof(float)));
  // A non-square image resamples even a matching patch count; 1 and 2 threads agree bit for bit.
  const compute::Array a = enc.position_embedding(be1, 70, 140), b = enc.position_embedding(be2, 70, 140);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)));
  Tensor img({3, 70, 140});
  for (int64_t i = 0; i < img.numel(); ++i) img.f32()[i] = static_cast<float>((i * 37) % 255) / 255.0f;
  compute::Array o1(be1, {50, cfg.encoder.embed_dim}), o2(be2, {50, cfg.encoder.embed_dim});
  model::EncoderScratch s1, s2;
  enc.forward(be1, img.f32(), 70, 140, a, o1.data(), s1);
  enc.forward(be2, img.f32(), 70, 140, a, o2.data(), s2);
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), static_cast<size_t>(o1.numel()) * sizeof(float)));
}
