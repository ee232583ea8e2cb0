// Preprocessing against upstream's load_and_preprocess_images (golden computed with PIL + torch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/image.h"
#include "io/preprocess.h"
#include "test_errors.h"

using namespace lingbot;
using namespace lingbot::io;

namespace {

const std::filesystem::path kGolden = std::filesystem::path(LINGBOT_SHARED_GOLDEN_DIR) / "preprocess";

// Minimal F32 safetensors reader for the golden (keeps this test independent of the model loader).
struct GoldenTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
std::map<std::string, GoldenTensor> read_golden(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, "golden file");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + n);
  std::map<std::string, GoldenTensor> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(e["dtype"], "F32") << name;
    GoldenTensor t;
    t.shape = e["shape"].get<std::vector<int64_t>>();
    const uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    t.data.resize((end - b) / 4);
    std::memcpy(t.data.data(), bytes.data() + 8 + n + b, end - b);
    out[name] = std::move(t);
  }
  return out;
}

bool golden_present() {
  if (std::filesystem::exists(kGolden / "preprocess.safetensors")) return true;
  std::printf("[ NOTE     ] %s absent: golden preprocessing comparison not run\n", kGolden.c_str());
  return false;
}

// Max |a - b| over equal-shaped tensors; checks the shape.
float max_abs_diff(const Tensor& got, const GoldenTensor& want) {
  EXPECT_EQ(got.shape(), Shape(want.shape.begin(), want.shape.end()));
  if (got.shape() != Shape(want.shape.begin(), want.shape.end())) return INFINITY;
  float m = 0;
  for (int64_t i = 0; i < got.numel(); ++i) m = std::max(m, std::fabs(got.f32()[i] - want.data[i]));
  return m;
}

std::vector<ImageU8> golden_images() {
  std::vector<ImageU8> v;
  for (const char* f : {"000000.png", "000001.png", "000002.png"}) v.push_back(load_image(kGolden / f));
  return v;
}

}  // namespace

TEST(Preprocess, RoundHalfEvenMatchesPython) {
  EXPECT_EQ(round_half_even(0.5), 0);
  EXPECT_EQ(round_half_even(1.5), 2);
  EXPECT_EQ(round_half_even(2.5), 2);
  EXPECT_EQ(round_half_even(-0.5), 0);
  EXPECT_EQ(round_half_even(2.4999), 2);
  EXPECT_EQ(round_half_even(21.0), 21);
}

TEST(Preprocess, SizesFollowUpstreamRule) {
  PreprocessOptions crop{518, 14, Preprocess::Crop};
  EXPECT_EQ(resized_size({518, 294}, crop), (ImageSize{518, 294}));
  EXPECT_EQ(resized_size({1920, 1080}, crop), (ImageSize{518, 294}));  // 291.375/14=20.8 -> 21*14
  EXPECT_EQ(resized_size({1080, 1920}, crop), (ImageSize{518, 924}));
  EXPECT_EQ(preprocessed_size({1080, 1920}, crop), (ImageSize{518, 518}));
  PreprocessOptions pad{224, 14, Preprocess::Pad};
  EXPECT_EQ(resized_size({294, 518}, pad), (ImageSize{126, 224}));
  EXPECT_EQ(preprocessed_size({294, 518}, pad), (ImageSize{224, 224}));
  // 7 * 224 / 224 / 14 = 0.5 -> rounds to 0 (half to even): a clear error, not an empty image.
  try {
    resized_size({448, 14}, PreprocessOptions{224, 14, Preprocess::Crop});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "image of 14x448 (HxW) is too elongated for image_size 224 (a side would be resized to 0 pixels)");
  }
}

TEST(Preprocess, ResizeSameSizeIsCopyAndConstantStaysConstant) {
  ImageU8 img(37, 23);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 7);
  EXPECT_EQ(resize_bicubic(img, 37, 23).rgb, img.rgb);
  ImageU8 flat(50, 40);
  std::fill(flat.rgb.begin(), flat.rgb.end(), 200);
  for (auto [w, h] : {std::pair{17, 13}, {50, 90}, {123, 7}}) {
    const ImageU8 r = resize_bicubic(flat, w, h);
    ASSERT_EQ(r.width, w);
    ASSERT_EQ(r.height, h);
    for (uint8_t v : r.rgb) ASSERT_EQ(v, 200);  // weights are normalised: no drift
  }
}

