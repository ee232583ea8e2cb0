// Exporters (io/export.h): the --export list, the invalid-value rule, and every new format read by
// the tool of its field: numpy (NPZ), COLMAP 3.8 (text model), the Khronos glTF validator (GLB).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <csignal>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/byte_source.h"
#include "io/export_depth_preview.h"
#include "io/export.h"
#include "io/export_bss.h"
#include "io/export_colmap.h"
#include "io/export_glb.h"
#include "io/export_npz.h"
#include "io/image.h"
#include "io/npy.h"
#include "io/zip_archive.h"
#include "io/zip_writer.h"
#include "test_temp_dir.h"

#include "io/stb_image_quiet.h"  // implementation: stb_image_reader.cpp
#include "test_files.h"

using namespace lingbot;
using namespace lingbot::io;
namespace fs = std::filesystem;

namespace {

using lingbot_test::TempDir;

const fs::path kRepo = fs::path(LINGBOT_TESTDATA_DIR).parent_path();
const fs::path kTools = kRepo / "tests" / "tools";

using lingbot_test::slurp;

struct Cmd {
  int exit_code = -1;
  std::string out;
};
// Runs a shell command; stdout+stderr captured. A missing tool gives exit code 127: a failure.
Cmd run(const std::string& command, const fs::path& scratch) {
  const fs::path log = scratch / "cmd.log";
  const int st = std::system((command + " >" + log.string() + " 2>&1").c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(log)};
}

// A synthetic frame with owned storage: a camera at `centre` looking along +z rotated by `yaw`
// about y, a fronto-parallel depth ramp, and world points unprojected as the engine does
// (pixel (x, y) at integer coordinates, K with cx = W/2, cy = H/2).
struct Synth {
  int w, h;
  std::vector<float> image, pose_enc, depth, conf, points;
  ExportFrame f;
  Synth(int64_t index, int w_, int h_, double yaw, std::array<double, 3> centre) : w(w_), h(h_) {
    const size_t hw = static_cast<size_t>(w) * h;
    image.resize(3 * hw);
    for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<float>((i * 7 + index) % 256) / 255.0f;
    const double c = std::cos(yaw), s = std::sin(yaw);
    f.c2w = {c, 0, s, centre[0], 0, 1, 0, centre[1], -s, 0, c, centre[2]};
    f.w2c = rigid_inverse(f.c2w);
    const double fx = 0.8 * w, fy = 0.8 * w;
    f.intrinsics = {fx, 0, w / 2.0, 0, fy, h / 2.0, 0, 0, 1};
    pose_enc = {static_cast<float>(centre[0]), static_cast<float>(centre[1]), static_cast<float>(centre[2]), 0, 0, 0, 1,
                1.0f, 1.0f};
    depth.resize(hw);
    conf.resize(hw);
    points.resize(3 * hw);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const size_t i = static_cast<size_t>(y) * w + x;
        depth[i] = 1.0f + 0.01f * static_cast<float>(x + y);
        conf[i] = 2.0f + static_cast<float>(i % 3);
        const double X = (x - w / 2.0) / fx * depth[i], Y = (y - h / 2.0) / fy * depth[i], Z = depth[i];
        for (int r = 0; r < 3; ++r)
          points[3 * i + r] = static_cast<float>(f.c2w[r * 4] * X + f.c2w[r * 4 + 1] * Y + f.c2w[r * 4 + 2] * Z + f.c2w[r * 4 + 3]);
      }
    f.index = index;
    f.timestamp = 0.1 * static_cast<double>(index);
    f.source = "synth";
    f.keyframe = index % 2 == 0;
    f.scale_frame = index < 2;
    f.image = image;
    f.pose_enc = pose_enc;
    f.depth = depth;
    f.depth_conf = conf;
    f.world_points = points;
  }
  Synth(const Synth&) = delete;
};

ExportRun run_info(const fs::path& out, int w, int h) {
  ExportRun r;
  r.out_dir = out;
  r.width = w;
  r.height = h;
  r.scale_frames = 2;
  r.points = {1.5f, 1};
  r.meta = {{"image_width", w}, {"image_height", h}};
  return r;
}

// ---- the list -----------------------------------------------------------------------------------
TEST(Export, ListParsesNamesInRegistryOrder) {
  EXPECT_EQ(default_export_list(), "poses,tum,depth,ply,depth-preview,viewer");
  EXPECT_EQ(parse_export_list(default_export_list()),
            (std::vector<std::string>{"poses", "tum", "depth", "ply", "depth-preview", "viewer"}));
  EXPECT_EQ(parse_export_list("glb, poses,glb"), (std::vector<std::string>{"poses", "glb"}));
  EXPECT_EQ(parse_export_list("all").size(), export_kinds().size());
  for (const ExportKind& k : export_kinds()) EXPECT_EQ(make_exporter(k.name)->name(), k.name);
}

TEST(Export, UnknownNameNamesTheChoices) {
  try {
    parse_export_list("poses,colmapp");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown export 'colmapp' (choose from poses, tum, depth, ply, depth-preview, viewer, npz, colmap, glb, bss, all)");
  }
  for (const std::string list : {"poses,,ply", ""}) {
    try {
      parse_export_list(list);
      ADD_FAILURE() << "'" << list << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "empty export name in '" + list +
                                           "' (choose from poses, tum, depth, ply, depth-preview, viewer, npz, colmap, "
                                           "glb, bss, all)");
    }
  }
}

// ---- the invalid-value rule ---------------------------------------------------------------------
TEST(Export, InvalidSamplesAndNonFiniteFramesGiveNoPoints) {
  EXPECT_TRUE(is_valid_map_value(1e-30f));
  for (float v : {0.0f, -1.0f, NAN, INFINITY, -INFINITY}) EXPECT_FALSE(is_valid_map_value(v)) << v;
  Synth s(0, 4, 3, 0.0, {0, 0, 0});
  const PointFilter all{1.5f, 1};
  EXPECT_EQ(frame_points(s.f, s.w, all).size(), 12u);
  s.depth[0] = NAN;
  s.depth[1] = 0;
  s.depth[2] = -1;
  s.conf[3] = INFINITY;  // above the threshold, but not finite: invalid
  EXPECT_EQ(frame_points(s.f, s.w, all).size(), 8u);
  EXPECT_TRUE(geometry_finite(s.f));
  s.f.intrinsics[0] = INFINITY;
  EXPECT_FALSE(geometry_finite(s.f));
  EXPECT_EQ(frame_points(s.f, s.w, all).size(), 0u);
  s.f.intrinsics[0] = 3;
  s.pose_enc[8] = NAN;
  EXPECT_FALSE(geometry_finite(s.f));
}

// A padded frame's margins (ExportFrame::content) give no point; the other rules still apply inside.
TEST(Export, PaddingGivesNoPoints) {
  Synth s(0, 5, 4, 0.0, {0, 0, 0});
  const PointFilter all{1.5f, 1};
  s.f.content = PixelRect{1, 1, 3, 2};  // columns 1-3, rows 1-2
  PointBatch b = frame_points(s.f, s.w, all);
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(b.pixel, (std::vector<uint32_t>{6, 7, 8, 11, 12, 13}));  // row * 5 + column
  s.depth[7] = NAN;
  EXPECT_EQ(frame_points(s.f, s.w, all).pixel, (std::vector<uint32_t>{6, 8, 11, 12, 13}));
  EXPECT_EQ(frame_points(s.f, s.w, {1.5f, 2}).pixel, (std::vector<uint32_t>{6, 11, 13}));  // every 2nd of those
  s.f.content = PixelRect{0, 0, 5, 4};
  EXPECT_EQ(frame_points(s.f, s.w, all).size(), 19u);  // the whole frame: only the NaN depth goes
  s.f.content = PixelRect{2, 0, 0, 4};
  EXPECT_EQ(frame_points(s.f, s.w, all).size(), 0u);
  s.f.content.reset();
  EXPECT_EQ(frame_points(s.f, s.w, all).size(), 19u);
  PointArea narrow;
  narrow.frame_width = 3;
  narrow.rect = PixelRect{0, 0, 1, 1};
  try {
    select_points(s.points, s.image, s.conf, 1.5f, 1, s.depth, narrow);
    ADD_FAILURE() << "a frame width that does not divide the points was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "point area: 20 points are not rows of 3 pixels");
  }
}

