// DPT depth head against the golden cases: aggregated_0..3 of the stored frames -> depth, depth_conf,
// and world points (unprojected with the reference pose). Tolerance (README): max|d| <= 1e-4 * max|ref|.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "geometry_golden_util.h"
#include "io/safetensors.h"
#include "lingbot/model_config.h"
#include "compute/cpu/cpu_backend.h"
#include "model/dpt_head.h"
#include "model/geometry.h"

// A CPU backend for one call (its ops keep no state but the thread count; the results are host tensors).
struct Cpu {
  lingbot::compute::CpuBackend be;
  explicit Cpu(int threads) : be(threads) {}
  operator lingbot::compute::Backend&() { return be; }
};

namespace lingbot::model {
namespace {

struct CaseData {
  io::TensorMap weights, ref;
  io::IntTensorMap ints;
  ModelConfig cfg;
};

std::optional<CaseData> load_case(const std::string& name) {
  const auto dir = test::golden_case_dir(name);
  if (!dir) return std::nullopt;
  CaseData c;
  c.weights = io::SafetensorsReader::open(*dir + "/weights.safetensors").read_all(DType::F32);
  c.ref = io::SafetensorsReader::open(*dir + "/reference.safetensors").read_all(DType::F32, &c.ints);
  c.cfg = ModelConfig::infer(c.weights);
  return c;
}

io::TensorMap dpt_weights(const io::TensorMap& w) {
  io::TensorMap out;
  for (const auto& [k, v] : w)
    if (k.rfind("depth_head.", 0) == 0) out.emplace(k, v.clone());
  return out;
}

// Patch tokens of stored row `row` of aggregated_l [F, P, 2C].
std::array<RowsView, 4> patch_rows(const io::TensorMap& ref, int64_t row) {
  std::array<RowsView, 4> v;
  for (int l = 0; l < 4; ++l) {
    const Tensor& a = ref.at("aggregated_" + std::to_string(l));
    const int64_t P = a.dim(1), C2 = a.dim(2);
    v[l] = {a.f32() + (row * P + 6) * C2, P - 6, C2, C2};
  }
  return v;
}

// Runs the head on every stored frame of `name` and checks depth, depth_conf and world points.
void check_case(const std::string& name) {
  const auto c = load_case(name);
  if (!c) GTEST_SKIP() << "golden case " << name << " not available (see NOTE above)";
  io::TensorMap w = dpt_weights(c->weights);
  const DptHead head(c->cfg.dpt, w);
  EXPECT_TRUE(w.empty()) << "the head takes every depth_head.* tensor";
  const Tensor& depth_ref = c->ref.at("depth");
  const Tensor& conf_ref = c->ref.at("depth_conf");
  const Tensor& wp_ref = c->ref.at("world_points");
  const Tensor& pose_ref = c->ref.at("pose_enc");
  const int H = static_cast<int>(depth_ref.dim(1)), W = static_cast<int>(depth_ref.dim(2));
  const int64_t plane = int64_t{H} * W;
  const std::vector<int64_t>& frames = c->ints.at("aggregated_frame_index").values;
  test::Diff dd, dc, dw;
  for (size_t row = 0; row < frames.size(); ++row) {
    const int64_t f = frames[row];
    const DepthOutput out = head.forward(Cpu(1), patch_rows(c->ref, static_cast<int64_t>(row)), {H, W});
    ASSERT_EQ(out.depth.shape(), (Shape{H, W}));
    auto acc = [](test::Diff& a, const test::Diff& b) {
      a.max_abs = std::max(a.max_abs, b.max_abs);
      a.max_ref = std::max(a.max_ref, b.max_ref);
    };
    acc(dd, test::diff(out.depth.f32(), depth_ref.f32() + f * plane, plane));
    acc(dc, test::diff(out.conf.f32(), conf_ref.f32() + f * plane, plane));
    PoseEncoding pe;
    std::memcpy(pe.data(), pose_ref.f32() + f * 9, sizeof(pe));
    const Tensor wp = world_points_from_depth(out.depth, camera_from_pose_encoding(pe, {H, W}), {H, W}, 2);
    acc(dw, test::diff(wp.f32(), wp_ref.f32() + f * plane * 3, plane * 3));
  }
  std::printf("[ INFO     ] %s (%zu frames): depth max|d| %.3g (max|ref| %.3g), conf %.3g (%.3g), world points %.3g (%.3g)\n",
              name.c_str(), frames.size(), dd.max_abs, dd.max_ref, dc.max_abs, dc.max_ref, dw.max_abs, dw.max_ref);
  EXPECT_LE(dd.max_abs, 1e-4 * dd.max_ref);
  EXPECT_LE(dc.max_abs, 1e-4 * dc.max_ref);
  EXPECT_LE(dw.max_abs, 1e-4 * dw.max_ref);
}

TEST(DptHeadGolden, TinyAllFrames) { check_case("tiny"); }
TEST(DptHeadGolden, SmallD24StoredFrames) { check_case("small-d24"); }

TEST(DptHead, ThreadCountDoesNotChangeResults) {
  const auto c = load_case("tiny");
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  io::TensorMap w = dpt_weights(c->weights);
  const DptHead head(c->cfg.dpt, w);
  const DepthOutput a = head.forward(Cpu(1), patch_rows(c->ref, 4), {70, 112});
  const DepthOutput b = head.forward(Cpu(2), patch_rows(c->ref, 4), {70, 112});
  EXPECT_EQ(std::memcmp(a.depth.f32(), b.depth.f32(), a.depth.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.conf.f32(), b.conf.f32(), a.conf.nbytes()), 0);
}

TEST(DptHead, PositionEmbeddingLayout) {
  // 4 channels: [sin(x), cos(x), sin(y), cos(y)] (ω = 1) times 0.1; a 1x1 grid sits at the origin.
  const Tensor one = dpt_position_embedding(4, 1, 1, 1.6);
  EXPECT_FLOAT_EQ(one.f32()[0], 0.0f);
  EXPECT_FLOAT_EQ(one.f32()[1], 0.1f);
  EXPECT_FLOAT_EQ(one.f32()[2], 0.0f);
  EXPECT_FLOAT_EQ(one.f32()[3], 0.1f);
  // 2x3 grid, aspect 1.6: x spans ±(1.6/√3.56)·(2/3), y spans ±(1/√3.56)·(1/2).
  const Tensor pe = dpt_position_embedding(4, 2, 3, 1.6);
  const double sx = 1.6 / std::sqrt(3.56) * 2.0 / 3.0, sy = 1.0 / std::sqrt(3.56) * 0.5;
  EXPECT_NEAR(pe.f32()[0 * 6 + 0 * 3 + 2], 0.1 * std::sin(sx), 1e-7);   // sin(x) at column 2
  EXPECT_NEAR(pe.f32()[1 * 6 + 1 * 3 + 0], 0.1 * std::cos(-sx), 1e-7);  // cos(x) at column 0
  EXPECT_NEAR(pe.f32()[2 * 6 + 0 * 3 + 1], 0.1 * std::sin(-sy), 1e-7);  // sin(y) at row 0
  EXPECT_NEAR(pe.f32()[3 * 6 + 1 * 3 + 1], 0.1 * std::cos(sy), 1e-7);   // cos(y) at row 1
}

namespace {
std::vector<float> random_map(int64_t n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}
}  // namespace

// The DPT position embedding added from its two tables equals adding the whole map, bit for bit, on
// 1 and 3 threads (the head relies on it: the map is never formed).
TEST(DptHead, PositionTablesAddedByTheBackendEqualTheWholeMap) {
  const int64_t channels = 16, h = 9, w = 13;
  const DptPositionTables t = dpt_position_tables(channels, h, w, 13.0 / 9.0);
  const Tensor map = dpt_position_embedding(channels, h, w, 13.0 / 9.0);
  const std::vector<float> x = random_map(channels * h * w);
  for (const int threads : {1, 3}) {
    compute::CpuBackend be(threads);
    std::vector<float> want = x, got = x;
    be.add(want.data(), map.f32(), map.numel());
    be.add_axis_tables(got.data(), channels, h, w, t.columns.f32(), t.rows.f32());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << threads << " threads";
  }
  compute::CpuBackend be(1);
  std::vector<float> y(3 * 2 * 2);
  try {
    be.add_axis_tables(y.data(), 3, 2, 2, t.columns.f32(), t.rows.f32());
    ADD_FAILURE() << "odd channels accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add_axis_tables: channels must be even, got 3");
  }
}

TEST(DptHeadErrors, BadInputsNameTheProblem) {
  const auto c = load_case("tiny");
  if (!c) GTEST_SKIP() << "golden case tiny not available (see NOTE above)";
  io::TensorMap w = dpt_weights(c->weights);
  const DptHead head(c->cfg.dpt, w);
  auto expect_error = [](auto&& fn, const std::string& msg) {
    try {
      fn();
      ADD_FAILURE() << "expected error: " << msg;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  };
  expect_error([&] { head.forward(Cpu(1), patch_rows(c->ref, 0), {70, 100}); },
               "DPT head: image size 70x100 must be positive multiples of patch size 14");
  expect_error([&] { head.forward(Cpu(1), patch_rows(c->ref, 0), {70, 126}); },
               "DPT head: layer 0 patch tokens must be [45, 256] for a 70x126 image, got [40, 256]");
  auto rows = patch_rows(c->ref, 0);
  rows[2].cols = 128;
  expect_error([&] { head.forward(Cpu(1), rows, {70, 112}); },
               "DPT head: layer 2 patch tokens must be [40, 256] for a 70x112 image, got [40, 128]");
  io::TensorMap missing = dpt_weights(c->weights);
  missing.erase("depth_head.scratch.refinenet2.resConfUnit1.conv2.bias");
  expect_error([&] { DptHead h(c->cfg.dpt, missing); },
               "missing weight depth_head.scratch.refinenet2.resConfUnit1.conv2.bias");
  io::TensorMap bad = dpt_weights(c->weights);
  bad["depth_head.resize_layers.0.weight"] = Tensor({8, 8, 2, 2});
  expect_error([&] { DptHead h(c->cfg.dpt, bad); },
               "depth_head.resize_layers.0.weight: expected shape [8, 8, 4, 4], got [8, 8, 2, 2]");
}

}  // namespace
}  // namespace lingbot::model