TEST(Preprocess, MixedSizesArePaddedWhiteLikeUpstream) {
  ImageU8 a(28, 28), b(28, 14);
  std::fill(a.rgb.begin(), a.rgb.end(), 0);
  std::fill(b.rgb.begin(), b.rgb.end(), 0);
  const std::vector<ImageU8> imgs = {std::move(a), std::move(b)};
  const Tensor t = preprocess_images(imgs, PreprocessOptions{28, 14, Preprocess::Crop});
  ASSERT_EQ(t.shape(), (Shape{2, 3, 28, 28}));
  const float* second = t.f32() + 3 * 28 * 28;
  // 14 rows of image centred in 28: rows 0..6 and 21..27 are white, 7..20 black.
  for (int y = 0; y < 28; ++y) {
    const float want = (y >= 7 && y < 21) ? 0.0f : 1.0f;
    EXPECT_EQ(second[y * 28 + 5], want) << "row " << y;
  }
}

// content_rect names exactly the pixels preprocess_image took from the picture: for many sizes, both
// modes, with and without a larger canvas (odd margins included), every pixel outside it is the white
// padding and every pixel inside comes from a picture whose values never reach white.
TEST(Preprocess, ContentRectIsWherePicturePixelsLand) {
  std::mt19937 rng(7);
  int padded = 0;
  for (int trial = 0; trial < 150; ++trial) {
    ImageU8 img(1 + static_cast<int>(rng() % 120), 1 + static_cast<int>(rng() % 120));
    for (uint8_t& v : img.rgb) v = static_cast<uint8_t>(50 + rng() % 100);  // bicubic overshoot stays < 255
    const PreprocessOptions opt{14 * (1 + static_cast<int>(rng() % 5)), 14,
                                trial % 2 ? Preprocess::Pad : Preprocess::Crop};
    ImageSize size;
    try {
      size = preprocessed_size({img.width, img.height}, opt);
    } catch (const Error&) {
      continue;  // too elongated for this image_size
    }
    ImageSize canvas;
    if (trial % 3 == 0) canvas = {size.width + static_cast<int>(rng() % 15), size.height + static_cast<int>(rng() % 15)};
    const Tensor t = preprocess_image(img, opt, canvas);
    const int H = static_cast<int>(t.dim(1)), W = static_cast<int>(t.dim(2));
    const PixelRect r = content_rect({img.width, img.height}, opt, canvas);
    const std::string where = std::to_string(img.width) + "x" + std::to_string(img.height) + " " +
                              std::string(preprocess_name(opt.preprocess)) + " " + std::to_string(opt.image_size) +
                              " on " + std::to_string(W) + "x" + std::to_string(H);
    ASSERT_GT(r.width, 0) << where;
    ASSERT_GT(r.height, 0) << where;
    ASSERT_LE(r.x + r.width, W) << where;
    ASSERT_LE(r.y + r.height, H) << where;
    if (!(r == PixelRect{0, 0, W, H})) ++padded;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          const float v = t.f32()[(static_cast<size_t>(c) * H + y) * W + x];
          if (r.contains(x, y)) ASSERT_LT(v, 1.0f) << where << " pixel " << x << "," << y;
          else ASSERT_EQ(v, 1.0f) << where << " pixel " << x << "," << y;
        }
  }
  EXPECT_GT(padded, 50);  // the cases exercise the padding, not only whole frames
  // Pad mode on a 4:3 picture: 518x392 on the 518 square, 63 white rows above and below.
  EXPECT_EQ(content_rect({640, 480}, PreprocessOptions{518, 14, Preprocess::Pad}), (PixelRect{0, 63, 518, 392}));
  EXPECT_EQ(content_rect({640, 480}, PreprocessOptions{}), (PixelRect{0, 0, 518, 392}));
}