// A caller's mask (ExportFrame::point_mask: sky, moving objects) leaves its pixels out of every point
// cloud, together with the padding and the invalid pixels; the depth maps are not its business.
TEST(Export, PointMaskLeavesItsPixelsOut) {
  Synth s(0, 5, 4, 0.0, {0, 0, 0});
  const PointFilter all{1.5f, 1};
  std::vector<uint8_t> mask(20, 1);
  mask[0] = mask[7] = mask[19] = 0;
  mask[12] = 255;  // any nonzero value keeps the pixel
  s.f.point_mask = mask;
  PointBatch b = frame_points(s.f, s.w, all);
  ASSERT_EQ(b.size(), 17u);
  for (uint32_t p : {0u, 7u, 19u}) EXPECT_EQ(std::count(b.pixel.begin(), b.pixel.end(), p), 0) << p;
  s.f.content = PixelRect{1, 1, 3, 2};  // with the padding rule: both apply
  EXPECT_EQ(frame_points(s.f, s.w, all).pixel, (std::vector<uint32_t>{6, 8, 11, 12, 13}));
  s.depth[8] = NAN;
  EXPECT_EQ(frame_points(s.f, s.w, {1.5f, 2}).pixel, (std::vector<uint32_t>{6, 12}));  // then every 2nd
  std::vector<uint8_t> short_mask(19, 1);
  s.f.point_mask = short_mask;
  try {
    frame_points(s.f, s.w, all);
    ADD_FAILURE() << "a mask of another size was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "point mask: 19 values, expected 20");
  }
}

// ---- depth PNGs: samples past 65535 units are counted, a frame taken back uncounted ---------------
TEST(Export, DepthPngClippingIsCountedAndNoted) {
  TempDir dir;
  auto depth = make_exporter("depth");
  const ExportRun run = run_info(dir.path, 4, 3);
  depth->prepare(run);
  depth->begin(run);
  Synth a(0, 4, 3, 0.0, {0, 0, 0}), b(1, 4, 3, 0.0, {0, 0, 0}), c(2, 4, 3, 0.0, {0, 0, 0});
  depth->frame(a.f);
  EXPECT_EQ(depth->report().at("clipped"), nlohmann::json::parse(R"({"depth_samples": 0, "confidence_samples": 0, "frames": 0})"));
  EXPECT_FALSE(depth->report().contains("note"));
  b.depth[0] = b.depth[5] = 100.0f;  // 100 scene units: past 65.535
  b.conf[2] = 1000.0f;                // past 655.35
  depth->frame(b.f);
  c.depth[1] = 70.0f;
  depth->frame(c.f);
  depth->discard_frame();  // frame 2 taken back: its clipped sample no longer counts
  const nlohmann::json r = depth->report();
  EXPECT_EQ(r.at("clipped"), nlohmann::json::parse(R"({"depth_samples": 2, "confidence_samples": 1, "frames": 1})"));
  EXPECT_EQ(r.at("note"), "2 depth samples (> 65.535) and 1 confidence samples (> 655.35) in 1 frames were written as "
                          "65535 in the 16-bit PNGs; the .npy files keep the values");
  EXPECT_EQ(read_npy_f32(dir.path / "depth" / "000001.npy").data[5], 100.0f);
  depth->finish();
}

// ---- depth preview ------------------------------------------------------------------------------
TEST(DepthPreview, RobustRangeTurboAndBlackInvalid) {
  // 100 valid depths 1..100 (shuffled) plus invalid ones: the range is numpy.percentile's 2/98.
  std::vector<float> depth;
  for (int i = 1; i <= 100; ++i) depth.push_back(static_cast<float>(i));
  std::shuffle(depth.begin(), depth.end(), std::mt19937(3));
  depth.insert(depth.begin() + 10, {NAN, 0.0f, -2.0f, INFINITY});
  ASSERT_EQ(depth.size(), 104u);
  const DepthRange r = depth_preview_range(depth);
  EXPECT_FLOAT_EQ(r.lo, 1 + 0.02f * 99);  // np.percentile(np.arange(1, 101), 2) = 2.98
  EXPECT_FLOAT_EQ(r.hi, 1 + 0.98f * 99);  // 98.02
  const ImageU8 img = colorize_depth(8, 13, depth);
  const auto near = turbo_rgb(1.0), far = turbo_rgb(kDepthPreviewFarEnd);
  for (size_t i = 0; i < depth.size(); ++i) {
    const uint8_t* p = img.rgb.data() + 3 * i;
    if (!is_valid_map_value(depth[i])) {
      EXPECT_EQ(p[0] + p[1] + p[2], 0) << i;
      continue;
    }
    EXPECT_GE(std::max({p[0], p[1], p[2]}), 100) << i;  // never close to the black of invalid pixels
    const double t = 1.0 - (static_cast<double>(depth[i]) - r.lo) / (static_cast<double>(r.hi) - r.lo);
    const auto want = depth[i] <= r.lo   ? near
                      : depth[i] >= r.hi ? far
                                         : turbo_rgb(kDepthPreviewFarEnd + (1.0 - kDepthPreviewFarEnd) * t);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), p)) << i;
  }
  // Turbo: blue -> green -> red (the polynomial fit is least exact at the very ends).
  EXPECT_GT(turbo_rgb(0.1)[2], turbo_rgb(0.1)[0]);
  EXPECT_GT(near[0], near[2]);
  EXPECT_GT(turbo_rgb(0.5)[1], 200);
  // The PNG decodes to exactly these pixels.
  TempDir dir;
  write_depth_preview(dir.path / "p.png", 8, 13, depth);
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load((dir.path / "p.png").c_str(), &w, &h, &n, 3);
  ASSERT_NE(px, nullptr);
  EXPECT_EQ(w, 8);
  EXPECT_EQ(h, 13);
  EXPECT_TRUE(std::equal(img.rgb.begin(), img.rgb.end(), px));
  stbi_image_free(px);
  // No valid pixel: all black, no error.
  const std::vector<float> none(6, NAN);
  const ImageU8 black = colorize_depth(3, 2, none);
  EXPECT_TRUE(std::all_of(black.rgb.begin(), black.rgb.end(), [](uint8_t v) { return v == 0; }));
}

// ---- ZIP / NPZ ----------------------------------------------------------------------------------
TEST(ZipWriter, EntriesReadBackWithTheirCrc) {
  TempDir dir;
  const fs::path p = dir.path / "a.zip";
  std::vector<uint8_t> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31 + (i >> 8));
  {
    ZipWriter z(p);
    z.add_entry("empty", {});
    z.begin_entry("big.bin");
    z.write(big.data(), 1000);
    z.write(big.data() + 1000, big.size() - 1000);
    z.end_entry();
    z.close();
  }
  const auto src = ByteSource::open_file(p.string());
  const ZipDirectory d(*src);
  ASSERT_EQ(d.entries().size(), 2u);
  const auto* e = d.find("big.bin");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->size, big.size());
  EXPECT_EQ(e->crc32, crc32(big.data(), big.size()));
  std::vector<uint8_t> back(big.size());
  src->read_at(d.data_offset(*e), back.data(), back.size());
  EXPECT_EQ(back, big);
  EXPECT_EQ(d.find("empty")->size, 0u);
  // Python's zipfile (numpy.load's reader) checks every CRC.
  const Cmd c = run("/usr/bin/python3 -c \"import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; "
                    "print(sorted(z.namelist()))\" " + p.string(), dir.path);
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_EQ(c.out, "['big.bin', 'empty']\n");
}

