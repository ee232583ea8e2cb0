// `lingbot-map run --video`: the golden tiny frames encoded losslessly (FFV1, RGB) into a video
// give the same reconstruction as the image folder, within the golden tolerances; frame selection
// (--fps, --first-k, --stride) applies in upstream's order.
#include <cmath>
#include <cstring>

#include "io/export_viewer.h"
#include "io/image.h"
#include "io/npy.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "run_test_util.h"
#include "test_video_writer.h"
#include "test_tools.h"

namespace {

using namespace run_test;
using nlohmann::json;

// Encodes `frames` losslessly (FFV1 stores 8-bit RGB exactly); false when FFV1 is unavailable.
bool write_ffv1_video(const fs::path& path, const std::vector<lingbot::io::ImageU8>& frames, int fps) {
  return lingbot_test::write_test_video(path, "ffv1", frames, fps);
}

const std::string kVideoArgs = kTinyRunArgs + " --keyframe-interval 1 --weights-dtype f32 --kv-dtype f32";

TEST(RunVideo, LosslessVideoOfTheTinyFramesMatchesTheReference) {
  const fs::path dir = fresh_dir("video_golden");
  LINGBOT_SKIP_WITHOUT_TOOL(write_ffv1_video(dir / "tiny.mkv", tiny_frames(), 10),
                           "this libavcodec has no FFV1 encoder, so no lossless test video can be made");
  const Result r = run_cli("run --video " + (dir / "tiny.mkv").string() + " --fps 10 --model " + kTestdata +
                           "/tiny/model.pt" + kVideoArgs + " --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto ref = lingbot::io::SafetensorsReader::open(kTestdata + "/tiny/reference.safetensors");
  const lingbot::Tensor extrinsic = ref.read("extrinsic", lingbot::DType::F32);
  const lingbot::Tensor depth = ref.read("depth", lingbot::DType::F32);
  const json poses = read_json(dir / "out" / "poses.json");
  ASSERT_EQ(poses.at("frames").size(), 10u);
  double max_d = 0;
  for (int i = 0; i < 10; ++i) {
    const json& f = poses["frames"][i];
    EXPECT_EQ(f.at("source"), "frame_" + std::to_string(i));
    EXPECT_NEAR(f.at("timestamp").get<double>(), 0.1 * i, 1e-9);
    for (int r2 = 0; r2 < 3; ++r2)
      for (int c = 0; c < 4; ++c)
        max_d = std::max(max_d, std::fabs(f["w2c"][r2][c].get<double>() - extrinsic.f32()[i * 12 + r2 * 4 + c]));
  }
  EXPECT_LE(max_d, 1e-4);
  float max_ref = 0;
  for (int64_t k = 0; k < depth.numel(); ++k) max_ref = std::max(max_ref, std::fabs(depth.f32()[k]));
  const lingbot::io::NpyArray last = lingbot::io::read_npy_f32(dir / "out" / "depth" / "000009.npy");
  const int64_t hw = 70 * 112;
  double max_depth = 0;
  for (int64_t k = 0; k < hw; ++k) max_depth = std::max(max_depth, static_cast<double>(std::fabs(last.data[k] - depth.f32()[9 * hw + k])));
  EXPECT_LE(max_depth, 1e-4 * max_ref);
  const json summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_EQ(summary.at("input").at("kind"), "video");
  // The viewer's frames say their timestamp is seconds (flags bit 1): the page labels it so.
  const std::vector<uint8_t> viewer = lingbot_test::slurp_bytes(dir / "out" / "viewer" / "000003.bin");
  ASSERT_GE(viewer.size(), 32u);
  uint32_t flags = 0;
  double stamp = 0;
  std::memcpy(&flags, viewer.data() + 12, 4);
  std::memcpy(&stamp, viewer.data() + 24, 8);
  EXPECT_EQ(flags & lingbot::io::kViewerFlagTimestampSeconds, lingbot::io::kViewerFlagTimestampSeconds);
  EXPECT_NEAR(stamp, 0.3, 1e-9);
}

// demo.py's order: sample at --fps, then the first --first-k, then every --stride-th.
TEST(RunVideo, FrameSelectionOrder) {
  const fs::path dir = fresh_dir("video_select");
  LINGBOT_SKIP_WITHOUT_TOOL(write_ffv1_video(dir / "tiny.mkv", tiny_frames(), 10),
                           "this libavcodec has no FFV1 encoder, so no lossless test video can be made");
  // 10 fps source sampled at 5 fps: frames 0 2 4 6 8; first 4: 0 2 4 6; stride 2: 0 4.
  const Result r = run_cli("run --video " + (dir / "tiny.mkv").string() + " --fps 5 --first-k 4 --stride 2 --model " +
                           kTestdata + "/tiny/model.pt" + kVideoArgs + " --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json poses = read_json(dir / "out" / "poses.json");
  ASSERT_EQ(poses.at("frames").size(), 2u);
  EXPECT_EQ(poses["frames"][0].at("source"), "frame_0");
  EXPECT_EQ(poses["frames"][1].at("source"), "frame_4");
  // The rate --fps sampled and what it kept are said, on the input line and in summary.json.
  EXPECT_TRUE(contains(r.out, "input: video " + (dir / "tiny.mkv").string() + " (10 fps, 1 in 2 frames: 5 fps), about 2 frames"))
      << r.out;
  const json input = read_json(dir / "out" / "summary.json").at("input");
  EXPECT_EQ(input.at("source_fps"), 10.0);
  EXPECT_EQ(input.at("sample_interval"), 2);
}

// An --fps far below the video's keeps its first frame: the interval (10 fps / (10 / 2^32) fps = 2^32)
// overflowed int, and the frame estimate divided by the zero it became (SIGFPE).
TEST(RunVideo, AFrameRateFarBelowTheVideosKeepsItsFirstFrame) {
  const fs::path dir = fresh_dir("video_tiny_fps");
  LINGBOT_SKIP_WITHOUT_TOOL(write_ffv1_video(dir / "tiny.mkv", tiny_frames(), 10),
                           "this libavcodec has no FFV1 encoder, so no lossless test video can be made");
  const Result r = run_cli("run --video " + (dir / "tiny.mkv").string() + " --fps 2.3283064365386963e-09 --model " + kTestdata +
                           "/tiny/model.pt" + kVideoArgs + " --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json poses = read_json(dir / "out" / "poses.json");
  ASSERT_EQ(poses.at("frames").size(), 1u);
  EXPECT_EQ(poses["frames"][0].at("source"), "frame_0");
  EXPECT_EQ(read_json(dir / "out" / "summary.json").at("input").at("sample_interval"), 2147483647);
}

// A photo given to --video is one frame with no frame rate: the input line said "(25 fps, 1 in 2 frames:
// 12.5 fps), unknown frames" and summary.json source_fps 25, FFmpeg's made-up rate.
TEST(RunVideo, APhotoGivenAsAVideoClaimsNoFrameRate) {
  const fs::path dir = fresh_dir("video_photo");
  const fs::path photo = dir / "photo.png";
  write_file(photo, lingbot::io::encode_png_rgb8(tiny_frames()[0]));
  const Result r = run_cli("run --video " + photo.string() + " --model " + kTestdata + "/tiny/model.pt" + kVideoArgs +
                           " --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "input: video " + photo.string() + ", about 1 frame, preprocessed")) << r.out;
  EXPECT_TRUE(contains(r.out, "notice: " + photo.string() + " is an image file, read as a video of one frame")) << r.out;
  const json summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary.at("frames"), 1);
  EXPECT_EQ(summary.at("input").at("source_fps"), json());
  EXPECT_EQ(summary.at("input").at("sample_interval"), json());
}

}  // namespace