// source_intrinsics gives the rays of the preprocessed frame in the source picture's pixels: a blurred
// spot at a known sub-pixel place in the picture, preprocessed for real (bicubic resize, crop, pad,
// a larger canvas), is found in the frame (its centroid); the ray through that frame pixel under some
// K lands, under source_intrinsics(K), on the spot's place in the picture within 0.03 frame pixels.
TEST(Preprocess, SourceIntrinsicsSeeTheSameRaysInTheSourcePicture) {
  std::mt19937 rng(11);
  struct Case {
    ImageSize source;
    PreprocessOptions opt;
    ImageSize canvas;
  };
  const Case cases[] = {
      {{640, 480}, {224, 14, Preprocess::Crop}, {}},         // landscape: resized to 224 x 168
      {{480, 720}, {224, 14, Preprocess::Crop}, {}},         // portrait: 224 x 336, 56 rows cut off the top
      {{480, 720}, {224, 14, Preprocess::Pad}, {}},          // 154 x 224 on the white 224 square
      {{640, 480}, {224, 14, Preprocess::Pad}, {}},          // 224 x 168, 28 white rows above
      {{500, 700}, {224, 14, Preprocess::Crop}, {238, 252}},  // on a larger canvas of mixed sizes
      {{333, 211}, {112, 14, Preprocess::Crop}, {}},         // sides rounded: sx != sy
  };
  for (const Case& c : cases) {
    const FramePlacement placed = place_on_frame(c.source, c.opt, c.canvas);
    const SourcePlacement& p = placed.source;
    const double sx = static_cast<double>(p.resized.width) / c.source.width;
    const double sy = static_cast<double>(p.resized.height) / c.source.height;
    const PixelRect& r = placed.content;
    ASSERT_EQ(r, content_rect(c.source, c.opt, c.canvas));
    for (int trial = 0; trial < 4; ++trial) {
      // A Gaussian spot, 3 frame pixels wide, well inside the part of the picture the frame keeps.
      const double sigma = 3.0 / sx, margin = 5 * 3.0;
      std::uniform_real_distribution<double> fx(r.x + margin, r.x + r.width - margin), fy(r.y + margin, r.y + r.height - margin);
      const double want_x = (fx(rng) - p.left + 0.5) / sx - 0.5, want_y = (fy(rng) - p.top + 0.5) / sy - 0.5;
      ImageU8 img(c.source.width, c.source.height);
      for (int y = 0; y < img.height; ++y)
        for (int x = 0; x < img.width; ++x) {
          const double g = std::exp(-((x - want_x) * (x - want_x) + (y - want_y) * (y - want_y)) / (2 * sigma * sigma));
          for (int k = 0; k < 3; ++k) img.rgb[(static_cast<size_t>(y) * img.width + x) * 3 + k] = static_cast<uint8_t>(std::lround(60 + 120 * g));
        }
      const Tensor t = preprocess_image(img, c.opt, c.canvas);
      const int W = static_cast<int>(t.dim(2));
      double sum = 0, mx = 0, my = 0;
      for (int y = r.y; y < r.y + r.height; ++y)
        for (int x = r.x; x < r.x + r.width; ++x) {
          const double v = t.f32()[static_cast<size_t>(y) * W + x] - 60.0 / 255.0;
          sum += v;
          mx += v * x;
          my += v * y;
        }
      const double frame_x = mx / sum, frame_y = my / sum;
      const std::array<double, 9> K{200, 0, W / 2.0, 0, 190, t.dim(1) / 2.0, 0, 0, 1};
      const std::array<double, 9> K0 = source_intrinsics(K, p);
      // The ray through the frame pixel, K^-1 [x, y, 1], projected with K0.
      const double dx = (frame_x - K[2]) / K[0], dy = (frame_y - K[5]) / K[4];
      const double got_x = K0[0] * dx + K0[1] * dy + K0[2], got_y = K0[3] * dx + K0[4] * dy + K0[5];
      const std::string where = std::to_string(c.source.width) + "x" + std::to_string(c.source.height) + " " +
                                std::string(preprocess_name(c.opt.preprocess)) + " trial " + std::to_string(trial);
      EXPECT_NEAR(got_x, want_x, 0.03 / sx) << where;
      EXPECT_NEAR(got_y, want_y, 0.03 / sy) << where;
    }
  }
  // Any K, with skew and a last row other than [0, 0, 1] (a homography's): each frame pixel K maps a
  // ray to goes, under K0, to that pixel's place in the picture.
  const SourcePlacement p{{333, 211}, {112, 70}, 3, -5};
  const std::array<double, 9> K{90, 4, 50, 0, 85, 30, 0.01, -0.02, 1.3};
  const std::array<double, 9> K0 = source_intrinsics(K, p);
  for (const std::array<double, 3> ray : {std::array<double, 3>{0.1, -0.2, 1}, {-0.4, 0.3, 2}, {0.7, 0.1, 0.5}}) {
    const auto project = [&](const std::array<double, 9>& M) {
      const double w = M[6] * ray[0] + M[7] * ray[1] + M[8] * ray[2];
      return std::array<double, 2>{(M[0] * ray[0] + M[1] * ray[1] + M[2] * ray[2]) / w,
                                   (M[3] * ray[0] + M[4] * ray[1] + M[5] * ray[2]) / w};
    };
    const auto [x, y] = project(K);
    const auto [x0, y0] = project(K0);
    EXPECT_NEAR(x0, (x - 3 + 0.5) * 333.0 / 112 - 0.5, 1e-9);
    EXPECT_NEAR(y0, (y + 5 + 0.5) * 211.0 / 70 - 0.5, 1e-9);
  }
  // Either size empty would give a scale of 0 or an infinite one: refused, naming both.
  const std::array<double, 9> eye{1, 0, 0, 0, 1, 0, 0, 0, 1};
  lingbot_test::expect_error([&] { source_intrinsics(eye, SourcePlacement{}); },
                             "source_intrinsics: sizes must be positive, got source 0x0, resized 0x0");
  lingbot_test::expect_error([&] { source_intrinsics(eye, SourcePlacement{{640, 480}, {0, 0}}); },
                             "source_intrinsics: sizes must be positive, got source 640x480, resized 0x0");
}

