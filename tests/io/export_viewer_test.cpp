// The "viewer" export: viewer/NNNNNN.bin byte layout (docs/viewer.md "Viewer frame format"), its points equal
// frame_points (the PLY's), the preview is the box average, and the exporter's file handling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "core/error.h"
#include "io/export_depth_preview.h"
#include "io/export_viewer.h"
#include "test_temp_dir.h"

using namespace lingbot;
using namespace lingbot::io;

namespace {

template <typename T>
T at(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

struct FrameData {
  int W = 7, H = 4;
  std::vector<float> image, depth, conf, points;
  ExportFrame frame;
};

FrameData make_frame(uint32_t seed, int64_t index) {
  FrameData d;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const size_t hw = static_cast<size_t>(d.W * d.H);
  d.image.resize(3 * hw);
  for (float& v : d.image) v = std::round(u(rng) * 255.f) / 255.f;
  d.depth.resize(hw);
  for (float& v : d.depth) v = 0.5f + 2.f * u(rng);
  d.depth[3] = std::numeric_limits<float>::quiet_NaN();
  d.conf.resize(hw);
  for (float& v : d.conf) v = 1.f + 3.f * u(rng);
  d.points.resize(3 * hw);
  for (float& v : d.points) v = 4.f * u(rng) - 2.f;
  ExportFrame& f = d.frame;
  f.index = index;
  f.timestamp = 0.25 * static_cast<double>(index);
  f.keyframe = index % 2 == 0;
  f.image = d.image;
  static const float pose_enc[9] = {0, 0, 0, 0, 0, 0, 1, 1, 1};
  f.pose_enc = pose_enc;
  // c2w: 90 degrees about z, then a translation.
  f.c2w = {0, -1, 0, 0.5, 1, 0, 0, -1.25, 0, 0, 1, 2};
  f.w2c = rigid_inverse(f.c2w);
  f.intrinsics = {10, 0, 3.5, 0, 11, 2, 0, 0, 1};
  f.depth = d.depth;
  f.depth_conf = d.conf;
  f.world_points = d.points;
  return d;
}

}  // namespace

TEST(ExportViewer, LayoutMatchesTheDocumentedFormat) {
  FrameData d = make_frame(7, 3);
  const PointFilter filter{2.0f, 2};
  const PointBatch pts = frame_points(d.frame, d.W, filter);
  ASSERT_GT(pts.size(), 2u);
  ASSERT_EQ(pts.conf.size(), pts.size());
  d.frame.timestamp_unit = TimestampUnit::Seconds;
  const std::vector<uint8_t> b = encode_viewer_frame(d.frame, d.W, d.H, pts, filter.conf_threshold, /*preview_max_side=*/3);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "LBVF");
  EXPECT_EQ(at<uint32_t>(b, 4), 2u);
  EXPECT_EQ(at<uint32_t>(b, 8), 128u);
  EXPECT_EQ(at<uint32_t>(b, 12), kViewerFlagTimestampSeconds);  // frame 3: not a keyframe, a clock
  EXPECT_EQ(at<int64_t>(b, 16), 3);
  EXPECT_EQ(at<double>(b, 24), 0.75);
  EXPECT_EQ(at<uint32_t>(b, 32), 7u);
  EXPECT_EQ(at<uint32_t>(b, 36), 4u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(at<float>(b, 40 + 4 * i), static_cast<float>(d.frame.c2w[i])) << i;
  EXPECT_EQ(at<float>(b, 88), 10.f);
  EXPECT_EQ(at<float>(b, 92), 11.f);
  EXPECT_EQ(at<float>(b, 96), 3.5f);
  EXPECT_EQ(at<float>(b, 100), 2.f);
  const uint32_t n = at<uint32_t>(b, 104);
  EXPECT_EQ(n, pts.size());
  EXPECT_EQ(at<float>(b, 108), 2.0f);
  // 7 x 4 with at most 3 per side: k = 3 -> a 2 x 1 preview whose pixels span columns 0-2 and 3-6, rows
  // 0-3 (the whole frame: the viewer stretches the preview over the whole frustum).
  const uint32_t pw = at<uint32_t>(b, 112), ph = at<uint32_t>(b, 116);
  EXPECT_EQ(pw, 2u);
  EXPECT_EQ(ph, 1u);
  const DepthRange range = depth_preview_range(d.depth);
  EXPECT_EQ(at<float>(b, 120), range.lo);
  EXPECT_EQ(at<float>(b, 124), range.hi);
  auto pad4 = [](size_t v) { return (v + 3) / 4 * 4; };
  ASSERT_EQ(b.size(), 128 + 12 * n + 4 * n + pad4(3 * n) + pad4(3 * pw * ph));
  size_t off = 128;
  for (size_t i = 0; i < 3 * n; ++i) EXPECT_EQ(at<float>(b, off + 4 * i), pts.xyz[i]);
  off += 12 * n;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(at<float>(b, off + 4 * i), pts.conf[i]);
    EXPECT_GT(pts.conf[i], 2.0f);
  }
  off += 4 * n;
  for (size_t i = 0; i < 3 * n; ++i) EXPECT_EQ(b[off + i], pts.rgb[i]);
  off += pad4(3 * n);
  // Preview pixel x = mean of the frame pixels it spans, per channel, rounded.
  const size_t hw = static_cast<size_t>(d.W * d.H);
  const uint32_t columns[3] = {0, 3, 7};
  for (uint32_t x = 0; x < pw; ++x) {
    for (size_t c = 0; c < 3; ++c) {
      double sum = 0;
      for (int yy = 0; yy < 4; ++yy)
        for (uint32_t xx = columns[x]; xx < columns[x + 1]; ++xx) sum += d.image[c * hw + static_cast<size_t>(yy * d.W) + xx];
      const double count = 4.0 * (columns[x + 1] - columns[x]);
      EXPECT_EQ(b[off + 3 * x + c], static_cast<uint8_t>(std::lround(sum / count * 255))) << x << " " << c;
    }
  }
}

