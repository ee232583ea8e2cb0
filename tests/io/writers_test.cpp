// Result writers: every file parses after every incremental step.
#include <gtest/gtest.h>

#include "test_temp_dir.h"
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"
#include "io/npy.h"
#include "io/png.h"
#include "io/writers.h"

#include "io/stb_image_quiet.h"  // implementation: stb_image_reader.cpp
#include "test_files.h"

using namespace lingbot;
using namespace lingbot::io;

namespace {

using lingbot_test::TempDir;

using lingbot_test::slurp;

// A rotation of `deg` degrees about axis (ax, ay, az) (unit) with translation t, as w2c 3x4.
RigidTransform<double> make_pose(double deg, double ax, double ay, double az, double tx, double ty, double tz) {
  const double a = deg * M_PI / 180, c = std::cos(a), s = std::sin(a), C = 1 - c;
  return {c + ax * ax * C,      ax * ay * C - az * s, ax * az * C + ay * s, tx,
          ay * ax * C + az * s, c + ay * ay * C,      ay * az * C - ax * s, ty,
          az * ax * C - ay * s, az * ay * C + ax * s, c + az * az * C,      tz};
}

// Minimal binary PLY parse: vertex count from the header and the vertex records.
struct Ply {
  int64_t count = -1;
  std::vector<float> xyz;
  std::vector<uint8_t> rgb;
};
Ply parse_ply(const std::filesystem::path& p) {
  const std::string s = slurp(p);
  Ply ply;
  const size_t end = s.find("end_header\n");
  EXPECT_NE(end, std::string::npos);
  std::istringstream head(s.substr(0, end));
  std::string line;
  std::vector<std::string> props;
  while (std::getline(head, line)) {
    std::istringstream ls(line);
    std::string a, b, c;
    ls >> a >> b >> c;
    if (a == "format") {
      EXPECT_EQ(b, "binary_little_endian");
    }
    if (a == "element" && b == "vertex") ply.count = std::stoll(c);
    if (a == "property") props.push_back(b + " " + c);
  }
  EXPECT_EQ(props, (std::vector<std::string>{"float x", "float y", "float z", "uchar red", "uchar green", "uchar blue"}));
  const size_t data = end + std::strlen("end_header\n");
  EXPECT_EQ(s.size() - data, static_cast<size_t>(ply.count) * 15) << "file size must match the header";
  for (int64_t i = 0; i < ply.count; ++i) {
    float v[3];
    std::memcpy(v, s.data() + data + i * 15, 12);
    ply.xyz.insert(ply.xyz.end(), v, v + 3);
    for (int c = 0; c < 3; ++c) ply.rgb.push_back(static_cast<uint8_t>(s[data + i * 15 + 12 + c]));
  }
  return ply;
}

}  // namespace

TEST(Writers, RigidInverseAndQuaternion) {
  const RigidTransform<double> w2c = make_pose(30, 0, 0, 1, 1, 2, 3);
  const Mat44 c2w = rigid_inverse_4x4(w2c);
  // c2w * w2c = identity
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double v = c2w[i * 4 + 3] * (j == 3);
      for (int k = 0; k < 3; ++k) v += c2w[i * 4 + k] * w2c[k * 4 + j];
      EXPECT_NEAR(v, (i == j) ? 1.0 : 0.0, 1e-12) << i << "," << j;
    }
  // 90 degrees about z: q = (0, 0, sin45, cos45); 180 about x: (1, 0, 0, 0).
  auto q = rotation_to_quaternion_xyzw(make_pose(90, 0, 0, 1, 0, 0, 0));
  EXPECT_NEAR(q[2], std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(q[3], std::sqrt(0.5), 1e-12);
  q = rotation_to_quaternion_xyzw(make_pose(180, 1, 0, 0, 0, 0, 0));
  EXPECT_NEAR(std::fabs(q[0]), 1.0, 1e-12);
  q = rotation_to_quaternion_xyzw(make_pose(170, 0, 1, 0, 0, 0, 0));
  EXPECT_NEAR(q[1], std::sin(85 * M_PI / 180), 1e-12);
  EXPECT_GE(q[3], 0.0);
}

