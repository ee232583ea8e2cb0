// `lingbot-map run` feeds the model exactly what upstream's loader produces: the frames it exports
// with --export-preprocessed equal the golden preprocessing case (load_and_preprocess_images with
// PIL) for crop, pad and the 90-degree rotation. PNG inputs, so the comparison is exact.
#include <cmath>

#include "io/image.h"
#include "io/png.h"
#include "io/preprocess.h"
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
                             "/tiny/model.pt --scale-frames 2 --kv-window 3 " + c.args + " --out " +
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

namespace {

// Frames of different sizes: every frame is padded with white, centred, to the largest preprocessed
// height and width of the selection, as upstream pads a batch.
TEST(RunPreprocess, MixedSizesArePaddedToTheLargestFrame) {
  const fs::path dir = fresh_dir("preprocess_mixed");
  fs::create_directories(dir / "frames");
  for (const char* name : {"000000.png", "000001.png"})
    fs::copy_file(fs::path(kTestdata) / "tiny" / "frames" / name, dir / "frames" / name);
  // A portrait frame (70 wide, 112 high): crop mode at 112 makes it 112 x 112 (resized to 182 rows, centre-cropped).
  const lingbot::io::ImageU8 portrait =
      lingbot::io::transpose(lingbot::io::load_image(fs::path(kTestdata) / "tiny" / "frames" / "000002.png"),
                             lingbot::io::Transpose::Rotate270);
  lingbot::io::write_png_rgb8(dir / "frames" / "000002.png", portrait);
  const Result r = run_cli("run --images " + (dir / "frames").string() + " --model " + kTestdata +
                           "/tiny/model.pt --image-size 112 --scale-frames 2 --kv-window 3 --out " +
                           (dir / "out").string() + " --export-preprocessed " + (dir / "pre").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json poses = read_json(dir / "out" / "poses.json");
  EXPECT_EQ(poses.at("image_width"), 112);
  EXPECT_EQ(poses.at("image_height"), 112);
  // Said before the run (a probe found one portrait photo among landscape ones padded them all silently).
  EXPECT_TRUE(contains(r.out, "notice: the frames preprocess to 2 sizes (WxH: 2 at 112x70, 1 at 112x112): each is centred "
                              "on a 112x112 canvas padded with white, as upstream batches mixed sizes; the padding "
                              "shows no scene (frames of one size and orientation avoid it)\n"))
      << r.out;
  // Frame 0 (112 x 70) sits in rows 21..90 of the 112 x 112 canvas; rows above and below are white.
  const lingbot::io::ImageU8 f0 = lingbot::io::load_image(dir / "pre" / "000000.png");
  const lingbot::io::ImageU8 src = lingbot::io::load_image(fs::path(kTestdata) / "tiny" / "frames" / "000000.png");
  // Each frame's camera in its own picture's pixels: the size of that picture, and K mapped through
  // where the picture landed on the canvas (io::source_intrinsics, checked against real preprocessing
  // in the io tests).
  const lingbot::io::ImageSize sizes[] = {{src.width, src.height}, {src.width, src.height}, {portrait.width, portrait.height}};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    const nlohmann::json& f = poses.at("frames").at(i);
    EXPECT_EQ(f.at("source_size"), (nlohmann::json{sizes[i].width, sizes[i].height}));
    const lingbot::io::SourcePlacement placed =
        lingbot::io::place_on_frame(sizes[i], lingbot::PreprocessOptions{112, 14, lingbot::Preprocess::Crop}, {112, 112}).source;
    std::array<double, 9> K{};
    for (int k = 0; k < 9; ++k) K[k] = f.at("intrinsics")[k / 3][k % 3].get<double>();
    const std::array<double, 9> want = lingbot::io::source_intrinsics(K, placed);
    for (int k = 0; k < 9; ++k) EXPECT_DOUBLE_EQ(f.at("source_intrinsics")[k / 3][k % 3].get<double>(), want[k]) << k;
  }
  // The portrait frame was cut (182 rows to 112, 35 off the top); frame 0 padded (21 rows above).
  EXPECT_EQ(lingbot::io::place_on_frame(sizes[2], {112, 14, lingbot::Preprocess::Crop}, {112, 112}).source.top, -35);
  EXPECT_EQ(lingbot::io::place_on_frame(sizes[0], {112, 14, lingbot::Preprocess::Crop}, {112, 112}).source.top, 21);
  ASSERT_EQ(f0.width, 112);
  ASSERT_EQ(f0.height, 112);
  int64_t bad = 0;
  for (int y = 0; y < 112; ++y)
    for (int x = 0; x < 112; ++x)
      for (int c = 0; c < 3; ++c) {
        const int want = (y >= 21 && y < 91) ? src.pixel(x, y - 21)[c] : 255;
        if (f0.pixel(x, y)[c] != want) ++bad;
      }
  EXPECT_EQ(bad, 0);
}

}  // namespace

namespace {

// Pad mode: the 112 x 70 frames sit in rows 21..90 of the 112 x 112 square; the white rows above and
// below show no scene and give no point to any point export, whatever --conf-threshold lets through
// (the model predicts depth there too: the .npy keep it).
TEST(RunPreprocess, PadMarginsGiveNoPoints) {
  const fs::path out = fresh_dir("preprocess_pad_points") / "out";
  const Result r = run_cli("run --images " + kTinyFrames + " --model " + kTinyModel +
                           " --preprocess pad --image-size 112 --first-k 4 --scale-frames 2 --kv-window 3 "
                           "--conf-threshold 0 --downsample 1 --export depth,ply,colmap,viewer --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const int64_t picture = 4 * 112 * 70;  // every pixel of the 4 pictures (conf > 0 and depth > 0 everywhere)
  EXPECT_EQ(parse_ply_header(slurp(out / "points.ply")).vertices, picture);
  EXPECT_EQ(read_json(out / "summary.json").at("exports").at("ply").at("points"), picture);
  // COLMAP's observations: pixel centres (+0.5) of rows 21..90 only, every column.
  const auto lines = read_lines(out / "colmap" / "images.txt");  // comments, then an image line and its POINTS2D
  int64_t observations = 0;
  double min_y = 1e9, max_y = -1e9, min_x = 1e9, max_x = -1e9;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i][0] == "#") continue;
    const auto& points2d = lines.at(++i);
    for (size_t k = 0; k + 2 < points2d.size(); k += 3) {
      const double x = std::stod(points2d[k]), y = std::stod(points2d[k + 1]);
      min_x = std::min(min_x, x), max_x = std::max(max_x, x);
      min_y = std::min(min_y, y), max_y = std::max(max_y, y);
      ++observations;
    }
  }
  EXPECT_EQ(observations, picture);
  EXPECT_EQ(min_y, 21.5);
  EXPECT_EQ(max_y, 90.5);
  EXPECT_EQ(min_x, 0.5);
  EXPECT_EQ(max_x, 111.5);
  // The depth maps still cover the whole square.
  EXPECT_EQ(parse_png_header(slurp(out / "depth" / "000000.png")).height, 112u);
}

}  // namespace
