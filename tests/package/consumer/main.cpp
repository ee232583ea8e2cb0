// Streams a few generated frames through a checkpoint with the public API only (<lingbot/...>), and
// checks what the API promises about the results: one result per frame in order, the documented
// shapes, positive depth, confidence > 1, extrinsic = inverse of extrinsic_c2w, world points =
// extrinsic_c2w · (K⁻¹ [x, y, 1]ᵀ · depth), identical results after reset(), and a lingbot::Error for a
// frame of the wrong size; and a frame made from an 8-bit picture with lingbot::preprocess_image. Prints one summary line; exits 1 with "consumer: FAIL ..." otherwise.
// Usage: consumer CHECKPOINT
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lingbot/error.h"
#include "lingbot/model.h"
#include "lingbot/preprocess.h"
#include "lingbot/session.h"

namespace {

constexpr int64_t kHeight = 70, kWidth = 112;  // multiples of the tiny model's 14-pixel patches
constexpr int kFrames = 6;  // 2 scale frames + 4 streamed: the 3-frame window evicts

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "consumer: FAIL %s\n", what.c_str());
  std::exit(1);
}

void expect(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// A smooth colour pattern that moves with the frame index (values in [0, 1]).
lingbot::Tensor make_frame(int index, int64_t height = kHeight, int64_t width = kWidth) {
  lingbot::Tensor image({3, height, width});
  float* px = image.f32();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x)
        px[(c * height + y) * width + x] =
            0.5f + 0.45f * std::sin(0.11f * static_cast<float>(x + 3 * index) + 0.07f * static_cast<float>(y) +
                                    1.3f * static_cast<float>(c));
  return image;
}

std::vector<lingbot::FrameResult> stream(lingbot::Session& session) {
  std::vector<lingbot::FrameResult> results;
  for (int i = 0; i < kFrames; ++i)
    for (lingbot::FrameResult& r : session.push_frame(make_frame(i))) results.push_back(std::move(r));
  for (lingbot::FrameResult& r : session.finish()) results.push_back(std::move(r));
  return results;
}

