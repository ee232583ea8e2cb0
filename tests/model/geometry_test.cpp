// Pose decoding and unprojection: conventions on hand-made poses, and the golden tensors of every
// public case decoded from the reference pose_enc / depth (isolates geometry from the heads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/rigid_transform.h"
#include "geometry_golden_util.h"
#include "io/safetensors.h"
#include "model/geometry.h"

namespace lingbot::model {
namespace {

TEST(Geometry, QuaternionIsXyzwAndNormalised) {
  // 90° about z: q = (0, 0, sin45, cos45), scaled by 3 (the 2/|q|² factor removes the scale).
  const float s = 3.0f * std::sqrt(0.5f);
  const Mat3x3 R = quat_xyzw_to_mat(0, 0, s, s);
  const float expect[9] = {0, -1, 0, 1, 0, 0, 0, 0, 1};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(R[i], expect[i], 1e-6) << i;
  // Identity: scalar last.
  const Mat3x3 I = quat_xyzw_to_mat(0, 0, 0, 2);
  for (int i = 0; i < 9; ++i) EXPECT_FLOAT_EQ(I[i], i % 4 == 0 ? 1.0f : 0.0f);
}

TEST(Geometry, CameraConventions) {
  const PoseEncoding e{0.5f, -1.0f, 2.0f, 0.1f, -0.2f, 0.3f, 0.9f, 1.0f, 1.4f};
  const Camera cam = camera_from_pose_encoding(e, {70, 112});
  // K: fx from fov_w and W, fy from fov_h and H, principal point at (W/2, H/2).
  EXPECT_NEAR(cam.intrinsic[0], 56.0 / std::tan(0.7), 1e-4);
  EXPECT_NEAR(cam.intrinsic[4], 35.0 / std::tan(0.5), 1e-4);
  EXPECT_EQ(cam.intrinsic[2], 56.0f);
  EXPECT_EQ(cam.intrinsic[5], 35.0f);
  EXPECT_EQ(cam.intrinsic[8], 1.0f);
  // The decoded pose is camera -> world: c2w's translation is the encoding's t (the camera centre);
  // w2c ∘ c2w is the identity.
  EXPECT_EQ(cam.c2w[3], 0.5f);
  EXPECT_EQ(cam.c2w[7], -1.0f);
  EXPECT_EQ(cam.c2w[11], 2.0f);
  const Mat3x3 R = quat_xyzw_to_mat(e[3], e[4], e[5], e[6]);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(cam.c2w[r * 4 + c], R[r * 3 + c]) << r << c;
      EXPECT_EQ(cam.w2c[r * 4 + c], R[c * 3 + r]) << r << c;
    }
  const float X[3] = {0.3f, -0.7f, 1.9f};
  float Xc[3], Xw[3];
  for (int r = 0; r < 3; ++r) Xc[r] = cam.w2c[r * 4] * X[0] + cam.w2c[r * 4 + 1] * X[1] + cam.w2c[r * 4 + 2] * X[2] + cam.w2c[r * 4 + 3];
  for (int r = 0; r < 3; ++r) Xw[r] = cam.c2w[r * 4] * Xc[0] + cam.c2w[r * 4 + 1] * Xc[1] + cam.c2w[r * 4 + 2] * Xc[2] + cam.c2w[r * 4 + 3];
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(Xw[r], X[r], 1e-5);
}

TEST(Geometry, UnprojectUsesIntegerPixelCoordinates) {
  // Identity pose, fov 90° both ways on a 4x6 image: fx = 3, fy = 2, c = (3, 2).
  const float fov = static_cast<float>(M_PI / 2);
  const Camera cam = camera_from_pose_encoding({0, 0, 0, 0, 0, 0, 1, fov, fov}, {4, 6});
  Tensor depth({4, 6, 1});
  for (int64_t i = 0; i < 24; ++i) depth.f32()[i] = 2.0f;
  const Tensor wp = world_points_from_depth(depth, cam, {4, 6}, 1);
  ASSERT_EQ(wp.shape(), (Shape{4, 6, 3}));
  // Pixel (x=3, y=2) is the principal point: straight ahead.
  const float* p = wp.f32() + (2 * 6 + 3) * 3;
  EXPECT_NEAR(p[0], 0.0f, 1e-6);
  EXPECT_NEAR(p[1], 0.0f, 1e-6);
  EXPECT_NEAR(p[2], 2.0f, 1e-6);
  // Pixel (x=0, y=0): ((0-3)/3·2, (0-2)/2·2, 2).
  EXPECT_NEAR(wp.f32()[0], -2.0f, 1e-6);
  EXPECT_NEAR(wp.f32()[1], -2.0f, 1e-6);
  EXPECT_NEAR(wp.f32()[2], 2.0f, 1e-6);
}

// Pins the camera -> world convention without goldens: a pose with a known rotation and
// translation puts the camera centre at pose_enc[0:3], and a pixel on the optical axis at depth d
// lands at t + d·R[:, 2] (the camera's z axis expressed in the world).
TEST(Geometry, DecodedPoseIsCameraToWorld) {
  // 60° about the axis (1, 2, 2)/3, quaternion scaled by 1.7 (not unit), centre (1.5, -2, 0.75).
  const double half = M_PI / 6, s = std::sin(half) * 1.7 / 3.0;
  const PoseEncoding e{1.5f, -2.0f, 0.75f, float(s * 1), float(s * 2), float(s * 2), float(std::cos(half) * 1.7), 0.9f, 1.2f};
  const ImageSize size{70, 112};
  const Camera cam = camera_from_pose_encoding(e, size);
  const Mat3x3 R = quat_xyzw_to_mat(e[3], e[4], e[5], e[6]);
  // Rodrigues' formula for the same rotation, in double, as an independent check of R.
  const double ax[3] = {1 / 3.0, 2 / 3.0, 2 / 3.0}, c = std::cos(2 * half), sn = std::sin(2 * half);
  const double skew[9] = {0, -ax[2], ax[1], ax[2], 0, -ax[0], -ax[1], ax[0], 0};
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 3; ++k) {
      const double expect = (r == k ? c : 0) + (1 - c) * ax[r] * ax[k] + sn * skew[r * 3 + k];
      EXPECT_NEAR(R[r * 3 + k], expect, 1e-6) << r << k;
    }
  // Camera centre = -w2c_R^T w2c_t = pose_enc[0:3].
  for (int r = 0; r < 3; ++r) {
    double centre = 0;
    for (int k = 0; k < 3; ++k) centre -= cam.w2c[k * 4 + r] * cam.w2c[k * 4 + 3];
    EXPECT_NEAR(centre, e[r], 1e-6) << r;
  }
  // The principal point (cx, cy) = (56, 35) is on the optical axis; at depth d it lands at t + d·R[:, 2].
  const float d = 3.25f;
  Tensor depth({70, 112});
  for (int64_t i = 0; i < depth.numel(); ++i) depth.f32()[i] = d;
  const Tensor wp = world_points_from_depth(depth, cam, size, 1);
  const float* p = wp.f32() + (35 * 112 + 56) * 3;
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(p[r], e[r] + d * R[r * 3 + 2], 1e-5) << r;
}