TEST(ExportViewer, WithoutConfidenceEveryPointIsShown) {
  FrameData d = make_frame(8, 0);
  d.frame.depth_conf = {};
  const PointBatch pts = frame_points(d.frame, d.W, {1.5f, 1});
  ASSERT_TRUE(pts.conf.empty());
  const std::vector<uint8_t> b = encode_viewer_frame(d.frame, d.W, d.H, pts, 1.5f);
  EXPECT_EQ(at<uint32_t>(b, 12), kViewerFlagKeyframe);  // a keyframe; its timestamp is its index
  const uint32_t n = at<uint32_t>(b, 104);
  ASSERT_EQ(n, pts.size());
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(at<float>(b, 128 + 12 * n + 4 * i), std::numeric_limits<float>::infinity());
  // Frames up to 160 pixels keep their size.
  EXPECT_EQ(at<uint32_t>(b, 112), 7u);
  EXPECT_EQ(at<uint32_t>(b, 116), 4u);
}

TEST(ExportViewer, ExporterWritesFramesInOrderAndCleansOnlyItsFiles) {
  lingbot_test::TempDir tmp;
  const auto dir = tmp.path / "viewer";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "000099.bin") << "old";
  std::ofstream(dir / "notes.txt") << "keep";
  remove_viewer_outputs(tmp.path);
  EXPECT_FALSE(std::filesystem::exists(dir / "000099.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir / "notes.txt"));

  ExportRun run;
  run.out_dir = tmp.path;
  run.width = 7;
  run.height = 4;
  run.points = {1.5f, 1};
  auto ex = make_viewer_exporter();
  ex->prepare(run);
  ex->begin(run);
  int64_t points = 0;
  for (int64_t i = 0; i < 3; ++i) {
    FrameData d = make_frame(static_cast<uint32_t>(10 + i), i);
    ex->frame(d.frame);
    points += static_cast<int64_t>(frame_points(d.frame, run.width, run.points).size());
    EXPECT_TRUE(std::filesystem::exists(dir / viewer_frame_file_name(i)));
  }
  FrameData skip = make_frame(20, 5);
  try {
    ex->frame(skip.frame);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "viewer frames must be written in order: got frame 5, expected 3");
  }
  ex->finish();
  EXPECT_EQ(ex->report()["frames"], 3);
  EXPECT_EQ(ex->report()["points"], points);
  EXPECT_EQ(viewer_frame_file_name(12), "000012.bin");
}