TEST(Writers, PosesJsonIsValidAfterEveryFrame) {
  TempDir dir;
  const auto path = dir.path / "poses.json";
  PosesJsonWriter w(path, {{"image_width", 518}, {"image_height", 294}});
  EXPECT_EQ(nlohmann::json::parse(slurp(path))["frames"].size(), 0u);
  for (int i = 0; i < 3; ++i) {
    FramePose p;
    p.index = i;
    p.timestamp = 0.5 * i;
    p.keyframe = i != 1;
    p.source = "frame" + std::to_string(i) + ".png";
    p.c2w = rigid_inverse(make_pose(10.0 * i, 0, 1, 0, i, 0, 0));  // given as c2w, checked as both
    p.intrinsics = {100, 0, 259, 0, 101, 147, 0, 0, 1};
    if (i == 2) p.placement = SourcePlacement{{1036, 600}, {518, 300}, 0, -3};  // half size, 3 rows cut
    w.append(p);
    const nlohmann::json doc = nlohmann::json::parse(slurp(path));  // throws if invalid
    ASSERT_EQ(doc["frames"].size(), static_cast<size_t>(i + 1));
  }
  const nlohmann::json doc = nlohmann::json::parse(slurp(path));
  EXPECT_EQ(doc["format"], "lingbot-map poses");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["image_width"], 518);
  const auto& f1 = doc["frames"][1];
  EXPECT_EQ(f1["index"], 1);
  EXPECT_EQ(f1["keyframe"], false);
  EXPECT_EQ(f1["source"], "frame1.png");
  EXPECT_DOUBLE_EQ(f1["timestamp"].get<double>(), 0.5);
  ASSERT_EQ(f1["c2w"].size(), 4u);
  ASSERT_EQ(f1["c2w"][0].size(), 4u);
  ASSERT_EQ(f1["w2c"].size(), 3u);
  ASSERT_EQ(f1["w2c"][0].size(), 4u);
  ASSERT_EQ(f1["intrinsics"].size(), 3u);
  EXPECT_EQ(f1["intrinsics"][1][1], 101.0);
  EXPECT_EQ(f1["c2w"][3], (nlohmann::json{0.0, 0.0, 0.0, 1.0}));
  const Mat44 c2w = rigid_inverse_4x4(make_pose(10, 0, 1, 0, 1, 0, 0));
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(f1["c2w"][r][c].get<double>(), c2w[r * 4 + c], 1e-15);
  const RigidTransform<double> w2c = make_pose(10, 0, 1, 0, 1, 0, 0);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(f1["w2c"][r][c].get<double>(), w2c[r * 4 + c], 1e-12);
  // A frame given as it is has no source picture; one preprocessed here says its picture's size and K
  // in its pixels: fx0 = fx / 0.5, cx0 = (259 + 0.5) / 0.5 - 0.5, cy0 = (147 + 3 + 0.5) / 0.5 - 0.5.
  EXPECT_FALSE(f1.contains("source_size"));
  EXPECT_FALSE(f1.contains("source_intrinsics"));
  const auto& f2 = doc["frames"][2];
  EXPECT_EQ(f2["source_size"], (nlohmann::json{1036, 600}));
  EXPECT_EQ(f2["source_intrinsics"], (nlohmann::json{{200.0, 0.0, 518.5}, {0.0, 202.0, 300.5}, {0.0, 0.0, 1.0}}));
}