// Per-frame files, meta.npz and predictions.npz, read by numpy: shapes, dtypes and every value.
TEST(Npz, NumpyLoadsEveryKeyWithItsValues) {
  TempDir dir;
  const int W = 6, H = 4;
  std::vector<std::unique_ptr<Synth>> frames;
  {
    std::unique_ptr<Exporter> e = make_exporter("npz");
    const ExportRun r = run_info(dir.path, W, H);
    e->prepare(r);
    e->begin(r);
    for (int i = 0; i < 5; ++i) {
      frames.push_back(std::make_unique<Synth>(i, W, H, 0.1 * i, std::array<double, 3>{0.5 * i, 0, 0}));
      frames.back()->depth[3] = NAN;  // raw arrays keep values as computed
      e->frame(frames.back()->f);
    }
    e->finish();
    EXPECT_EQ(e->report().at("frames"), 5);
  }
  // The values the frames held, as .npy files numpy compares against (write_npy_f32 is tested).
  for (const auto& s : frames) {
    const std::string stem = (dir.path / ("want_" + std::to_string(s->f.index))).string();
    write_npy_f32(stem + "_images.npy", std::vector<int64_t>{3, H, W}, s->image);
    write_npy_f32(stem + "_depth.npy", std::vector<int64_t>{H, W}, s->depth);
    write_npy_f32(stem + "_conf.npy", std::vector<int64_t>{H, W}, s->conf);
    write_npy_f32(stem + "_pose_enc.npy", std::vector<int64_t>{9}, s->pose_enc);
    std::vector<float> w2c(s->f.w2c.begin(), s->f.w2c.end()), K(s->f.intrinsics.begin(), s->f.intrinsics.end());
    write_npy_f32(stem + "_extrinsic.npy", std::vector<int64_t>{3, 4}, w2c);
    write_npy_f32(stem + "_intrinsic.npy", std::vector<int64_t>{3, 3}, K);
  }
  const std::string script = R"PY(
import sys, os, numpy as np
d = sys.argv[1]
S, H, W = 5, 4, 6
shapes = {"images": (3, H, W), "pose_enc": (9,), "depth": (H, W, 1), "depth_conf": (H, W), "extrinsic": (3, 4), "intrinsic": (3, 3)}
files = {"images": "images", "pose_enc": "pose_enc", "depth": "depth", "depth_conf": "conf", "extrinsic": "extrinsic", "intrinsic": "intrinsic"}
whole = np.load(os.path.join(d, "predictions.npz"))
assert sorted(whole.files) == sorted(list(shapes) + ["is_keyframe", "frame_type"]), whole.files
for i in range(S):
    z = np.load(os.path.join(d, "predictions", "frame_%06d.npz" % i), allow_pickle=False)
    assert sorted(z.files) == sorted(shapes), z.files
    for k, shp in shapes.items():
        assert z[k].dtype == np.float32 and z[k].shape == shp, (k, z[k].dtype, z[k].shape)
        want = np.load(os.path.join(d, "want_%d_%s.npy" % (i, files[k]))).reshape(shp)
        assert np.array_equal(z[k], want, equal_nan=True), (i, k)
        assert np.array_equal(whole[k][i], want, equal_nan=True), (i, k)
    assert np.isnan(z["depth"][0, 3, 0])
for k, shp in shapes.items():
    assert whole[k].shape == (S,) + shp and whole[k].dtype == np.float32, k
m = np.load(os.path.join(d, "predictions", "meta.npz"), allow_pickle=False)
assert m["is_keyframe"].dtype == np.bool_ and m["is_keyframe"].tolist() == [True, False, True, False, True]
assert m["frame_type"].dtype == np.uint8 and m["frame_type"].tolist() == [0, 0, 1, 2, 1]
assert whole["is_keyframe"].tolist() == m["is_keyframe"].tolist() and whole["frame_type"].tolist() == m["frame_type"].tolist()
print("ok")
)PY";
  std::ofstream(dir.path / "check.py") << script;
  const Cmd c = run("/usr/bin/python3 " + (dir.path / "check.py").string() + " " + dir.path.string(), dir.path);
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_EQ(c.out, "ok\n");
}

TEST(Npz, MetaIsValidAfterEveryFrameAndTheWholeRunFileHasACap) {
  TempDir dir;
  fs::create_directories(dir.path / "predictions");
  PredictionsWriter w(dir.path / "predictions", 2, 2);
  for (int64_t i = 0; i <= kPredictionsNpzMaxFrames; ++i) {
    Synth s(i, 2, 2, 0, {0, 0, 0});
    w.append(s.f);
    if (i == 3) {  // meta.npz after 4 frames: a complete archive with [4] arrays
      const auto src = ByteSource::open_file((dir.path / "predictions" / "meta.npz").string());
      const ZipDirectory d(*src);
      EXPECT_EQ(d.find("is_keyframe.npy")->size, 128u + 4u);  // 128-byte .npy header + 4 bools
      EXPECT_EQ(w.write_combined(dir.path / "small.npz"), "");
      EXPECT_TRUE(fs::exists(dir.path / "small.npz"));
    }
    if (i == kPredictionsNpzMaxFrames - 1) {  // exactly the cap: still written
      EXPECT_EQ(w.write_combined(dir.path / "at_cap.npz"), "");
      EXPECT_TRUE(fs::exists(dir.path / "at_cap.npz"));
    }
  }
  EXPECT_EQ(w.write_combined(dir.path / "predictions.npz"),
            "301 frames > 300 (predictions/ holds every frame)");
  EXPECT_FALSE(fs::exists(dir.path / "predictions.npz"));
  EXPECT_FALSE(fs::exists(dir.path / "predictions.npz.tmp"));
}

// ---- COLMAP -------------------------------------------------------------------------------------
struct Camera {
  double fx, fy, cx, cy;
};