TEST(Geometry, MatToQuatInvertsQuatToMatWithNonNegativeW) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int i = 0; i < 500; ++i) {
    const float q[4] = {nd(rng), nd(rng), nd(rng), nd(rng)};
    const float n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    const std::array<float, 4> r = rotation_to_quat_xyzw(quat_xyzw_to_mat(q[0], q[1], q[2], q[3]));
    const float sign = q[3] < 0 ? -1.0f : 1.0f;  // the standardised quaternion has w >= 0
    EXPECT_GE(r[3], 0.0f);
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(r[k], sign * q[k] / n, 2e-5) << "sample " << i << " component " << k;
  }
}

// Flow of a frame against a reference camera: zero for the same camera; for a sideways translation b
// of the reference (same rotation and K) every sample moves by fx * b / depth pixels (at depth 2:
// fx * b / 2), and samples behind the reference camera are not counted.
TEST(Geometry, ReprojectionFlowIsTheCameraMotionInPixels) {
  const ImageSize size{70, 112};
  Tensor depth({70, 112});
  for (int64_t i = 0; i < depth.numel(); ++i) depth.f32()[i] = 2.0f;
  const PoseEncoding e{0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.2f};
  const Camera cam = camera_from_pose_encoding(e, size);
  const FlowMeasure same = reprojection_flow(depth, cam, cam, size);
  EXPECT_EQ(same.valid_samples, 9 * 14);  // rows 0, 8, ..., 64; columns 0, 8, ..., 104
  EXPECT_NEAR(same.flow, 0.0, 1e-5);
  PoseEncoding moved = e;
  moved[0] = 0.1f;  // reference camera 0.1 to the right: points appear 0.1 further left
  const FlowMeasure side = reprojection_flow(depth, cam, camera_from_pose_encoding(moved, size), size);
  EXPECT_NEAR(side.flow, cam.intrinsic[0] * 0.1 / 2.0, 1e-3);
  PoseEncoding ahead = e;
  ahead[2] = 3.0f;  // reference camera in front of every point: nothing valid
  const FlowMeasure none = reprojection_flow(depth, cam, camera_from_pose_encoding(ahead, size), size);
  EXPECT_EQ(none.valid_samples, 0);
  EXPECT_EQ(none.flow, 0.0);
}