TEST(Writers, TumHasOneLinePerFrameWithCameraCentre) {
  TempDir dir;
  const auto path = dir.path / "trajectory.tum";
  {
    TumWriter w(path);
    for (int i = 0; i < 4; ++i) w.append(i / 10.0, rigid_inverse(make_pose(90, 0, 0, 1, 1, 2, 3)));
  }
  std::istringstream in(slurp(path));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    double v[8];
    for (double& x : v) ASSERT_TRUE(static_cast<bool>(ls >> x)) << line;
    EXPECT_NEAR(v[0], n / 10.0, 1e-9);
    // Camera centre = -R^T t for R = Rz(90), t = (1,2,3): R^T t = (2, -1, 3).
    EXPECT_NEAR(v[1], -2, 1e-7);
    EXPECT_NEAR(v[2], 1, 1e-7);
    EXPECT_NEAR(v[3], -3, 1e-7);
    // c2w rotation is Rz(-90): q = (qx, qy, qz, qw) = (0, 0, -sin45, cos45).
    EXPECT_NEAR(v[4], 0, 1e-7);
    EXPECT_NEAR(v[5], 0, 1e-7);
    EXPECT_NEAR(v[6], -std::sqrt(0.5), 1e-7);
    EXPECT_NEAR(v[7], std::sqrt(0.5), 1e-7);
    ++n;
  }
  EXPECT_EQ(n, 4);
}

TEST(Writers, PlyIsValidAfterEveryFlush) {
  TempDir dir;
  const auto path = dir.path / "points.ply";
  PlyWriter w(path);
  EXPECT_EQ(parse_ply(path).count, 0);
  const std::vector<float> xyz = {1, 2, 3, -4.5f, 5, 6e3f};
  const std::vector<uint8_t> rgb = {255, 0, 1, 7, 8, 9};
  w.append_points(xyz, rgb);
  EXPECT_EQ(w.points(), 2);
  w.flush();
  Ply p = parse_ply(path);
  EXPECT_EQ(p.count, 2);
  EXPECT_EQ(p.xyz, xyz);
  EXPECT_EQ(p.rgb, rgb);
  w.append_points(xyz, rgb);
  w.append_points({}, {});
  w.flush();
  p = parse_ply(path);
  EXPECT_EQ(p.count, 4);
  EXPECT_EQ(p.xyz[11], 6e3f);
  EXPECT_EQ(p.rgb[11], 9);
  EXPECT_THROW(w.append_points(std::vector<float>{1, 2, 3}, std::vector<uint8_t>{1, 2}), Error);
}

