#pragma once
// Camera geometry of the model's outputs: pose encoding -> extrinsics / intrinsics, and world points.
//
// Conventions (those of the upstream reference, `utils/pose_enc.py`, `utils/rotation.py`, and of
// every upstream consumer of the released checkpoints: demo.py's post-processing and viewer, the
// windowed mode's Sim(3) alignment, the flow keyframe test, the benchmark wrapper):
//   * Pose encoding (9 floats): [t_x, t_y, t_z, q_x, q_y, q_z, q_w, fov_h, fov_w].
//     The quaternion is xyzw (scalar LAST) and need not be unit length: the rotation matrix is built
//     with the factor 2/|q|², which normalises it. FoVs are full angles in radians.
//   * The decoded pose `c2w` = [R(q) | t] (3x4, row-major) is CAMERA -> WORLD: X_world = R·X_cam + t,
//     so t = pose_enc[0:3] is the camera centre in world coordinates. (VGGT's identical encoding
//     decodes to world -> camera; LingBot-Map's does not, whatever upstream's inherited docstring and
//     its never-called `GCTBase._unproject_depth_to_world` say.) OpenCV camera axes (x right, y down,
//     z forward).
//   * Extrinsic `w2c` = [Rᵀ | −Rᵀ·t] (3x4, row-major), world -> camera, the closed-form inverse.
//   * Intrinsic K (3x3, row-major) for an image of H rows × W columns, in pixels:
//     fx = (W/2)/tan(fov_w/2), fy = (H/2)/tan(fov_h/2), cx = W/2, cy = H/2.
//   * World points: pixel (x = column, y = row) taken at integer coordinates (no +0.5):
//     X_cam = K⁻¹·[x, y, 1]ᵀ · depth(y, x), X_world = c2w·[X_cam; 1].
// Arithmetic is float32 in the same order as the reference (float-noise agreement, ~1e-6 relative).
#include <array>

#include "core/rigid_transform.h"
#include "lingbot/tensor.h"

namespace lingbot::model {

inline constexpr int kPoseEncodingDim = 9;

using PoseEncoding = std::array<float, kPoseEncodingDim>;
using Mat3x3 = std::array<float, 9>;   // row-major

struct ImageSize {
  int height = 0;  // rows, pixels
  int width = 0;   // columns, pixels
};

struct Camera {
  RigidTransform<float> w2c{};  // world -> camera [Rᵀ | −Rᵀt] (core/rigid_transform.h: rigid_inverse)
  Mat3x3 intrinsic{};           // K
  RigidTransform<float> c2w{};  // camera -> world [R | t], the decoded pose
};

// Rotation matrix (row-major 3x3) of the xyzw quaternion q, normalised by 2/|q|². The inverse
// direction is core/rigid_transform.h's rotation_to_quat_xyzw.
Mat3x3 quat_xyzw_to_mat(float qx, float qy, float qz, float qw);

// Decodes one pose encoding for an image of `size`. Throws Error if size is not positive.
Camera camera_from_pose_encoding(const PoseEncoding& enc, ImageSize size);

// Batch form. pose_enc: f32 [N, 9]. Returns f32 [N, 3, 4] w2c, [N, 3, 3] K, [N, 3, 4] c2w.
struct CameraTensors {
  Tensor extrinsic;      // [N, 3, 4] world -> camera
  Tensor intrinsic;      // [N, 3, 3]
  Tensor extrinsic_c2w;  // [N, 3, 4] camera -> world
};
CameraTensors cameras_from_pose_encodings(const Tensor& pose_enc, ImageSize size);

// Unprojects a depth map with a decoded camera. depth: f32 [H, W] or [H, W, 1] with (H, W) equal to
// the size the camera was decoded for (the caller states it in `size`). Returns f32 [H, W, 3] world
// points. Threaded over rows (each point is independent, so results do not depend on num_threads).
Tensor world_points_from_depth(const Tensor& depth, const Camera& camera, ImageSize size, int num_threads);

// Camera-motion flow of a frame against a reference camera (upstream `_compute_flow_magnitude`, the
// flow keyframe test; golden README "Windowed mode and flow keyframes" F1). Samples (u, v) =
// (column, row) on the grid {0, stride, 2·stride, ...} below (W, H), integer coordinates; d = depth
// there; X = c2w_f · (K_f⁻¹ (u, v, 1)ᵀ · d); x = c2w_k⁻¹ · X; p = (K_k · x / max(x_z, 1e-6))[0:2].
// Valid iff d > 1e-6 and x_z > 1e-6. Returns the mean of ‖p − (u, v)‖ over valid samples in pixels
// (0 if none) and how many were valid. Arithmetic in float32 as upstream, the mean accumulated in
// double. depth: f32 [H, W] or [H, W, 1] of `size`.
struct FlowMeasure {
  double flow = 0.0;
  int64_t valid_samples = 0;
};
FlowMeasure reprojection_flow(const Tensor& depth, const Camera& frame, const Camera& reference, ImageSize size,
                              int stride = 8);

}  // namespace lingbot::model
