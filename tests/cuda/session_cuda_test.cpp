// The whole model on CUDA: a Session with device cuda (CudaBackend + the CUDA paged KV cache) against
// the same Session on the CPU, on the tiny checkpoint of testdata/ (scale phase, keyframes and
// non-keyframes, cache eviction), every output of every frame compared.
// Tolerances: |cuda − cpu| ≤ tol · max(1, |cpu|) with tol 2e-4 for f32 K/V (every op f32 on both
// sides: only summation order and libm differ, accumulated over the network's depth; measured 7e-6 on
// the emulated device) and 1e-2 for bf16 K/V (the device's tensor-core attention also rounds queries
// and probabilities to bf16, the CPU's does not; measured 2.5e-3). Needs a device; skips visibly
// without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "io/safetensors.h"
#include "lingbot/session.h"
#include "pipeline/session_backend.h"

using namespace lingbot;

namespace {

std::vector<FrameResult> run(const std::shared_ptr<const Model>& model, const SessionOptions& o, const Tensor& images,
                             int64_t frames, std::string* description) {
  Session s(model, o);
  if (description) *description = s.device_description();
  const int64_t H = images.dim(2), W = images.dim(3);
  std::vector<FrameResult> all;
  for (int64_t i = 0; i < frames; ++i)
    for (auto& r : s.push_frame(images.f32() + i * 3 * H * W, H, W)) all.push_back(std::move(r));
  for (auto& r : s.finish()) all.push_back(std::move(r));
  return all;
}

// Largest |a − b| / max(1, |b|) over two tensors of the same shape (+inf on a shape mismatch or NaN).
double max_rel_error(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.f32()[i], y = b.f32()[i];
    const double err = std::fabs(x - y) / std::max(1.0, std::fabs(y));
    worst = std::isnan(err) ? INFINITY : std::max(worst, err);
  }
  return worst;
}

}  // namespace

std::string tiny_dir() { return cuda::testing::testdata_dir() + "/tiny/"; }

namespace {

// The tiny checkpoint and its reference images [S, 3, H, W]; empty (and a test failure naming the
// missing file) when testdata/ is not found.
struct Tiny {
  std::shared_ptr<const Model> model;
  Tensor images;
};
std::optional<Tiny> load_tiny() {
  const std::string dir = tiny_dir();
  if (!std::filesystem::exists(dir + "weights.safetensors")) {
    ADD_FAILURE() << "no " << dir << "weights.safetensors: set LINGBOT_TESTDATA_DIR to the repository's testdata/";
    return std::nullopt;
  }
  return Tiny{Model::load(dir + "weights.safetensors"),
              io::SafetensorsReader::open(dir + "reference.safetensors").read("images", DType::F32)};
}

// The tiny model's streaming setup: 2 scale frames, a window of 2 (so a few frames evict), 2 threads.
SessionOptions tiny_options() {
  SessionOptions o;
  o.scale_frames = 2;
  o.kv_window = 2;
  o.threads = 2;
  o.keep_features = true;  // compared too
  return o;
}

}  // namespace

TEST(CudaSession, TinyModelMatchesTheCpuOnEveryOutput) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  const std::optional<Tiny> tiny = load_tiny();
  ASSERT_TRUE(tiny);
  const auto& [model, images] = *tiny;
  const int64_t frames = std::min<int64_t>(images.dim(0), 6);
  for (DType kv : {DType::F32, DType::BF16}) {
    SessionOptions o = tiny_options();  // with 6 frames and keyframe interval 2 the window evicts
    o.keyframe_interval = 2;
    o.kv_dtype = kv;
    o.device = Device::Cpu;
    const auto cpu = run(model, o, images, frames, nullptr);
    o.device = Device::Cuda;
    std::string desc;
    const auto gpu = run(model, o, images, frames, &desc);
    EXPECT_EQ(desc.rfind("cuda:0 (", 0), 0u) << desc;
    const double tol = kv == DType::F32 ? 2e-4 : 1e-2;
    ASSERT_EQ(gpu.size(), cpu.size());
    double worst = 0;
    for (size_t f = 0; f < cpu.size(); ++f) {
      const FrameResult &c = cpu[f], &g = gpu[f];
      EXPECT_EQ(g.frame_index, c.frame_index);
      EXPECT_EQ(g.frame_type, c.frame_type);
      const std::string where = std::string(dtype_name(kv)) + " K/V, frame " + std::to_string(c.frame_index);
      auto check = [&](const Tensor& got, const Tensor& want, const char* what) {
        const double e = max_rel_error(got, want);
        worst = std::max(worst, e);
        EXPECT_LE(e, tol) << where << ": " << what;
      };
      check(g.pose_enc, c.pose_enc, "pose_enc");
      check(g.extrinsic_c2w, c.extrinsic_c2w, "extrinsic_c2w");
      check(g.intrinsic, c.intrinsic, "intrinsic");
      check(g.depth, c.depth, "depth");
      check(g.depth_conf, c.depth_conf, "depth_conf");
      check(g.world_points, c.world_points, "world_points");
      ASSERT_EQ(g.features.size(), c.features.size()) << where;
      for (size_t j = 0; j < c.features.size(); ++j) check(g.features[j], c.features[j], "features");
    }
    std::printf("  %s K/V: %zu frames, max rel error %.3g (tolerance %.3g) on %s\n",
                std::string(dtype_name(kv)).c_str(), cpu.size(), worst, tol, desc.c_str());
  }
}