// Samples whose own depth is not positive are skipped even when the reference camera (one unit
// behind, same rotation and K) would see their back-projection in front of it: depth 0 maps to the
// frame's camera centre, depth -0.5 to a point behind the frame. The flow is the mean over the rest.
TEST(Geometry, ReprojectionFlowSkipsSamplesWithoutPositiveDepth) {
  const ImageSize size{70, 112};
  Tensor depth({70, 112});
  for (int64_t i = 0; i < depth.numel(); ++i) depth.f32()[i] = 2.0f;
  depth.f32()[8 * 112 + 16] = 0.0f;   // sample (u 16, v 8)
  depth.f32()[24 * 112 + 40] = -0.5f;  // sample (u 40, v 24)
  const PoseEncoding e{0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.2f};
  const Camera cam = camera_from_pose_encoding(e, size);
  PoseEncoding behind = e;
  behind[2] = -1.0f;  // reference centre at z = -1: every point of the frame is in front of it
  const FlowMeasure m = reprojection_flow(depth, cam, camera_from_pose_encoding(behind, size), size);
  // Independent expectation: pixel (u, v) at depth 2 is ((u-cx)/fx*2, (v-cy)/fy*2, 2) in both
  // world and frame coordinates, (.., .., 3) for the reference; it projects to f*X/3 + c.
  const double fx = cam.intrinsic[0], fy = cam.intrinsic[4], cx = cam.intrinsic[2], cy = cam.intrinsic[5];
  double sum = 0.0;
  int64_t n = 0;
  for (int v = 0; v < 70; v += 8)
    for (int u = 0; u < 112; u += 8) {
      if ((u == 16 && v == 8) || (u == 40 && v == 24)) continue;
      const double px = fx * ((u - cx) / fx * 2.0) / 3.0 + cx, py = fy * ((v - cy) / fy * 2.0) / 3.0 + cy;
      sum += std::hypot(px - u, py - v);
      ++n;
    }
  EXPECT_EQ(m.valid_samples, 9 * 14 - 2);
  EXPECT_EQ(m.valid_samples, n);
  EXPECT_NEAR(m.flow, sum / static_cast<double>(n), 1e-3);
}

TEST(Geometry, GoldenCamerasAndWorldPointsFromReferencePoses) {
  int cases = 0;
  for (const std::string name : {"tiny", "tiny-keyframes", "small-d24"}) {
    const auto dir = test::golden_case_dir(name);
    if (!dir) continue;
    ++cases;
    io::IntTensorMap ints;
    const io::TensorMap ref = io::SafetensorsReader::open(*dir + "/reference.safetensors").read_all(DType::F32, &ints);
    const Tensor& pose = ref.at("pose_enc");
    const Tensor& depth = ref.at("depth");
    const int64_t S = pose.dim(0);
    const int H = static_cast<int>(depth.dim(1)), W = static_cast<int>(depth.dim(2));
    const CameraTensors cams = cameras_from_pose_encodings(pose, {H, W});
    const double e_ext = test::diff(cams.extrinsic.f32(), ref.at("extrinsic").f32(), S * 12).max_abs;
    const double e_c2w = test::diff(cams.extrinsic_c2w.f32(), ref.at("extrinsic_c2w").f32(), S * 12).max_abs;
    const double e_k = test::max_rel(cams.intrinsic.f32(), ref.at("intrinsic").f32(), S * 9, 1e-6);
    const int64_t plane = int64_t{H} * W;
    test::Diff dw;
    for (int64_t f = 0; f < S; ++f) {
      Tensor d({H, W, 1});
      std::memcpy(d.f32(), depth.f32() + f * plane, plane * sizeof(float));
      PoseEncoding pe;
      std::memcpy(pe.data(), pose.f32() + f * 9, sizeof(pe));
      const Tensor wp = world_points_from_depth(d, camera_from_pose_encoding(pe, {H, W}), {H, W}, 2);
      const test::Diff one = test::diff(wp.f32(), ref.at("world_points").f32() + f * plane * 3, plane * 3);
      dw.max_abs = std::max(dw.max_abs, one.max_abs);
      dw.max_ref = std::max(dw.max_ref, one.max_ref);
    }
    std::printf("[ INFO     ] %s: extrinsic %.3g, c2w %.3g, intrinsic rel %.3g, world points %.3g (max|ref| %.3g)\n",
                name.c_str(), e_ext, e_c2w, e_k, dw.max_abs, dw.max_ref);
    EXPECT_LE(e_ext, 1e-5) << name;
    EXPECT_LE(e_c2w, 1e-5) << name;
    EXPECT_LE(e_k, 1e-6) << name;
    EXPECT_LE(dw.max_abs, 1e-5 * dw.max_ref) << name;
  }
  if (cases == 0) GTEST_SKIP() << "no golden case available (see NOTE above)";
}

TEST(GeometryErrors, BadShapesNameTheProblem) {
  try {
    cameras_from_pose_encodings(Tensor({3, 8}), {70, 112});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cameras_from_pose_encodings: pose encodings must be [N, 9], got [3, 8]");
  }
  try {
    camera_from_pose_encoding({}, {0, 112});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "camera_from_pose_encoding: image size 0x112 must be positive");
  }
  const Camera cam = camera_from_pose_encoding({0, 0, 0, 0, 0, 0, 1, 1, 1}, {70, 112});
  try {
    world_points_from_depth(Tensor({70, 113}), cam, {70, 112}, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "world_points_from_depth: depth must be [70, 112] or [70, 112, 1], got [70, 113]");
  }
}

}  // namespace
}  // namespace lingbot::model