TEST(Colmap, RealColmapReadsTheModelAndPointsReprojectOntoTheirPixels) {
  TempDir dir;
  const int W = 8, H = 6, kFrames = 4;
  std::vector<std::unique_ptr<Synth>> frames;
  int64_t points = 0;
  {
    std::unique_ptr<Exporter> e = make_exporter("colmap");
    const ExportRun r = run_info(dir.path, W, H);
    e->prepare(r);
    e->begin(r);
    for (int i = 0; i <= kFrames; ++i) {
      frames.push_back(std::make_unique<Synth>(i, W, H, 0.3 * i, std::array<double, 3>{0.2 * i, -0.1 * i, 0.05 * i}));
      if (i == 2) frames.back()->pose_enc[7] = INFINITY;  // non-finite geometry: left out
      e->frame(frames.back()->f);
      if (i != 2) points += static_cast<int64_t>(frame_points(frames.back()->f, r.width, r.points).size());
    }
    e->finish();
    EXPECT_EQ(e->report().at("images"), kFrames);
    EXPECT_EQ(e->report().at("points"), points);
    EXPECT_EQ(e->report().at("frames_without_geometry"), 1);
  }
  const fs::path model = dir.path / "colmap", bin = dir.path / "bin";
  fs::create_directories(bin);
  const std::string env = "QT_QPA_PLATFORM=offscreen ";
  Cmd c = run(env + "colmap model_converter --input_path " + model.string() + " --output_path " + bin.string() +
                  " --output_type BIN",
              dir.path);
  ASSERT_EQ(c.exit_code, 0) << c.out;
  for (const char* f : {"cameras.bin", "images.bin", "points3D.bin"}) EXPECT_TRUE(fs::exists(bin / f)) << f;
  c = run(env + "colmap model_analyzer --path " + bin.string(), dir.path);
  ASSERT_EQ(c.exit_code, 0) << c.out;
  EXPECT_NE(c.out.find("Cameras: " + std::to_string(kFrames) + "\n"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("Images: " + std::to_string(kFrames) + "\n"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("Registered images: " + std::to_string(kFrames) + "\n"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("Points: " + std::to_string(points) + "\n"), std::string::npos) << c.out;
  // colmap/images: each listed frame's model input as 8-bit RGB, none for the frame left out.
  for (int i = 0; i <= kFrames; ++i) {
    const fs::path png = model / "images" / frame_file_name(i, ".png");
    ASSERT_EQ(fs::exists(png), i != 2) << png;
    if (i == 2) continue;
    const ImageU8 got = load_image(png);
    EXPECT_EQ(got.rgb, rgb8_from_chw(frames[static_cast<size_t>(i)]->f.image, W, H).rgb) << png;
  }

  // Project every pixel's world point with the written camera and pose, as COLMAP does
  // (x = R X + t, u = fx x/z + cx): it lands on the pixel's centre, (col + 0.5, row + 0.5).
  std::map<int, Camera> cams;
  std::istringstream cs(slurp(model / "cameras.txt"));
  for (std::string line; std::getline(cs, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    int id, w, h;
    std::string kind;
    Camera k{};
    ls >> id >> kind >> w >> h >> k.fx >> k.fy >> k.cx >> k.cy;
    EXPECT_EQ(kind, "PINHOLE");
    EXPECT_EQ(w, W);
    cams[id] = k;
  }
  std::istringstream is(slurp(model / "images.txt"));
  int checked = 0;
  std::set<int> ids;
  struct Observation {
    int image;
    double x, y;
    long long point3d;
  };
  std::vector<Observation> observations;  // POINTS2D in file order
  for (std::string line; std::getline(is, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    int id, cam;
    double qw, qx, qy, qz, tx, ty, tz;
    std::string name;
    ls >> id >> qw >> qx >> qy >> qz >> tx >> ty >> tz >> cam >> name;
    std::string points2d;
    std::getline(is, points2d);
    std::istringstream ps(points2d);
    for (Observation o{id, 0, 0, 0}; ps >> o.x >> o.y >> o.point3d;) observations.push_back(o);
    ids.insert(id);
    EXPECT_GE(qw, 0);
    const Synth& s = *frames[static_cast<size_t>(id - 1)];
    char want_name[16];
    std::snprintf(want_name, sizeof want_name, "%06d.png", id - 1);
    EXPECT_EQ(name, want_name);
    const double R[9] = {1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw),     2 * (qx * qz + qy * qw),
                         2 * (qx * qy + qz * qw),     1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw),
                         2 * (qx * qz - qy * qw),     2 * (qy * qz + qx * qw),     1 - 2 * (qx * qx + qy * qy)};
    const Camera& k = cams.at(cam);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const float* X = s.points.data() + 3 * (static_cast<size_t>(y) * W + x);
        double p[3] = {tx, ty, tz};
        for (int r = 0; r < 3; ++r)
          for (int j = 0; j < 3; ++j) p[r] += R[r * 3 + j] * X[j];
        EXPECT_NEAR(k.fx * p[0] / p[2] + k.cx, x + 0.5, 1e-4);
        EXPECT_NEAR(k.fy * p[1] / p[2] + k.cy, y + 0.5, 1e-4);
        ++checked;
      }
  }
  EXPECT_EQ(ids, (std::set<int>{1, 2, 4, 5}));
  EXPECT_EQ(checked, kFrames * W * H);

  // Every point has one observation: the centre of the pixel it came from in its image's POINTS2D
  // line, which points back at it (TRACK = IMAGE_ID POINT2D_IDX); COLMAP counts them.
  ASSERT_EQ(static_cast<int64_t>(observations.size()), points);
  std::istringstream ps(slurp(model / "points3D.txt"));
  size_t k = 0;
  std::map<int, size_t> first_of_image;
  for (size_t i = 0; i < observations.size(); ++i) first_of_image.emplace(observations[i].image, i);
  for (std::string line; std::getline(ps, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    long long id;
    double X[3], err;
    int r, g, b, image;
    size_t idx;
    ASSERT_TRUE(ls >> id >> X[0] >> X[1] >> X[2] >> r >> g >> b >> err >> image >> idx) << line;
    std::string rest;
    EXPECT_FALSE(ls >> rest) << "a track of one observation: " << line;
    ASSERT_LT(k, observations.size());
    const Observation& o = observations[first_of_image.at(image) + idx];
    EXPECT_EQ(o.point3d, id) << line;
    EXPECT_EQ(o.image, image) << line;
    // The observation is a pixel centre of the frame's grid, and the point is that pixel's world point.
    const int col = static_cast<int>(o.x - 0.5), row = static_cast<int>(o.y - 0.5);
    EXPECT_EQ(o.x, col + 0.5);
    EXPECT_EQ(o.y, row + 0.5);
    const float* want = frames[static_cast<size_t>(image - 1)]->points.data() + 3 * (static_cast<size_t>(row) * W + col);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(X[c], want[c], 1e-6 * (1 + std::abs(want[c]))) << line;
    ++k;
  }
  EXPECT_EQ(k, observations.size());
  c = run(env + "colmap model_analyzer --path " + bin.string(), dir.path);
  EXPECT_NE(c.out.find("Observations: " + std::to_string(points) + "\n"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("Mean track length: 1"), std::string::npos) << c.out;
}

// ---- GLB ----------------------------------------------------------------------------------------
// The Khronos validator's report of `file` (node + web/node_modules/gltf-validator).
nlohmann::json validate_gltf(const fs::path& file, const fs::path& scratch) {
  const Cmd c = run("node " + (kTools / "validate_gltf.cjs").string() + " " + file.string(), scratch);
  EXPECT_EQ(c.exit_code, 0) << c.out;
  if (c.exit_code != 0) return nullptr;
  return nlohmann::json::parse(c.out);
}

TEST(Glb, KhronosValidatorReportsNoErrors) {
  TempDir dir;
  int64_t points = 0;
  {
    std::unique_ptr<Exporter> e = make_exporter("glb");
    const ExportRun r = run_info(dir.path, 8, 6);
    e->prepare(r);
    e->begin(r);
    std::vector<std::unique_ptr<Synth>> frames;
    for (int i = 0; i < 5; ++i) {
      frames.push_back(std::make_unique<Synth>(i, 8, 6, 0.2 * i, std::array<double, 3>{0.3 * i, 0, 0}));
      if (i == 1) frames.back()->f.c2w[3] = NAN;
      e->frame(frames.back()->f);
      if (i != 1) points += static_cast<int64_t>(frame_points(frames.back()->f, r.width, r.points).size());
      // Between frames (Python's Exporter.report()) the report already counts the frame just given.
      const nlohmann::json now = e->report();
      EXPECT_EQ(now.at("points"), points) << "after frame " << i;
      EXPECT_EQ(now.at("cameras"), i < 1 ? i + 1 : i) << "after frame " << i;
      EXPECT_EQ(now.at("frustums"), i / 2 + 1) << "after frame " << i;
    }
    {  // A frame taken back leaves the report as before it.
      Synth extra(5, 8, 6, 1.0, {1.5, 0, 0});
      const nlohmann::json before = e->report();
      e->frame(extra.f);
      EXPECT_EQ(e->report().at("cameras"), 5);
      e->discard_frame();
      EXPECT_EQ(e->report(), before);
    }
    e->finish();
    const nlohmann::json rep = e->report();
    EXPECT_EQ(rep.at("points"), points);
    EXPECT_EQ(rep.at("cameras"), 4);   // frames 0, 2, 3, 4 (1 has no finite pose)
    EXPECT_EQ(rep.at("frustums"), 3);  // the keyframes among them (Synth: even indices): 0, 2, 4
    EXPECT_EQ(rep.at("frames_without_geometry"), 1);
  }
  const nlohmann::json rep = validate_gltf(dir.path / "scene.glb", dir.path);
  ASSERT_TRUE(rep.is_object());
  EXPECT_EQ(rep.at("numErrors"), 0) << rep.dump(1);
  EXPECT_EQ(rep.at("numWarnings"), 0) << rep.dump(1);
  EXPECT_EQ(rep.at("info").at("drawCallCount"), 3) << rep.dump(1);  // points, frustums, trajectory
  // Vertices: the points, 16 per keyframe frustum (frames 0, 2, 4), one per camera centre.
  EXPECT_EQ(rep.at("info").at("totalVertexCount"), points + 16 * 3 + 4) << rep.dump(1);
  EXPECT_FALSE(fs::exists(dir.path / "scene.glb.tmp"));
}

// A write that fails (a full disk; here a file size limit: EFBIG) is an error and leaves no scene.glb:
// TinyGLTF's file writer reported success whatever its stream did, so a cut file took the final name.
TEST(Glb, AFailedWriteIsAnErrorAndLeavesNoFile) {
  TempDir dir;
  GlbSceneBuilder b;
  PointBatch pts;
  for (int i = 0; i < 4000; ++i) {
    pts.xyz.insert(pts.xyz.end(), {0.001f * i, 1.0f, 2.0f});
    pts.rgb.insert(pts.rgb.end(), {1, 2, 3});
  }
  b.add_points(pts);
  const fs::path path = dir.path / "scene.glb";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the limit stays in the child
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{16 * 1024, 16 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int code = 3;
    try {
      b.write(path);
      code = 1;  // no error
    } catch (const Error& e) {
      code = std::string(e.what()) == "cannot write " + path.string() + ": File too large" ? 0 : 2;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: another error";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(dir.path / "scene.glb.tmp"));
}

TEST(Glb, EmptyRunIsStillAValidFile) {
  TempDir dir;
  GlbSceneBuilder b;
  b.write(dir.path / "empty.glb");
  const nlohmann::json rep = validate_gltf(dir.path / "empty.glb", dir.path);
  ASSERT_TRUE(rep.is_object());
  EXPECT_EQ(rep.at("numErrors"), 0) << rep.dump(1);
}

// A GLB file read here, not through the writer's library: its JSON chunk, and the bytes of the
// attribute `attribute` of the mesh named `mesh` (empty, with a failure, when missing).
struct GlbAttribute {
  nlohmann::json gltf, accessor;
  std::string bytes;
};
GlbAttribute glb_attribute(const fs::path& file, const std::string& mesh, const std::string& attribute,
                           size_t element_bytes) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto u32 = [&](size_t at) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  EXPECT_GE(bytes.size(), 20u);
  if (bytes.size() < 20 || bytes.compare(0, 4, "glTF") != 0) return {};
  const size_t json_len = u32(12);
  EXPECT_EQ(u32(16), 0x4E4F534Au);  // "JSON"
  GlbAttribute out;
  out.gltf = nlohmann::json::parse(bytes.substr(20, json_len));
  const size_t bin_at = 20 + json_len + 8;
  EXPECT_EQ(u32(20 + json_len + 4), 0x004E4942u);  // "BIN\0"
  for (const nlohmann::json& m : out.gltf.at("meshes")) {
    if (m.at("name") != mesh) continue;
    out.accessor = out.gltf.at("accessors").at(m.at("primitives").at(0).at("attributes").at(attribute).get<size_t>());
    const nlohmann::json& view = out.gltf.at("bufferViews").at(out.accessor.at("bufferView").get<size_t>());
    EXPECT_FALSE(view.contains("byteStride"));
    const size_t at = bin_at + view.value("byteOffset", size_t{0}) + out.accessor.value("byteOffset", size_t{0});
    const size_t n = element_bytes * out.accessor.at("count").get<size_t>();
    EXPECT_LE(at + n, bytes.size());
    if (at + n <= bytes.size()) out.bytes = bytes.substr(at, n);
    return out;
  }
  ADD_FAILURE() << "no mesh " << mesh << " in " << file;
  return {};
}

// The POSITION values of the mesh named `mesh`, as x, y, z triples.
std::vector<float> glb_positions(const fs::path& file, const std::string& mesh) {
  const GlbAttribute a = glb_attribute(file, mesh, "POSITION", 3 * sizeof(float));
  if (a.bytes.empty()) return {};
  EXPECT_EQ(a.accessor.at("componentType"), 5126);  // float
  std::vector<float> xyz(a.bytes.size() / sizeof(float));
  std::memcpy(xyz.data(), a.bytes.data(), a.bytes.size());
  return xyz;
}

// glTF's vertex colours are linear and the frames sRGB: COLOR_0 holds the decoded values (16 bits:
// 8 linear bits would band the dark tones), and the materials are unlit, so a viewer shows the
// points in the frames' colours (sRGB bytes stored as they are showed them washed out).
TEST(Glb, PointColoursAreLinearAndUnlit) {
  GlbSceneBuilder b;
  PointBatch batch;
  const uint8_t srgb[] = {0, 1, 10, 11, 128, 188, 255};
  for (const uint8_t v : srgb) {
    batch.xyz.insert(batch.xyz.end(), {static_cast<float>(v), 0, 1});
    batch.rgb.insert(batch.rgb.end(), {v, 255, 0});
  }
  b.add_points(batch);
  TempDir dir;
  b.write(dir.path / "c.glb");
  const nlohmann::json rep = validate_gltf(dir.path / "c.glb", dir.path);
  ASSERT_TRUE(rep.is_object());
  EXPECT_EQ(rep.at("numErrors"), 0) << rep.dump(1);
  EXPECT_EQ(rep.at("numWarnings"), 0) << rep.dump(1);
  const GlbAttribute c = glb_attribute(dir.path / "c.glb", "points", "COLOR_0", 4 * sizeof(uint16_t));
  ASSERT_EQ(c.bytes.size(), 7u * 4 * sizeof(uint16_t));
  EXPECT_EQ(c.accessor.at("componentType"), 5123);  // unsigned short
  EXPECT_EQ(c.accessor.at("normalized"), true);
  EXPECT_EQ(c.accessor.at("type"), "VEC4");
  std::vector<uint16_t> rgba(7 * 4);
  std::memcpy(rgba.data(), c.bytes.data(), c.bytes.size());
  // IEC 61966-2-1: v / 255 / 12.92 up to 10 (0.04045 * 255 = 10.3), ((v / 255 + 0.055) / 1.055)^2.4 above;
  // 128 -> 0.2158605, 188 -> 0.5028865.
  const double linear[] = {0, 1 / 255.0 / 12.92, 10 / 255.0 / 12.92, std::pow((11 / 255.0 + 0.055) / 1.055, 2.4),
                           0.2158605, 0.5028865, 1};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_NEAR(rgba[4 * i] / 65535.0, linear[i], 0.6 / 65535) << "sRGB " << int{srgb[i]};
    EXPECT_EQ(rgba[4 * i + 1], 65535);
    EXPECT_EQ(rgba[4 * i + 2], 0);
    EXPECT_EQ(rgba[4 * i + 3], 65535);
  }
  EXPECT_EQ(c.gltf.at("extensionsUsed"), nlohmann::json::array({"KHR_materials_unlit"}));
  for (const nlohmann::json& m : c.gltf.at("materials"))
    EXPECT_TRUE(m.at("extensions").contains("KHR_materials_unlit")) << m.dump();
}

// Reservoir sampling's step: with a budget of one point, the second point of two replaces the first
// with probability 1/2 (over many seeds: 200 +- 10 of 400 keep the first; the bound is 6 sd). An
// off-by-one in the draw (`% seen` instead of `% (seen + 1)`) always replaces it, invisible at the
// budget test's sizes below.
TEST(Glb, PointBudgetOfOneKeepsEitherOfTwoPointsEvenly) {
  int first_kept = 0;
  TempDir dir;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    GlbSceneBuilder b(1, seed);
    PointBatch batch;
    batch.xyz = {0, 0, 0, 1, 0, 0};
    batch.rgb = {1, 2, 3, 1, 2, 3};
    b.add_points(batch);
    ASSERT_EQ(b.points_kept(), 1);
    b.write(dir.path / "one.glb");
    const std::vector<float> xyz = glb_positions(dir.path / "one.glb", "points");
    ASSERT_EQ(xyz.size(), 3u);
    ASSERT_TRUE(xyz[0] == 0.0f || xyz[0] == 1.0f) << xyz[0];
    if (xyz[0] == 0.0f) ++first_kept;
  }
  EXPECT_NEAR(first_kept, 200, 60);
}

TEST(Glb, PointBudgetKeepsAUniformSampleOfAllPoints) {
  GlbSceneBuilder b(1000);
  PointBatch batch;
  for (int i = 0; i < 10000; ++i) {
    batch.xyz.insert(batch.xyz.end(), {static_cast<float>(i), 0, 0});
    batch.rgb.insert(batch.rgb.end(), {1, 2, 3});
    if (batch.size() == 500) {
      b.add_points(batch);
      batch = {};
    }
  }
  EXPECT_EQ(b.points_seen(), 10000);
  EXPECT_EQ(b.points_kept(), 1000);
  TempDir dir;
  b.write(dir.path / "s.glb");
  const nlohmann::json rep = validate_gltf(dir.path / "s.glb", dir.path);
  ASSERT_TRUE(rep.is_object());
  EXPECT_EQ(rep.at("numErrors"), 0) << rep.dump(1);
  EXPECT_EQ(rep.at("info").at("totalVertexCount"), 1000);
  // The kept points are input points (x = 0..9999), each once, spread over the whole input: a
  // uniform sample of 1000 puts 100 +- 9 (one sd) in each tenth of it, and the bound 100 +- 40
  // fails a sample of the first (or last) points, or of any part of them.
  const std::vector<float> xyz = glb_positions(dir.path / "s.glb", "points");
  ASSERT_EQ(xyz.size(), 3000u);
  std::set<int> kept;
  std::vector<int> per_tenth(10, 0);
  for (size_t i = 0; i < xyz.size(); i += 3) {
    const int x = static_cast<int>(xyz[i]);
    EXPECT_TRUE(xyz[i] == static_cast<float>(x) && x >= 0 && x < 10000 && xyz[i + 1] == 0 && xyz[i + 2] == 0)
        << xyz[i] << " " << xyz[i + 1] << " " << xyz[i + 2];
    kept.insert(x);
    ++per_tenth[static_cast<size_t>(std::clamp(x, 0, 9999) / 1000)];
  }
  EXPECT_EQ(kept.size(), 1000u);
  for (size_t t = 0; t < per_tenth.size(); ++t) {
    EXPECT_GE(per_tenth[t], 60) << "points " << 1000 * t << "-" << 1000 * t + 999;
    EXPECT_LE(per_tenth[t], 140) << "points " << 1000 * t << "-" << 1000 * t + 999;
  }
}

// A keyframe's frustum: 8 line segments, apex -> each image corner and the image rectangle, the
// corners at the image's edges (pixel centres at integer coordinates, so u = -0.5 and W - 0.5) and at
// 1/10 of the frame's median depth. Identity pose, fx = fy = 4, cx = 3.5, cy = 2.5, 8 x 6, depth 2:
// s = 0.2, corners (+-0.2, +-0.15, 0.2).
TEST(Glb, FrustumCornersAreTheImageEdgesAtATenthOfTheMedianDepth) {
  TempDir dir;
  {
    std::unique_ptr<Exporter> e = make_exporter("glb");
    const ExportRun r = run_info(dir.path, 8, 6);
    e->prepare(r);
    e->begin(r);
    Synth frame(0, 8, 6, 0.0, {0, 0, 0});  // yaw 0 at the origin: identity c2w; index 0 is a keyframe
    ASSERT_TRUE(frame.f.keyframe);
    frame.f.intrinsics = {4, 0, 3.5, 0, 4, 2.5, 0, 0, 1};
    std::fill(frame.depth.begin(), frame.depth.end(), 2.0f);  // f.depth views this storage
    e->frame(frame.f);
    e->finish();
    EXPECT_EQ(e->report().at("frustums"), 1);
  }
  const std::vector<float> xyz = glb_positions(dir.path / "scene.glb", "frustums");
  ASSERT_EQ(xyz.size(), 16u * 3);  // 8 segments of 2 vertices
  const double fx = 4, fy = 4, cx = 3.5, cy = 2.5, s = 0.1 * 2.0;
  using P = std::array<double, 3>;
  const P apex{0, 0, 0};
  std::vector<P> corner;  // around the rectangle: (l, t), (r, t), (r, b), (l, b)
  for (const auto& [u, v] : {std::pair{-0.5, -0.5}, {7.5, -0.5}, {7.5, 5.5}, {-0.5, 5.5}})
    corner.push_back({(u - cx) / fx * s, (v - cy) / fy * s, s});
  std::vector<std::pair<P, P>> expected;
  for (size_t k = 0; k < 4; ++k) {
    expected.push_back({apex, corner[k]});
    expected.push_back({corner[k], corner[(k + 1) % 4]});
  }
  const auto near = [&](size_t vertex, const P& p) {
    for (size_t c = 0; c < 3; ++c)
      if (std::abs(xyz[3 * vertex + c] - p[c]) > 1e-6) return false;
    return true;
  };
  // Each segment of the file is one expected segment (either direction), each expected one found once.
  std::vector<int> found(expected.size(), 0);
  for (size_t seg = 0; seg < 8; ++seg) {
    bool matched = false;
    for (size_t j = 0; j < expected.size() && !matched; ++j)
      if ((near(2 * seg, expected[j].first) && near(2 * seg + 1, expected[j].second)) ||
          (near(2 * seg, expected[j].second) && near(2 * seg + 1, expected[j].first))) {
        ++found[j];
        matched = true;
      }
    EXPECT_TRUE(matched) << "segment " << seg << ": (" << xyz[6 * seg] << ", " << xyz[6 * seg + 1] << ", "
                         << xyz[6 * seg + 2] << ") - (" << xyz[6 * seg + 3] << ", " << xyz[6 * seg + 4] << ", "
                         << xyz[6 * seg + 5] << ")";
  }
  EXPECT_EQ(found, std::vector<int>(expected.size(), 1));
}

// The file's world is the engine's OpenCV frame (x right, y down, z forward) under one root node,
// node 0 and the scene's only node, that turns it 180 degrees about x into glTF's (y up, the camera
// looking along -z): rotation (x, y, z, w) = (1, 0, 0, 0). Every mesh node is a child of it.
TEST(Glb, RootNodeTurnsOpenCvAxesIntoGltfAxes) {
  GlbSceneBuilder b;
  PointBatch batch;
  batch.xyz = {0, 1, 2};
  batch.rgb = {10, 20, 30};
  b.add_points(batch);
  const Mat33 K{4, 0, 3.5, 0, 4, 2.5, 0, 0, 1};
  b.add_camera({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, K, 8, 6, 0.2f, true);
  b.add_camera({1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0}, K, 8, 6, 0.2f, false);
  TempDir dir;
  b.write(dir.path / "r.glb");
  const nlohmann::json gltf = glb_attribute(dir.path / "r.glb", "points", "POSITION", 3 * sizeof(float)).gltf;
  ASSERT_TRUE(gltf.is_object());
  EXPECT_EQ(gltf.at("scenes").at(gltf.at("scene").get<size_t>()).at("nodes"), nlohmann::json::array({0}));
  const nlohmann::json& root = gltf.at("nodes").at(0);
  ASSERT_EQ(root.at("rotation").size(), 4u);
  EXPECT_EQ(root.at("rotation"), nlohmann::json::array({1.0, 0.0, 0.0, 0.0}));
  EXPECT_FALSE(root.contains("mesh"));
  std::set<int> mesh_nodes, children;
  for (size_t i = 0; i < gltf.at("nodes").size(); ++i)
    if (gltf.at("nodes").at(i).contains("mesh")) mesh_nodes.insert(static_cast<int>(i));
  for (const nlohmann::json& c : root.at("children")) children.insert(c.get<int>());
  EXPECT_EQ(mesh_nodes.size(), 3u);  // points, frustums, trajectory
  EXPECT_EQ(children, mesh_nodes);
  // The rotation as glTF applies it: p' = p + 2w (q x p) + 2 q x (q x p), q = (x, y, z).
  const double q[3] = {root.at("rotation")[0], root.at("rotation")[1], root.at("rotation")[2]};
  const double w = root.at("rotation")[3];
  const auto cross = [](const double* a, const double* b) {
    return std::array<double, 3>{a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
  };
  const double p[3] = {0, 1, 2};  // OpenCV: below the optical axis, 2 in front of the camera
  const std::array<double, 3> qp = cross(q, p), qqp = cross(q, qp.data());
  const double rotated[3] = {p[0] + 2 * w * qp[0] + 2 * qqp[0], p[1] + 2 * w * qp[1] + 2 * qqp[1],
                             p[2] + 2 * w * qp[2] + 2 * qqp[2]};
  EXPECT_DOUBLE_EQ(rotated[0], 0.0);
  EXPECT_DOUBLE_EQ(rotated[1], -1.0);  // glTF: y up, so below is negative y
  EXPECT_DOUBLE_EQ(rotated[2], -2.0);  // glTF: in front of a camera is -z
}

// ---- BSS ----------------------------------------------------------------------------------------
TEST(Bss, TrajectoryAndIntrinsicsLines) {
  TempDir dir;
  std::unique_ptr<Exporter> e = make_exporter("bss");
  const ExportRun r = run_info(dir.path, 8, 6);
  e->prepare(r);
  e->begin(r);
  std::vector<std::unique_ptr<Synth>> frames;
  for (int i = 0; i < 3; ++i) {
    frames.push_back(std::make_unique<Synth>(i, 8, 6, 0.5 * i, std::array<double, 3>{1.0 * i, 2, 3}));
    if (i == 1) frames.back()->f.intrinsics[4] = NAN;
    e->frame(frames.back()->f);
    // Valid after every frame: the lines so far.
    std::istringstream t(slurp(dir.path / "bss" / "traj.txt"));
    size_t lines = 0;
    for (std::string l; std::getline(t, l);) ++lines;
    EXPECT_EQ(lines, i < 2 ? 1u : 2u);  // frame 1 is left out
  }
  e->finish();
  std::istringstream t(slurp(dir.path / "bss" / "traj.txt")), k(slurp(dir.path / "bss" / "intrinsics.txt"));
  for (int i : {0, 2}) {
    double v[13];
    for (double& x : v) ASSERT_TRUE(static_cast<bool>(t >> x));
    EXPECT_NEAR(v[0], 0.1 * i, 1e-9);
    for (int j = 0; j < 12; ++j) EXPECT_NEAR(v[1 + j], frames[i]->f.c2w[j], 1e-8) << j;
    double kv[7];
    for (double& x : kv) ASSERT_TRUE(static_cast<bool>(k >> x));
    EXPECT_NEAR(kv[0], 0.1 * i, 1e-9);
    EXPECT_NEAR(kv[1], 6.4, 1e-9);
    EXPECT_NEAR(kv[2], 6.4, 1e-9);
    EXPECT_EQ(kv[3], 4);
    EXPECT_EQ(kv[4], 3);
    EXPECT_EQ(kv[5], 8);
    EXPECT_EQ(kv[6], 6);
  }
  double extra;
  EXPECT_FALSE(static_cast<bool>(t >> extra));
}

// ---- the set ------------------------------------------------------------------------------------
// The exporters of a --export list ("all", "poses,glb", ...), in registry order.
std::vector<std::unique_ptr<Exporter>> exporters(const std::string& names) {
  std::vector<std::unique_ptr<Exporter>> list;
  for (const std::string& n : parse_export_list(names)) list.push_back(make_exporter(n));
  return list;
}

TEST(ExportSet, BadSubFolderFailsBeforeAnythingIsWritten) {
  TempDir dir;
  std::ofstream(dir.path / "colmap") << "a file where the folder should be";
  ExportSet set(exporters("all"));
  try {
    set.begin(run_info(dir.path, 4, 3), StaleOutputs::EveryExport);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot create folder " + (dir.path / "colmap").string() + ": Not a directory");
  }
  // Folders of the exporters before it may exist (empty); no file was written.
  for (const auto& entry : fs::recursive_directory_iterator(dir.path))
    if (entry.is_regular_file()) {
      EXPECT_EQ(entry.path(), dir.path / "colmap");
    }
}

// A run killed while writing a per-frame file leaves its temporary (write_file_atomic's NAME.tmp): the
// next run into the folder removes it with the earlier run's files (it stayed, mixing the two runs);
// a file of the user's that only ends in .tmp stays.
TEST(ExportSet, AnEarlierRunsTemporariesGoWithItsFiles) {
  TempDir dir;
  const std::vector<fs::path> left = {dir.path / "depth" / "000003.npy.tmp", dir.path / "depth_preview" / "000001.png.tmp",
                                      dir.path / "viewer" / "000002.bin.tmp", dir.path / "colmap" / "images" / "000004.png.tmp",
                                      dir.path / "predictions" / "frame_000005.npz.tmp", dir.path / "poses.json.tmp"};
  for (const fs::path& p : left) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "cut";
  }
  std::ofstream(dir.path / "depth" / "notes.tmp") << "the user's";
  ExportSet set(exporters("all"));
  set.begin(run_info(dir.path, 4, 3), StaleOutputs::EveryExport);
  for (const fs::path& p : left) EXPECT_FALSE(fs::exists(p)) << p;
  EXPECT_TRUE(fs::exists(dir.path / "depth" / "notes.tmp"));
}

TEST(ExportSet, FinishReachesEveryExporterAndReportsTheFirstError) {
  TempDir dir;
  ExportSet set(exporters("glb,ply"));
  set.begin(run_info(dir.path, 4, 3), StaleOutputs::EveryExport);
  Synth s(0, 4, 3, 0, {0, 0, 0});
  set.frame(s.f);
  fs::create_directories(dir.path / "scene.glb");  // the GLB cannot be renamed into place
  std::ofstream(dir.path / "scene.glb" / "x") << "x";
  EXPECT_THROW(set.finish(), Error);
  EXPECT_EQ(set.report().at("ply").at("points"), 12);
  EXPECT_TRUE(fs::exists(dir.path / "points.ply"));
}

// A folder where a selected export writes its file fails the run before any earlier output is
// removed; a folder of an output's name is never removed (it is not an output), even empty.
TEST(ExportSet, AFolderWhereAnExportWritesItsFileFailsBeforeAnythingIsRemoved) {
  TempDir dir;
  std::ofstream(dir.path / "poses.json") << "earlier";
  fs::create_directories(dir.path / "scene.glb");
  std::ofstream(dir.path / "scene.glb" / "keep") << "the user's";
  fs::create_directories(dir.path / "trajectory.tum");  // empty
  {
    ExportSet set(exporters("poses,glb"));
    try {
      set.begin(run_info(dir.path, 4, 3), StaleOutputs::EveryExport);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "cannot write " + (dir.path / "scene.glb").string() + ": a folder of that name exists (move or remove it)");
    }
    EXPECT_EQ(slurp(dir.path / "poses.json"), "earlier");
  }
  ExportSet set(exporters("poses"));
  set.begin(run_info(dir.path, 4, 3), StaleOutputs::EveryExport);  // glb and tum unselected: their names are not files
  set.finish();
  EXPECT_TRUE(fs::exists(dir.path / "scene.glb" / "keep"));
  EXPECT_TRUE(fs::is_directory(dir.path / "trajectory.tum"));
  EXPECT_NE(slurp(dir.path / "poses.json"), "earlier");
}

// summary.json lists the files an export wrote: a run stopped before its first frame has no meta.npz.
TEST(ExportSet, ReportListsOnlyFilesWritten) {
  TempDir dir;
  ExportSet set(exporters("npz"));
  set.begin(run_info(dir.path, 4, 3), StaleOutputs::EveryExport);
  set.finish();
  const nlohmann::json files = set.report().at("npz").at("files");
  EXPECT_FALSE(files.contains("predictions/meta.npz")) << files.dump();
  EXPECT_FALSE(fs::exists(dir.path / "predictions" / "meta.npz"));
}

// An earlier run's points.ply and colmap/ go when a run (EveryExport) exports depth only; a writer
// that shares the folder (SelectedExports, the Python Exporter) removes only its own exports' files.
TEST(ExportSet, StaleOutputsOfOtherExportsGoOnlyForEveryExport) {
  for (const StaleOutputs stale : {StaleOutputs::EveryExport, StaleOutputs::SelectedExports}) {
    TempDir dir;
    std::ofstream(dir.path / "points.ply") << "earlier";
    fs::create_directories(dir.path / "colmap");
    std::ofstream(dir.path / "colmap" / "cameras.txt") << "earlier";
    fs::create_directories(dir.path / "depth");
    std::ofstream(dir.path / "depth" / "000007.npy") << "earlier";
    std::ofstream(dir.path / "summary.json") << "{}";
    ExportSet set(exporters("depth"));
    set.begin(run_info(dir.path, 4, 3), stale);
    set.finish();
    const bool kept = stale == StaleOutputs::SelectedExports;
    EXPECT_EQ(fs::exists(dir.path / "points.ply"), kept);
    EXPECT_EQ(fs::exists(dir.path / "colmap" / "cameras.txt"), kept);
    EXPECT_EQ(fs::exists(dir.path / "colmap"), kept);
    EXPECT_FALSE(fs::exists(dir.path / "depth" / "000007.npy"));  // its own export's: always
    EXPECT_FALSE(fs::exists(dir.path / "summary.json"));          // an earlier run's report: always
  }
}

// ---- frames taken back (io/export.h discard_frame) ------------------------------------------------

// Fault injection: fails on the frames in `fail` (once each), as a write that hits a full disk.
class FailOnFrames final : public Exporter {
 public:
  explicit FailOnFrames(std::set<int64_t> fail) : fail_(std::move(fail)) {}
  std::string_view name() const override { return "fail-on-frames"; }
  void prepare(const ExportRun&) override {}
  void begin(const ExportRun&) override {}
  void frame(const ExportFrame& f) override {
    if (fail_.erase(f.index)) throw Error("injected failure on frame " + std::to_string(f.index));
  }
  void discard_frame() override {}
  void finish() override {}
  nlohmann::json report() const override { return nlohmann::json::object(); }

 private:
  std::set<int64_t> fail_;
};

// Every file and folder below `dir` with its bytes (folders: empty).
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out[fs::relative(e.path(), dir).string() + (e.is_directory() ? "/" : "")] =
        e.is_regular_file() ? slurp(e.path()) : "";
  return out;
}

// Frames of a small run: every 4th one without a finite camera (skipped by the geometric exports).
std::vector<std::unique_ptr<Synth>> synth_run(int frames, int w, int h) {
  std::vector<std::unique_ptr<Synth>> out;
  for (int i = 0; i < frames; ++i) {
    out.push_back(std::make_unique<Synth>(i, w, h, 0.1 * i, std::array<double, 3>{0.2 * i, 0, 0}));
    if (i % 4 == 3) out.back()->pose_enc[0] = std::nanf("");
  }
  return out;
}

// The files of a run that exported frames [0, frames), and its report.
std::pair<std::map<std::string, std::string>, nlohmann::json> clean_run(const fs::path& out,
                                                                       const std::vector<std::unique_ptr<Synth>>& run,
                                                                       size_t frames, int w, int h) {
  ExportSet set(exporters("all"));
  set.begin(run_info(out, w, h), StaleOutputs::EveryExport);
  for (size_t i = 0; i < frames; ++i) set.frame(run[i]->f);
  set.finish();
  return {tree(out), set.report()};
}

// A frame some exporter failed on is taken back from every exporter that was given it: the files
// are then exactly those of a run that never saw it, whether the frame is given again (a caller
// that goes on, as the Python Exporter may) or the run ends there (run: status failed). Randomised
// over where the failing exporter stands in the list, which frames fail, and frame files that
// cannot be written (a folder where the depth / preview / viewer file of a frame goes: that exporter
// fails part way, after some of its files).
TEST(ExportSet, FramesTakenBackLeaveTheFilesOfARunThatNeverSawThem) {
  const int w = 6, h = 4, frames = 10;
  const auto run = synth_run(frames, w, h);
  TempDir dir;
  const auto [reference, reference_report] = clean_run(dir.path / "reference", run, frames, w, h);
  const std::vector<std::string> blockable = {"depth/000006.npy", "depth/000007_conf.png", "depth_preview/000002.png",
                                              "viewer/000008.bin", "depth/000000_conf.npy", "colmap/images/000004.png"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 24; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const fs::path out = dir.path / ("trial" + std::to_string(trial));
    std::set<int64_t> fail;
    for (int i = 0; i < frames; ++i)
      if (rng() % 3 == 0) fail.insert(i);
    auto list = exporters("all");
    const size_t at = rng() % (list.size() + 1);
    list.insert(list.begin() + static_cast<long>(at), std::make_unique<FailOnFrames>(fail));
    const bool go_on = trial % 2 == 0;  // give a failed frame again, or end the run at the first failure
    ExportSet set(std::move(list));
    set.begin(run_info(out, w, h), StaleOutputs::EveryExport);
    const std::string blocked = blockable[rng() % blockable.size()];
    fs::create_directories(out / blocked);  // the caller removes it after the failure it causes (not ours to remove)
    bool obstacle = true;
    int64_t failures = 0, first_failure = -1;
    for (int i = 0; i < frames && (go_on || first_failure < 0); ++i) {
      // An injection fails once; the obstacle fails its exporter until the caller removes it (an
      // injected failure before that exporter leaves it for the next attempt).
      for (int attempt = 0; attempt < 3; ++attempt) {
        try {
          set.frame(run[i]->f);
          break;
        } catch (const Error& e) {
          ++failures;
          if (first_failure < 0) first_failure = i;
          const std::string what = e.what();
          EXPECT_TRUE(what.starts_with("injected failure on frame " + std::to_string(i)) ||
                      what.starts_with("cannot write " + (out / blocked).string() + ": it is a directory"))
              << what;
          EXPECT_EQ(what.find("could not be taken back"), std::string::npos) << what;
          EXPECT_EQ(fs::is_directory(out / blocked), obstacle) << "taking a frame back removed a folder that is not an output";
          if (what.starts_with("cannot write ")) obstacle = !fs::remove(out / blocked);
          if (!go_on) break;
          ASSERT_LT(attempt, 2) << "frame " << i << " kept failing: " << what;
        }
      }
    }
    EXPECT_GE(failures, 1);
    set.finish();
    nlohmann::json report = set.report();
    report.erase("fail-on-frames");
    if (go_on) {
      EXPECT_EQ(tree(out), reference);
      EXPECT_EQ(report, reference_report);
    } else {
      std::error_code ec;
      fs::remove(out / blocked, ec);  // an obstacle the run stopped before reaching (empty: removed)
      const fs::path ref = dir.path / ("reference" + std::to_string(trial));
      const auto [files, ref_report] = clean_run(ref, run, static_cast<size_t>(first_failure), w, h);
      EXPECT_EQ(tree(out), files);
      EXPECT_EQ(report, ref_report);
    }
  }
}

}  // namespace