// SessionStats' device memory: absent on the CPU; on CUDA the backend's high-water mark, which holds at
// least the KV cache and the frame being encoded at once, never decreases (reset() included), and
// the KV cache's device bytes are its reserved bytes.
TEST(CudaSession, DevicePeakBytesCoverTheKvCache) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  const std::optional<Tiny> tiny = load_tiny();
  ASSERT_TRUE(tiny);
  const auto& [model, images] = *tiny;
  const int64_t H = images.dim(2), W = images.dim(3), frames = std::min<int64_t>(images.dim(0), 6);
  SessionOptions o = tiny_options();
  o.kv_dtype = DType::BF16;
  o.device = Device::Cpu;
  {
    Session cpu(model, o);
    cpu.push_frame(images.f32(), H, W);
    EXPECT_FALSE(cpu.stats().device_peak_bytes.has_value());
    EXPECT_FALSE(cpu.stats().device_kv_cache_bytes.has_value());
  }
  o.device = Device::Cuda;
  Session s(model, o);
  ASSERT_TRUE(s.stats().device_peak_bytes.has_value());
  int64_t last = *s.stats().device_peak_bytes;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass after reset()
    for (int64_t i = 0; i < frames; ++i) {
      s.push_frame(images.f32() + i * 3 * H * W, H, W);
      const SessionStats st = s.stats();
      ASSERT_TRUE(st.device_peak_bytes && st.device_kv_cache_bytes);
      EXPECT_EQ(*st.device_kv_cache_bytes, st.cache.bytes_reserved);
      if (i + 1 >= o.scale_frames) {  // the cache exists once the scale phase ran
        EXPECT_GT(*st.device_kv_cache_bytes, 0);
        EXPECT_GE(*st.device_peak_bytes, *st.device_kv_cache_bytes + 3 * H * W * static_cast<int64_t>(sizeof(float)))
            << "pass " << pass << ", frame " << i;
      }
      EXPECT_GE(*st.device_peak_bytes, last) << "pass " << pass << ", frame " << i;
      last = *st.device_peak_bytes;
    }
    s.finish();
    s.reset();
  }
}

// A streamed frame's host -> device copies (its image, the cache's tables, the normalisation
// constants, ...) all go through pinned memory: from pageable memory each would first wait for the
// work queued on the stream, and the host could not queue the next frame's work meanwhile.
TEST(CudaSession, AStreamedFrameMakesNoPageableUpload) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
#ifndef LINGBOT_CUDA_RUNTIME_SHIM
  GTEST_SKIP() << "counts the host emulation's pageable copies (tests/cuda_emulated)";
#else
  const std::optional<Tiny> tiny = load_tiny();
  ASSERT_TRUE(tiny);
  const auto& [model, images] = *tiny;
  const int64_t H = images.dim(2), W = images.dim(3);
  SessionOptions o = tiny_options();
  o.device = Device::Cuda;
  Session s(model, o);
  for (int64_t i = 0; i < o.scale_frames; ++i) s.push_frame(images.f32() + i * 3 * H * W, H, W);
  const long before = emulated_pageable_uploads();
  ASSERT_EQ(s.push_frame(images.f32() + o.scale_frames * 3 * H * W, H, W).size(), 1u);
  EXPECT_EQ(emulated_pageable_uploads(), before);
#endif
}

// Phase times: on the device every phase gains device time (CUDA events around its queued work;
// emulated, the host clock) with every step; a CPU session's phases have none. Wall time grows on both.
TEST(CudaSession, PhasesHaveDeviceTimeOnTheDeviceOnly) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  const std::optional<Tiny> tiny = load_tiny();
  ASSERT_TRUE(tiny);
  const auto& [model, images] = *tiny;
  const int64_t H = images.dim(2), W = images.dim(3), frames = std::min<int64_t>(images.dim(0), 5);
  SessionOptions o = tiny_options();
  const auto all = [](const SessionPhaseTimes& p) {
    return std::array<PhaseTime, 5>{p.encoder, p.frame_blocks, p.global_blocks, p.camera_head, p.dpt_head};
  };
  for (const Device d : {Device::Cpu, Device::Cuda}) {
    o.device = d;
    Session s(model, o);
    std::array<PhaseTime, 5> prev{};
    for (int64_t i = 0; i < frames; ++i) {
      if (s.push_frame(images.f32() + i * 3 * H * W, H, W).empty()) continue;  // scale frames buffered
      const std::array<PhaseTime, 5> now = all(s.stats().phases);
      for (size_t k = 0; k < now.size(); ++k) {
        if (d == Device::Cpu) {
          EXPECT_EQ(now[k].device_s, 0.0) << "phase " << k;
        } else {
          EXPECT_GT(now[k].device_s, prev[k].device_s) << "phase " << k << ", frame " << i;
        }
        EXPECT_GT(now[k].wall_s, prev[k].wall_s) << "phase " << k << ", frame " << i;
      }
      prev = now;
    }
  }
}

// `--weights-dtype auto` on CUDA asks the device for its compute capability (the host emulation
// reports sm_90).
TEST(CudaSession, AutoWeightsDtypeFollowsTheComputeCapability) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  const cuda::ComputeCapability cc = cuda::compute_capability(0);
  const WeightsDtypeForDevice w = parse_weights_dtype("auto", Device::Cuda);
  EXPECT_EQ(w.dtype, cuda_auto_weights_dtype(cc.major, cc.minor));
  EXPECT_EQ(w.rule, "auto: " + std::string(dtype_name(w.dtype)) + " on sm_" + std::to_string(cc.major) +
                        std::to_string(cc.minor) + " (bf16 tensor cores from sm_80, f32 below)");
  EXPECT_EQ(w.notice, "");
  EXPECT_EQ(parse_weights_dtype("f16", Device::Cuda).dtype, DType::F16);  // explicit dtypes as given
  EXPECT_EQ(parse_weights_dtype("f16", Device::Cuda).rule, "");
}