bool same_bytes(const lingbot::Tensor& a, const lingbot::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void check_geometry(const lingbot::FrameResult& r) {
  const std::string f = "frame " + std::to_string(r.frame_index) + ": ";
  const float* e = r.extrinsic.f32();      // world -> camera [3, 4]
  const float* c2w = r.extrinsic_c2w.f32();  // camera -> world [3, 4]
  // extrinsic · [c2w; 0 0 0 1] must be [I | 0].
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double v = j == 3 ? e[i * 4 + 3] : 0.0;
      for (int k = 0; k < 3; ++k) v += e[i * 4 + k] * c2w[k * 4 + j];
      const double want = (j < 3 && i == j) ? 1.0 : 0.0;
      expect(std::abs(v - want) < 1e-4, f + "extrinsic is not the inverse of extrinsic_c2w");
    }
  const float* K = r.intrinsic.f32();
  const float* depth = r.depth.f32();
  const float* conf = r.depth_conf.f32();
  const float* wp = r.world_points.f32();
  for (int64_t i = 0; i < kHeight * kWidth; ++i) {
    expect(std::isfinite(depth[i]) && depth[i] > 0.0f, f + "depth must be positive");
    expect(std::isfinite(conf[i]) && conf[i] > 1.0f, f + "depth_conf must be > 1");
  }
  for (int64_t y = 0; y < kHeight; y += 13)
    for (int64_t x = 0; x < kWidth; x += 17) {
      const float d = depth[y * kWidth + x];
      const double cam[3] = {(static_cast<double>(x) - K[2]) / K[0] * d, (static_cast<double>(y) - K[5]) / K[4] * d, d};
      for (int i = 0; i < 3; ++i) {
        const double w = c2w[i * 4] * cam[0] + c2w[i * 4 + 1] * cam[1] + c2w[i * 4 + 2] * cam[2] + c2w[i * 4 + 3];
        const double got = wp[(y * kWidth + x) * 3 + i];
        expect(std::abs(got - w) <= 1e-3 * (1.0 + std::abs(w)), f + "world point (" + std::to_string(x) + ", " +
                                                                     std::to_string(y) + ") is not c2w·K⁻¹·depth");
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: consumer CHECKPOINT");
  try {
    const std::shared_ptr<const lingbot::Model> model = lingbot::Model::load(argv[1]);
    lingbot::SessionOptions options;
    options.scale_frames = 2;
    options.kv_window = 3;
    options.threads = 2;
    options.keep_features = true;
    lingbot::Session session(model, options);

    const std::vector<lingbot::FrameResult> results = stream(session);
    expect(results.size() == kFrames, "expected " + std::to_string(kFrames) + " results, got " +
                                          std::to_string(results.size()));
    for (int i = 0; i < kFrames; ++i) {
      const lingbot::FrameResult& r = results[i];
      expect(r.frame_index == i, "results out of order");
      expect(r.frame_type == (i < 2 ? lingbot::FrameType::Scale : lingbot::FrameType::Keyframe), "wrong frame_type");
      r.pose_enc.check_shape({9}, "pose_enc");
      r.extrinsic.check_shape({3, 4}, "extrinsic");
      r.extrinsic_c2w.check_shape({3, 4}, "extrinsic_c2w");
      r.intrinsic.check_shape({3, 3}, "intrinsic");
      r.depth.check_shape({kHeight, kWidth}, "depth");
      r.depth_conf.check_shape({kHeight, kWidth}, "depth_conf");
      r.world_points.check_shape({kHeight, kWidth, 3}, "world_points");
      expect(r.features.size() == model->config().aggregator.selected_layers.size(), "one feature per selected layer");
      check_geometry(r);
    }
    const lingbot::SessionStats stats = session.stats();
    expect(stats.frames_completed == kFrames, "stats.frames_completed");
    expect(stats.cache.frames_stored == kFrames && stats.cache.frames_resident == 5,
           "the cache must hold 2 pinned + 3 window frames of " + std::to_string(kFrames) + ", holds " +
               std::to_string(stats.cache.frames_resident) + " of " + std::to_string(stats.cache.frames_stored));

    session.reset();
    const std::vector<lingbot::FrameResult> again = stream(session);
    for (int i = 0; i < kFrames; ++i)
      expect(same_bytes(results[i].pose_enc, again[i].pose_enc) && same_bytes(results[i].depth, again[i].depth) &&
                 same_bytes(results[i].world_points, again[i].world_points),
             "results differ after reset()");

    session.reset();
    session.push_frame(make_frame(0));
    std::string error;
    try {
      session.push_frame(make_frame(1, kHeight, kWidth + 14));
    } catch (const lingbot::Error& e) {
      error = e.what();
    }
    expect(error.find("has size 70x126 (HxW), but this sequence's frames are 70x112") != std::string::npos,
           "a frame of another size must throw lingbot::Error, got \"" + error + "\"");

    // A frame from an 8-bit picture: 150x100 RGB, width to 112 (crop mode) -> 112x74.7 -> 70 rows.
    std::vector<uint8_t> rgb(150 * 100 * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 % 256);
    lingbot::PreprocessOptions pre;
    pre.image_size = static_cast<int>(kWidth);
    pre.patch_size = static_cast<int>(model->patch_size());
    const lingbot::Tensor picture = lingbot::preprocess_image(rgb.data(), 150, 100, pre);
    picture.check_shape({3, kHeight, kWidth}, "preprocessed picture");
    session.reset();
    session.push_frame(picture);
    expect(session.frames_pushed() == 1, "a preprocessed picture must be accepted as a frame");
    error.clear();
    try {
      lingbot::load_frame("no-such-picture.png", pre);
    } catch (const lingbot::Error& e) {
      error = e.what();
    }
    expect(error == "image file not found: no-such-picture.png", "load_frame of a missing file, got \"" + error + "\"");

    const float* t = results[kFrames - 1].extrinsic_c2w.f32();
    std::printf("consumer: %d frames through %s (%s weights), depth [%lld, %lld], world_points [%lld, %lld, 3], "
                "%zu features; geometry consistent; identical after reset; last camera centre (%.4f, %.4f, %.4f)\n",
                kFrames, lingbot::kv_backend_name(session.options().kv_backend), std::string(lingbot::dtype_name(model->weights_dtype())).c_str(),
                static_cast<long long>(kHeight), static_cast<long long>(kWidth), static_cast<long long>(kHeight),
                static_cast<long long>(kWidth), results[0].features.size(), t[3], t[7], t[11]);
  } catch (const lingbot::Error& e) {
    fail(std::string("lingbot::Error: ") + e.what());
  }
  return 0;
}
