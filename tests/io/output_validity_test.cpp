// The non-finite output rule (io/output_validity.h) as every writer applies it: invalid depth /
// confidence pixels are 0 in 16-bit PNGs, kept in .npy, never a point; a frame without a finite
// camera is listed in poses.json with "valid": false and no matrices and has no TUM line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/npy.h"
#include "io/output_validity.h"
#include "io/writers.h"
#include "test_temp_dir.h"
#include "test_files.h"

using namespace lingbot;
using namespace lingbot::io;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using lingbot_test::slurp;

}  // namespace

TEST(OutputValidity, Predicates) {
  EXPECT_TRUE(is_valid_map_value(0.5f));
  for (float v : {0.0f, -1.0f, kNaN, kInf, -kInf}) EXPECT_FALSE(is_valid_map_value(v)) << v;
  const std::vector<float> mixed = {1, kNaN, -2, kInf, 0, 3};
  EXPECT_EQ(count_non_finite(mixed), 2);
  EXPECT_EQ(count_invalid_map_values(mixed), 4);
  const std::vector<float> ok = {1, 2, 3}, bad = {1, kNaN};
  EXPECT_TRUE(has_valid_geometry(ok, ok, {}));
  EXPECT_FALSE(has_valid_geometry(ok, bad, ok));
  EXPECT_FALSE(has_valid_geometry(bad, ok, ok));
  EXPECT_FALSE(has_valid_geometry(ok, ok, bad));
}

TEST(OutputValidity, PosesJsonMarksFramesWithoutGeometry) {
  lingbot_test::TempDir dir;
  const auto path = dir.path / "poses.json";
  {
    PosesJsonWriter w(path);
    FramePose good;
    good.c2w = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
    good.intrinsics = {100, 0, 50, 0, 100, 40, 0, 0, 1};
    w.append(good);
    FramePose bad = good;
    bad.index = 1;
    bad.intrinsics[0] = std::numeric_limits<double>::infinity();
    // Claiming a non-finite camera is valid is a programming error, never a silent null.
    EXPECT_THROW(w.append(bad), Error);
    bad.valid = false;
    w.append(bad);
  }
  const auto doc = nlohmann::json::parse(slurp(path));
  ASSERT_EQ(doc.at("frames").size(), 2u);
  const auto& f0 = doc["frames"][0];
  EXPECT_EQ(f0.at("valid"), true);
  EXPECT_EQ(f0.at("intrinsics")[0][0], 100.0);
  const auto& f1 = doc["frames"][1];
  EXPECT_EQ(f1.at("valid"), false);
  EXPECT_EQ(f1.at("index"), 1);
  EXPECT_FALSE(f1.contains("c2w"));
  EXPECT_FALSE(f1.contains("w2c"));
  EXPECT_FALSE(f1.contains("intrinsics"));
  EXPECT_EQ(slurp(path).find("null"), std::string::npos);
}

TEST(OutputValidity, TumSkipsNonFinitePoses) {
  lingbot_test::TempDir dir;
  const auto path = dir.path / "t.tum";
  {
    TumWriter w(path);
    RigidTransform<double> m = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
    EXPECT_TRUE(w.append(0, m));
    m[3] = std::nan("");
    EXPECT_FALSE(w.append(1, m));
  }
  const std::string text = slurp(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_EQ(text.find("nan"), std::string::npos);
}

// Depth / confidence: the PNG stores 0 for every invalid pixel, the .npy keeps the computed values,
// select_points never emits such a pixel, whatever the threshold.
TEST(OutputValidity, InvalidMapPixelsAreZeroInPngsKeptInNpyAndNeverPoints) {
  lingbot_test::TempDir dir;
  const std::vector<float> depth = {1.0f, kNaN, -1.0f, 0.0f, kInf, 2.0f};
  const std::vector<float> conf = {5, 5, 5, 5, 5, kNaN};
  write_depth_frame(dir.path, 7, 3, 2, depth, conf);
  const NpyArray npy = read_npy_f32(dir.path / "000007.npy");
  ASSERT_EQ(npy.data.size(), 6u);
  EXPECT_TRUE(std::isnan(npy.data[1]));
  EXPECT_EQ(npy.data[2], -1.0f);
  EXPECT_TRUE(std::isinf(npy.data[4]));
  for (size_t i = 0; i < depth.size(); ++i)
    EXPECT_EQ(quantize_u16(depth[i], kDepthPngUnit) == 0, !is_valid_map_value(depth[i])) << i;

  std::vector<float> points(18, 1.0f), image(18, 0.5f);
  // Confidence threshold below zero would let conf <= 0 through without the rule; depth decides too.
  const PointBatch b = select_points(points, image, conf, -10.0f, 1, depth);
  ASSERT_EQ(b.size(), 1u);  // only pixel 0: valid depth and valid confidence
  const PointBatch no_depth = select_points(points, image, conf, -10.0f, 1);
  EXPECT_EQ(no_depth.size(), 5u);  // pixel 5 has a NaN confidence
}
