// The KV cache's rule flags end to end (kv_cache.cross_frame_special, include_scale_frames and
// camera_only: README "KV cache"; the cache-level rules are tests/kvcache's): a Session with a flag
// flipped gives results that differ from the default ones (the flag reaches the cache and changes what
// the global blocks attend to) and that the paged and dense backends agree on (two caches that present
// the rule's keys independently). Tiny model, a window of 2 so frames are evicted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "lingbot/session.h"

namespace cache_flags_test {  // named: a unity build merges this folder's files into one unit

using namespace lingbot;

// The first kFrames frames: 2 scale frames, then 4 streamed ones of which the window of 2 evicts 2.
constexpr int64_t kFrames = 6;

std::vector<FrameResult> run(const std::shared_ptr<const Model>& model, const Tensor& images, SessionOptions o) {
  const int64_t frames = kFrames, H = images.dim(2), W = images.dim(3);
  Session s(model, o);
  std::vector<FrameResult> all;
  for (int64_t i = 0; i < frames; ++i)
    for (auto& r : s.push_frame(images.f32() + i * 3 * H * W, H, W)) all.push_back(std::move(r));
  for (auto& r : s.finish()) all.push_back(std::move(r));
  return all;
}

// The largest |a - b| / max(1, |b|) over every output of every frame (features, pose, depth, points).
double max_rel_difference(const std::vector<FrameResult>& a, const std::vector<FrameResult>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t f = 0; f < std::min(a.size(), b.size()); ++f) {
    std::vector<std::pair<const Tensor*, const Tensor*>> pairs = {
        {&a[f].pose_enc, &b[f].pose_enc}, {&a[f].depth, &b[f].depth}, {&a[f].world_points, &b[f].world_points}};
    EXPECT_EQ(a[f].features.size(), b[f].features.size());
    for (size_t j = 0; j < std::min(a[f].features.size(), b[f].features.size()); ++j)
      pairs.push_back({&a[f].features[j], &b[f].features[j]});
    for (const auto& [x, y] : pairs) {
      EXPECT_FALSE(x->empty()) << "frame " << f << " has an empty output";
      EXPECT_EQ(x->shape(), y->shape());
      if (x->shape() != y->shape()) continue;
      for (int64_t i = 0; i < x->numel(); ++i) {
        const double u = x->f32()[i], v = y->f32()[i];
        worst = std::max(worst, std::fabs(u - v) / std::max(1.0, std::fabs(v)));
      }
    }
  }
  return worst;
}

TEST(CacheFlags, EachFlagChangesTheResultsAndBothBackendsAgree) {
  const std::string dir = std::string(LINGBOT_TESTDATA_DIR) + "/tiny/";
  const auto model = Model::load(dir + "weights.safetensors");
  const Tensor images = io::SafetensorsReader::open(dir + "reference.safetensors").read("images", DType::F32);
  ASSERT_GE(images.dim(0), kFrames);
  SessionOptions base;
  base.scale_frames = 2;
  base.kv_window = 2;
  base.threads = 2;
  base.kv_dtype = DType::F32;
  base.keep_features = true;
  const auto with = [&](KVBackend b, const std::function<void(SessionOptions&)>& set) {
    SessionOptions o = base;
    o.kv_backend = b;
    set(o);
    return run(model, images, o);
  };
  const auto defaults = with(KVBackend::Paged, [](SessionOptions&) {});
  const std::vector<std::pair<std::string, std::function<void(SessionOptions&)>>> flags = {
      {"cross_frame_special=false", [](SessionOptions& o) { o.cross_frame_special = false; }},
      {"include_scale_frames=false", [](SessionOptions& o) { o.include_scale_frames = false; }},
      {"camera_only=true", [](SessionOptions& o) { o.camera_only = true; }},
  };
  for (const auto& [name, set] : flags) {
    const auto paged = with(KVBackend::Paged, set), dense = with(KVBackend::Dense, set);
    ASSERT_EQ(paged.size(), static_cast<size_t>(kFrames)) << name;
    // The golden tolerance of the two backends against the reference is 1e-5 relative (README).
    const double backends = max_rel_difference(paged, dense);
    EXPECT_LE(backends, 1e-5) << name << ": paged and dense disagree";
    // A flag that did not reach the cache would leave every output as the default's (to the bit).
    const double effect = max_rel_difference(paged, defaults);
    EXPECT_GT(effect, 1e-3) << name << ": the results equal the default ones";
    std::printf("  %s: paged vs dense %.3g, vs the default %.3g\n", name.c_str(), backends, effect);
  }
}

}  // namespace cache_flags_test