// A frame larger than the canvas fixed for its sequence (a video whose resolution grows mid-stream)
// is refused, the message naming both sizes and the cause.
TEST(Preprocess, AFrameLargerThanTheCanvasIsRefused) {
  ImageU8 tall(28, 28);
  try {
    (void)preprocess_image(tall, PreprocessOptions{28, 14, Preprocess::Crop}, ImageSize{28, 14});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "a 28x28 (WxH) frame preprocesses to 28x28, larger than the 28x14 canvas the sequence was sized "
                           "to (from its frames' sizes, or a video's stated size): a video whose resolution changes "
                           "mid-stream is not supported (split it where it changes)");
  }
}

TEST(Preprocess, GoldenCrop518IsBitExact) {
  if (!golden_present()) GTEST_SKIP() << "golden preprocess folder absent";
  const auto golden = read_golden(kGolden / "preprocess.safetensors");
  const auto imgs = golden_images();
  const Tensor t = preprocess_images(imgs, PreprocessOptions{518, 14, Preprocess::Crop});
  EXPECT_EQ(max_abs_diff(t, golden.at("crop518")), 0.0f);
}

TEST(Preprocess, GoldenCrop224IsBitExact) {
  if (!golden_present()) GTEST_SKIP() << "golden preprocess folder absent";
  const auto golden = read_golden(kGolden / "preprocess.safetensors");
  const auto imgs = golden_images();
  const Tensor t = preprocess_images(imgs, PreprocessOptions{224, 14, Preprocess::Crop});
  EXPECT_EQ(max_abs_diff(t, golden.at("crop224")), 0.0f);
}

TEST(Preprocess, GoldenRotatedCrop350AndPad224AreBitExact) {
  if (!golden_present()) GTEST_SKIP() << "golden preprocess folder absent";
  const auto golden = read_golden(kGolden / "preprocess.safetensors");
  const ImageU8 rot = transpose(load_image(kGolden / "000000.png"), Transpose::Rotate270);
  ASSERT_EQ(rot.width, 294);
  ASSERT_EQ(rot.height, 518);
  const std::vector<ImageU8> one = {rot};
  EXPECT_EQ(max_abs_diff(preprocess_images(one, PreprocessOptions{350, 14, Preprocess::Crop}),
                         golden.at("crop350_rot90cw_frame0")),
            0.0f);
  EXPECT_EQ(max_abs_diff(preprocess_images(one, PreprocessOptions{224, 14, Preprocess::Pad}),
                         golden.at("pad224_rot90cw_frame0")),
            0.0f);
}

