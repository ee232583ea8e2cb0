// `lingbot-map run` feeds the model exactly what upstream's loader produces: the frames it exports
// with --export-preprocessed equal the golden preprocessing case (load_and_preprocess_images with
// PIL) for crop, pad and the 90-degree rotation. PNG inputs, so the comparison is exact.
#include <cmath>

#include "io/image.h"
#include "io/safetensors.h"
#include "run_test_util.h"

namespace {

using namespace run_test;

struct PreprocessCase {
  const char* tensor;  // in preprocess.safetensors
  std::string args;
};

TEST(RunPreprocess, ExportedFramesEqualUpstreamPreprocessing) {
  const fs::path golden = fs::path(kGolden) / "preprocess";
  if (!fs::exists(golden / "preprocess.safetensors"))
    GTEST_SKIP() << "golden preprocessing case not present at " << golden << " (../shared/golden is not on this machine)";
  const auto ref = lingbot::io::SafetensorsReader::open((golden / "preprocess.safetensors").string());
  const PreprocessCase cases[] = {
      {"crop224", "--image-size 224"},
      {"crop350_rot90cw_frame0", "--image-size 350 --rotate-cw90 --first-k 1"},
      {"pad224_rot90cw_frame0", "--image-size 224 --mode pad --rotate-cw90 --first-k 1"},
  };
  for (const PreprocessCase& c : cases) {
    SCOPED_TRACE(c.tensor);
    const fs::path dir = fresh_dir(std::string("preprocess_") + c.tensor);
    // The tiny model (patch 14) runs at any multiple of 14; only the exported inputs matter here.
    const Result r = run_cli("run --images " + golden.string() + " --model " + kTestdata +
                             "/tiny/model.pt --num-scale-frames 2 --kv-window 3 " + c.args + " --out " +
                             (dir / "out").string() + " --export-preprocessed " + (dir / "pre").string());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const lingbot::Tensor want = ref.read(c.tensor, lingbot::DType::F32);  // [N, 3, H, W]
    const int64_t n = want.dim(0), H = want.dim(2), W = want.dim(3);
    for (int64_t i = 0; i < n; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "%06lld.png", static_cast<long long>(i));
      const lingbot::io::ImageU8 got = lingbot::io::load_image(dir / "pre" / name);
      ASSERT_EQ(got.width, W);
      ASSERT_EQ(got.height, H);
      int64_t mismatches = 0;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t x = 0; x < W; ++x) {
            const float g = static_cast<float>(got.pixel(static_cast<int>(x), static_cast<int>(y))[ch]) / 255.0f;
            if (g != want.f32()[((i * 3 + ch) * H + y) * W + x]) ++mismatches;
          }
      EXPECT_EQ(mismatches, 0) << "frame " << i;
    }
    // The run itself used that size.
    const nlohmann::json poses = read_json(dir / "out" / "poses.json");
    EXPECT_EQ(poses.at("image_width"), W);
    EXPECT_EQ(poses.at("image_height"), H);
    EXPECT_EQ(static_cast<int64_t>(poses.at("frames").size()), n);
  }
}

}  // namespace
