// `lingbot-map run` end to end on the golden tiny cases: the files it writes (poses.json, depth .npy)
// match the upstream reference outputs within the golden README's tolerances:
//   extrinsic (w2c) and c2w: max|d| <= 1e-4 absolute; intrinsic: relative 1e-5;
//   depth, confidence: max|d| <= 1e-4 * max|ref|.
#include <algorithm>
#include <cmath>

#include "io/npy.h"
#include "io/safetensors.h"
#include "run_test_util.h"

namespace {

using namespace run_test;
using nlohmann::json;

void check_against_reference(const fs::path& case_dir, const fs::path& out) {
  const auto ref = lingbot::io::SafetensorsReader::open((case_dir / "reference.safetensors").string());
  const lingbot::Tensor extrinsic = ref.read("extrinsic", lingbot::DType::F32);
  const lingbot::Tensor c2w = ref.read("extrinsic_c2w", lingbot::DType::F32);
  const lingbot::Tensor intrinsic = ref.read("intrinsic", lingbot::DType::F32);
  const lingbot::Tensor depth = ref.read("depth", lingbot::DType::F32);
  const lingbot::Tensor conf = ref.read("depth_conf", lingbot::DType::F32);
  const int64_t n = extrinsic.dim(0), H = depth.dim(1), W = depth.dim(2);
  const json case_json = read_json(case_dir / "case.json");
  const json& is_keyframe = case_json.at("scenario").at("is_keyframe");

  const json poses = read_json(out / "poses.json");
  ASSERT_EQ(static_cast<int64_t>(poses.at("frames").size()), n);
  double max_ext = 0, max_c2w = 0, max_k_rel = 0;
  for (int64_t i = 0; i < n; ++i) {
    const json& f = poses["frames"][i];
    EXPECT_EQ(f.at("keyframe").get<bool>(), is_keyframe[i].get<int>() != 0) << "frame " << i;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) {
        max_ext = std::max(max_ext, std::fabs(f["w2c"][r][c].get<double>() - extrinsic.f32()[i * 12 + r * 4 + c]));
        max_c2w = std::max(max_c2w, std::fabs(f["c2w"][r][c].get<double>() - c2w.f32()[i * 12 + r * 4 + c]));
      }
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        const double want = intrinsic.f32()[i * 9 + r * 3 + c];
        const double got = f["intrinsics"][r][c].get<double>();
        max_k_rel = std::max(max_k_rel, std::fabs(got - want) / std::max(std::fabs(want), 1.0));
      }
  }
  EXPECT_LE(max_ext, 1e-4) << "w2c extrinsic";
  EXPECT_LE(max_c2w, 1e-4) << "c2w";
  EXPECT_LE(max_k_rel, 1e-5) << "intrinsic";

  for (const auto& [name, want] : {std::pair<const char*, const lingbot::Tensor*>{"", &depth}, {"_conf", &conf}}) {
    const int64_t hw = H * W;
    float max_ref = 0;
    for (int64_t k = 0; k < want->numel(); ++k) max_ref = std::max(max_ref, std::fabs(want->f32()[k]));
    double max_d = 0;
    for (int64_t i = 0; i < n; ++i) {
      char stem[32];
      std::snprintf(stem, sizeof stem, "%06lld", static_cast<long long>(i));
      const lingbot::io::NpyArray got = lingbot::io::read_npy_f32(out / "depth" / (std::string(stem) + name + ".npy"));
      ASSERT_EQ(got.shape, (std::vector<int64_t>{H, W})) << stem << name;
      for (int64_t k = 0; k < hw; ++k)
        max_d = std::max(max_d, static_cast<double>(std::fabs(got.data[k] - want->f32()[i * hw + k])));
    }
    EXPECT_LE(max_d, 1e-4 * max_ref) << "depth" << name << " (max|ref| " << max_ref << ")";
  }
}

// The documented command of docs/cli.md / issue #7 on the committed copy of the tiny case.
TEST(RunGolden, TinyCaseMatchesReference) {
  const fs::path case_dir = fs::path(kTestdata) / "tiny";
  const fs::path out = fresh_dir("golden_tiny") / "out";
  const Result r = run_cli("run --images " + (case_dir / "frames").string() + " --model " +
                           (case_dir / "model.pt").string() +
                           " --image-size 112 --scale-frames 2 --kv-window 3 --keyframe-interval 1 --weights-dtype f32 --kv-dtype f32 --out " +
                           out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  check_against_reference(case_dir, out);
  const json summary = read_json(out / "summary.json");
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_EQ(summary.at("frames"), 10);
  EXPECT_EQ(summary.at("keyframes"), 10);
  EXPECT_EQ(summary.at("cache").at("steps"), 9);  // the scale phase (2 frames) counts as one step
}

// The dense KV backend (the baseline the paged cache is checked against) meets the same tolerances.
TEST(RunGolden, TinyCaseDenseAttentionMatchesReference) {
  const fs::path case_dir = fs::path(kTestdata) / "tiny";
  const fs::path out = fresh_dir("golden_tiny_dense") / "out";
  const Result r = run_cli("run --images " + (case_dir / "frames").string() + " --model " +
                           (case_dir / "model.pt").string() +
                           " --image-size 112 --scale-frames 2 --kv-window 3 --keyframe-interval 1 --weights-dtype f32 --kv-dtype f32 --kv-backend dense"
                           " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  check_against_reference(case_dir, out);
}

TEST(RunGolden, TinyKeyframesCaseMatchesReference) {
  const fs::path case_dir = fs::path(kGolden) / "tiny-keyframes";
  if (!fs::exists(case_dir / "reference.safetensors"))
    GTEST_SKIP() << "golden case not present at " << case_dir << " (../shared/golden is not on this machine)";
  const fs::path out = fresh_dir("golden_tiny_keyframes") / "out";
  const Result r = run_cli("run --images " + (case_dir / "frames").string() + " --model " +
                           (case_dir / ".." / "tiny" / "model.pt").string() +
                           " --image-size 112 --scale-frames 2 --kv-window 3 --keyframe-interval 2 --weights-dtype f32 --kv-dtype f32 --out " +
                           out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  check_against_reference(case_dir, out);
}

}  // namespace