// The public entry points (lingbot/preprocess.h) give upstream's frames: each golden picture through
// load_frame and through preprocess_image on its decoded bytes equals its slice of the golden batch.
TEST(Preprocess, PublicLoadFrameAndPreprocessImageAreBitExact) {
  if (!golden_present()) GTEST_SKIP() << "golden preprocess folder absent";
  const auto golden = read_golden(kGolden / "preprocess.safetensors");
  const GoldenTensor& batch = golden.at("crop224");
  ASSERT_EQ(batch.shape.size(), 4u);
  const int64_t per = batch.shape[1] * batch.shape[2] * batch.shape[3];
  const PreprocessOptions opt{224, 14, Preprocess::Crop};
  int i = 0;
  for (const char* f : {"000000.png", "000001.png", "000002.png"}) {
    const ImageU8 img = load_image(kGolden / f);
    for (const Tensor& t : {lingbot::load_frame(kGolden / f, opt),
                            lingbot::preprocess_image(img.rgb.data(), img.width, img.height, opt)}) {
      ASSERT_EQ(t.shape(), Shape(batch.shape.begin() + 1, batch.shape.end())) << f;
      EXPECT_EQ(std::memcmp(t.f32(), batch.data.data() + i * per, per * sizeof(float)), 0) << f;
    }
    ++i;
  }
}

TEST(Preprocess, PublicEntryPointsRefuseBadInputWithExactMessages) {
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::vector<uint8_t> rgb(30 * 20 * 3, 128);
  const auto with = [&](PreprocessOptions o) {
    return message([&] { lingbot::preprocess_image(rgb.data(), 30, 20, o); });
  };
  EXPECT_EQ(with({0, 14, Preprocess::Crop}), "image_size must be positive, got 0");
  EXPECT_EQ(with({4102, 14, Preprocess::Crop}), "image_size must be in 1..4096, got 4102");
  EXPECT_EQ(with({28, 0, Preprocess::Crop}), "patch_size must be in 1..4096, got 0");
  EXPECT_EQ(with({30, 14, Preprocess::Crop}), "image_size must be a multiple of the model's patch size 14, got 30");
  EXPECT_EQ(with({28, 14, static_cast<Preprocess>(7)}), "preprocess must be Crop or Pad, got 7");
  EXPECT_EQ(message([&] { lingbot::preprocess_image(nullptr, 30, 20, {}); }), "preprocess_image: rgb is null");
  EXPECT_EQ(message([&] { lingbot::preprocess_image(rgb.data(), 0, 20, {}); }),
            "preprocess_image: image size must be positive, got 0x20");
  EXPECT_EQ(message([&] { lingbot::preprocess_image(rgb.data(), 60000, 60000, {}); }),
            "preprocess_image: 60000x60000 is more than 178956970 pixels");
  EXPECT_EQ(message([&] { lingbot::load_frame("/nonexistent/x.png", {}); }), "image file not found: /nonexistent/x.png");
  EXPECT_EQ(message([&] { lingbot::load_frame("/nonexistent/x.png", {5, 14, Preprocess::Crop}); }),
            "image_size must be a multiple of the model's patch size 14, got 5");
  // 30x20 at 28, crop: 28 wide, 20 * 28 / 30 / 14 = 1.33 -> 1 patch -> 28x14; pad: 28x28.
  EXPECT_EQ(lingbot::preprocess_image(rgb.data(), 30, 20, {28, 14, Preprocess::Crop}).shape(), (Shape{3, 14, 28}));
  EXPECT_EQ(lingbot::preprocess_image(rgb.data(), 30, 20, {28, 14, Preprocess::Pad}).shape(), (Shape{3, 28, 28}));
}

TEST(Preprocess, NamesParseBackAndUnknownNamesAreRefused) {
  for (const Preprocess p : {Preprocess::Crop, Preprocess::Pad}) EXPECT_EQ(parse_preprocess(preprocess_name(p)), p);
  EXPECT_EQ(preprocess_name(Preprocess::Crop), "crop");
  EXPECT_EQ(preprocess_name(Preprocess::Pad), "pad");
  try {
    parse_preprocess("stretch");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown preprocess 'stretch' (expected crop or pad)");
  }
}