TEST(Writers, NpyRoundTripAndHeader) {
  TempDir dir;
  const auto path = dir.path / "depth.npy";
  std::vector<float> v(6 * 7);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 3;
  const std::vector<int64_t> shape = {6, 7};
  write_npy_f32(path, shape, v);
  const std::string bytes = slurp(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t hlen = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  EXPECT_EQ((10 + hlen) % 64, 0u);
  const std::string dict = bytes.substr(10, hlen);
  EXPECT_EQ(dict.substr(0, dict.find('}') + 1), "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 7), }");
  EXPECT_EQ(dict.back(), '\n');
  const NpyArray a = read_npy_f32(path);
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.data, v);
  // 1-D shapes carry the trailing comma of a Python 1-tuple.
  EXPECT_NE(npy_header_f32(std::vector<int64_t>{5}).find("'shape': (5,), }"), std::string::npos);
  EXPECT_THROW(write_npy_f32(path, shape, std::vector<float>(3)), Error);
  write_file_atomic(dir.path / "bad.npy", std::string_view("not numpy"));
  try {
    read_npy_f32(dir.path / "bad.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "invalid npy file " + (dir.path / "bad.npy").string() + ": bad magic");
  }
  // A declared shape is untrusted: one whose byte count wraps around (2^62 floats = 2^64 bytes, "0" data
  // bytes) is refused by name, and a data size that does not match the shape says both.
  const auto error_of = [&](const std::vector<int64_t>& declared, size_t data_bytes) {
    write_file_atomic(dir.path / "h.npy", npy_header_f32(declared) + std::string(data_bytes, '\0'));
    try {
      read_npy_f32(dir.path / "h.npy");
      return std::string("no error");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  const std::string name = "invalid npy file " + (dir.path / "h.npy").string() + ": ";
  EXPECT_EQ(error_of({int64_t{1} << 62}, 0), name + "the shape holds 4611686018427387904 float32 values, found 0 data bytes");
  EXPECT_EQ(error_of({int64_t{1} << 62, 4}, 0), name + "shape [4611686018427387904, 4] has too many elements");
  EXPECT_EQ(error_of({2, 3}, 20), name + "the shape holds 6 float32 values, found 20 data bytes");
  EXPECT_EQ(error_of({2, 3}, 25), name + "the shape holds 6 float32 values, found 25 data bytes");
  EXPECT_EQ(error_of({2, 3}, 24), "no error");
}

TEST(Writers, DepthPng16RoundTripWithUnit) {
  TempDir dir;
  const auto path = dir.path / "000000.png";
  const std::vector<float> depth = {0.001f, 1.0f, 2.5f, 70.0f, -1.0f, NAN, 0.0f, 1e-6f};
  EXPECT_EQ(write_map_png16(path, 4, 2, depth, kDepthPngUnit, "depth"), 1);  // 70 does not fit: clipped
  const std::string bytes = slurp(path);
  int w = 0, h = 0, comp = 0;
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  ASSERT_TRUE(stbi_is_16_bit_from_memory(data, static_cast<int>(bytes.size())));
  stbi_us* px = stbi_load_16_from_memory(data, static_cast<int>(bytes.size()), &w, &h, &comp, 1);
  ASSERT_NE(px, nullptr);
  EXPECT_EQ(w, 4);
  EXPECT_EQ(h, 2);
  EXPECT_EQ(comp, 1);
  const std::vector<uint16_t> got(px, px + 8);
  stbi_image_free(px);
  EXPECT_EQ(got, (std::vector<uint16_t>{1, 1000, 2500, 65535, 0, 0, 0, 1}));
  // The unit travels with the file as tEXt chunks.
  EXPECT_NE(bytes.find(std::string("lingbot:unit\0", 13) + "0.001"), std::string::npos);
  EXPECT_NE(bytes.find(std::string("lingbot:quantity\0", 17) + "depth"), std::string::npos);
}

TEST(Writers, RgbPngRoundTrip) {
  TempDir dir;
  ImageU8 img(3, 2);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 13);
  write_png_rgb8(dir.path / "a.png", img);
  EXPECT_EQ(load_image(dir.path / "a.png").rgb, img.rgb);
}

TEST(Writers, JsonFileAtomicAndErrorsNameThePath) {
  TempDir dir;
  write_json_file(dir.path / "summary.json", {{"frames", 3}, {"interrupted", false}});
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.path / "summary.json"))["frames"], 3);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "summary.json.tmp"));
  const auto bad = dir.path / "no_such_dir" / "poses.json";
  try {
    PosesJsonWriter w(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write " + bad.string() + ": No such file or directory");
  }
  try {
    write_json_file(bad, nlohmann::json::object());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write " + bad.string() + ": No such file or directory");
  }
}

