#include "model/geometry.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rigid_transform.h"

namespace lingbot::model {

Mat3x3 quat_xyzw_to_mat(float i, float j, float k, float r) {
  const float two_s = 2.0f / (i * i + j * j + k * k + r * r);
  return {1 - two_s * (j * j + k * k), two_s * (i * j - k * r),     two_s * (i * k + j * r),
          two_s * (i * j + k * r),     1 - two_s * (i * i + k * k), two_s * (j * k - i * r),
          two_s * (i * k - j * r),     two_s * (j * k + i * r),     1 - two_s * (i * i + j * j)};
}

Camera camera_from_pose_encoding(const PoseEncoding& e, ImageSize size) {
  LINGBOT_CHECK(size.height > 0 && size.width > 0, "camera_from_pose_encoding: image size ", size.height, "x",
                size.width, " must be positive");
  Camera cam;
  // The decoded pose [R | t] is camera -> world (LingBot-Map; see geometry.h); w2c is its inverse.
  const Mat3x3 R = quat_xyzw_to_mat(e[3], e[4], e[5], e[6]);
  const float t[3] = {e[0], e[1], e[2]};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) cam.c2w[r * 4 + c] = R[r * 3 + c];
    cam.c2w[r * 4 + 3] = t[r];
  }
  cam.w2c = rigid_inverse(cam.c2w);
  const float half_h = static_cast<float>(size.height) / 2.0f, half_w = static_cast<float>(size.width) / 2.0f;
  const float fy = half_h / std::tan(e[7] / 2.0f);
  const float fx = half_w / std::tan(e[8] / 2.0f);
  cam.intrinsic = {fx, 0.0f, half_w, 0.0f, fy, half_h, 0.0f, 0.0f, 1.0f};
  return cam;
}

CameraTensors cameras_from_pose_encodings(const Tensor& pose_enc, ImageSize size) {
  LINGBOT_CHECK(pose_enc.ndim() == 2 && pose_enc.dim(1) == kPoseEncodingDim,
                "cameras_from_pose_encodings: pose encodings must be [N, 9], got ", shape_str(pose_enc.shape()));
  const int64_t n = pose_enc.dim(0);
  CameraTensors out{Tensor({n, 3, 4}), Tensor({n, 3, 3}), Tensor({n, 3, 4})};
  const float* pe = pose_enc.f32();
  for (int64_t f = 0; f < n; ++f) {
    PoseEncoding e;
    std::copy(pe + f * kPoseEncodingDim, pe + (f + 1) * kPoseEncodingDim, e.begin());
    const Camera cam = camera_from_pose_encoding(e, size);
    std::copy(cam.w2c.begin(), cam.w2c.end(), out.extrinsic.f32() + f * 12);
    std::copy(cam.intrinsic.begin(), cam.intrinsic.end(), out.intrinsic.f32() + f * 9);
    std::copy(cam.c2w.begin(), cam.c2w.end(), out.extrinsic_c2w.f32() + f * 12);
  }
  return out;
}

Tensor world_points_from_depth(const Tensor& depth, const Camera& camera, ImageSize size, int num_threads) {
  const bool ok = (depth.ndim() == 2 || (depth.ndim() == 3 && depth.dim(2) == 1)) && depth.dim(0) == size.height &&
                  depth.dim(1) == size.width;
  LINGBOT_CHECK(ok, "world_points_from_depth: depth must be [", size.height, ", ", size.width, "] or [",
                size.height, ", ", size.width, ", 1], got ", shape_str(depth.shape()));
  const int64_t h = size.height, w = size.width;
  // K⁻¹ of K = [[fx, 0, cx], [0, fy, cy], [0, 0, 1]].
  const float fx = camera.intrinsic[0], fy = camera.intrinsic[4], cx = camera.intrinsic[2], cy = camera.intrinsic[5];
  const float ifx = 1.0f / fx, ify = 1.0f / fy, ocx = -cx / fx, ocy = -cy / fy;
  const RigidTransform<float>& m = camera.c2w;
  Tensor out({h, w, 3});
  const float* d = depth.f32();
  float* o = out.f32();
  const int nt = std::max(1, num_threads);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && h > 1)
  for (int64_t y = 0; y < h; ++y) {
    const float cam_y = ify * static_cast<float>(y) + ocy;
    for (int64_t x = 0; x < w; ++x) {
      const float z = d[y * w + x];
      const float px = (ifx * static_cast<float>(x) + ocx) * z, py = cam_y * z;
      float* p = o + (y * w + x) * 3;
      for (int r = 0; r < 3; ++r) p[r] = m[r * 4 + 0] * px + m[r * 4 + 1] * py + m[r * 4 + 2] * z + m[r * 4 + 3];
    }
  }
  return out;
}

FlowMeasure reprojection_flow(const Tensor& depth, const Camera& f, const Camera& k, ImageSize size, int stride) {
  const bool ok = (depth.ndim() == 2 || (depth.ndim() == 3 && depth.dim(2) == 1)) && depth.dim(0) == size.height &&
                  depth.dim(1) == size.width && depth.dtype() == DType::F32;
  LINGBOT_CHECK(ok, "reprojection_flow: depth must be f32 [", size.height, ", ", size.width, "] (or [..., 1]), got ",
                shape_str(depth.shape()));
  LINGBOT_CHECK(stride >= 1, "reprojection_flow: stride must be >= 1, got ", stride);
  const float* d = depth.f32();
  // K_f⁻¹ of K = [[fx, 0, cx], [0, fy, cy], [0, 0, 1]].
  const float ifx = 1.0f / f.intrinsic[0], ify = 1.0f / f.intrinsic[4];
  const float fcx = f.intrinsic[2], fcy = f.intrinsic[5];
  const RigidTransform<float>& c = f.c2w;
  const RigidTransform<float>& w = k.w2c;  // closed-form inverse of the reference c2w
  const Mat3x3& K = k.intrinsic;
  double sum = 0.0;
  int64_t valid = 0;
  for (int v = 0; v < size.height; v += stride) {
    for (int u = 0; u < size.width; u += stride) {
      const float dep = d[static_cast<size_t>(v) * static_cast<size_t>(size.width) + static_cast<size_t>(u)];
      const float uf = static_cast<float>(u), vf = static_cast<float>(v);
      const float cam[3] = {(uf - fcx) * ifx * dep, (vf - fcy) * ify * dep, dep};
      float X[3], x[3];
      for (int r = 0; r < 3; ++r) X[r] = c[r * 4] * cam[0] + c[r * 4 + 1] * cam[1] + c[r * 4 + 2] * cam[2] + c[r * 4 + 3];
      for (int r = 0; r < 3; ++r) x[r] = w[r * 4] * X[0] + w[r * 4 + 1] * X[1] + w[r * 4 + 2] * X[2] + w[r * 4 + 3];
      if (!(dep > 1e-6f) || !(x[2] > 1e-6f)) continue;
      const float z = std::max(x[2], 1e-6f);
      const float nx = x[0] / z, ny = x[1] / z;
      const float px = K[0] * nx + K[1] * ny + K[2];
      const float py = K[3] * nx + K[4] * ny + K[5];
      sum += std::sqrt(static_cast<double>((px - uf) * (px - uf) + (py - vf) * (py - vf)));
      ++valid;
    }
  }
  return {valid > 0 ? sum / static_cast<double>(valid) : 0.0, valid};
}

}  // namespace lingbot::model