TEST(Writers, DepthFrameFilesAreNamedByIndex) {
  TempDir dir;
  const std::vector<float> depth = {1, 2, 3, 4, 5, 6}, conf = {1.5f, 2, 3, 4, 5, 600};
  const ClippedSamples none = write_depth_frame(dir.path, 7, 3, 2, depth, conf);
  EXPECT_EQ(none.depth, 0);
  EXPECT_EQ(none.confidence, 0);
  // 65.535 is the largest depth a sample holds (65535); 65.5356 rounds past it; conf 655.35 likewise.
  const std::vector<float> far = {65.535f, 65.5356f, 1e9f, INFINITY, 3, 4}, high = {655.35f, 655.36f, 2, 2, 2, 2};
  const ClippedSamples some = write_depth_frame(dir.path, 9, 3, 2, far, high);
  EXPECT_EQ(some.depth, 2);  // inf is invalid (0), not clipped
  EXPECT_EQ(some.confidence, 1);
  for (const char* f : {"000007.png", "000007.npy", "000007_conf.png", "000007_conf.npy"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.path / f)) << f;
  }
  const NpyArray d = read_npy_f32(dir.path / "000007.npy");
  EXPECT_EQ(d.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(d.data, depth);
  EXPECT_EQ(read_npy_f32(dir.path / "000007_conf.npy").data, conf);
  write_depth_frame(dir.path, 8, 3, 2, depth, {});
  EXPECT_TRUE(std::filesystem::exists(dir.path / "000008.npy"));
  EXPECT_FALSE(std::filesystem::exists(dir.path / "000008_conf.npy"));
}

TEST(Writers, SelectPointsLikeUpstreamViewer) {
  // 6 pixels; pixel 1 has a NaN coordinate, pixel 3 low confidence (equal to the threshold: dropped).
  const std::vector<float> pts = {0, 0, 0, NAN, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5};
  std::vector<float> img(18);
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 6; ++i) img[c * 6 + i] = static_cast<float>(10 * i + c) / 255.0f;
  const std::vector<float> conf = {2, 2, 2, 1.5f, 2, 2};
  PointBatch b = select_points(pts, img, conf, 1.5f, 1);
  ASSERT_EQ(b.size(), 4u);  // pixels 0, 2, 4, 5
  EXPECT_EQ(b.xyz[3], 2.0f);
  EXPECT_EQ(b.rgb[3], 20);  // pixel 2, channel 0
  EXPECT_EQ(b.rgb[5], 22);  // pixel 2, channel 2
  b = select_points(pts, img, conf, 1.5f, 2);  // every 2nd of (0, 2, 4, 5) -> 0, 4
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b.xyz[3], 4.0f);
  b = select_points(pts, img, {}, 1.5f, 1);  // no confidence: only the NaN point goes
  EXPECT_EQ(b.size(), 5u);
}

// poses.json and points.ply start as a whole header renamed into place: a run killed just after
// opening one left it empty (seen once in 50 kills), where the old file or the header is valid. The
// old file is replaced, not truncated: a reader holding it still reads all of it; a link is replaced
// (a run's own files: OnLink::Replace), what it named left alone; no temporary is left.
TEST(Writers, PosesAndPlyStartAsAWholeHeaderRenamedIntoPlace) {
  TempDir dir;
  for (const std::string name : {"poses.json", "points.ply"}) {
    const auto path = dir.path / name;
    write_file_atomic(path, std::string_view("an earlier run's file"));
    std::ifstream earlier(path, std::ios::binary);  // open before the writer starts
    {
      std::optional<PosesJsonWriter> poses;
      std::optional<PlyWriter> ply;
      if (name == "poses.json") poses.emplace(path);
      else ply.emplace(path);
      EXPECT_FALSE(std::filesystem::exists(temp_path(path))) << name;
      const std::string now = slurp(path);
      EXPECT_TRUE(now.rfind(name == "poses.json" ? "{\"format\":\"lingbot-map poses\"" : "ply\n", 0) == 0) << now;
      std::stringstream old;
      old << earlier.rdbuf();
      EXPECT_EQ(old.str(), "an earlier run's file") << name;
    }
    const auto target = dir.path / ("target_" + name), link = dir.path / ("link_" + name);
    write_file_atomic(target, std::string_view("the user's file"));
    std::filesystem::create_symlink(target.filename(), link);
    if (name == "poses.json") PosesJsonWriter w(link);
    else PlyWriter w(link);
    EXPECT_FALSE(std::filesystem::is_symlink(link)) << name;
    EXPECT_EQ(slurp(target), "the user's file") << name;
  }
}
