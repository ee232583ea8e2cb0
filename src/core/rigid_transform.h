#pragma once
// Rigid transforms [R | t] (3x4, row-major) and rotation matrix -> quaternion, in the scalar type of
// the caller: float in the model (the same operations in the same order as upstream, so decoded
// cameras and the windowed warp agree with the reference to float noise), double in the writers.
#include <algorithm>
#include <array>
#include <cmath>

namespace lingbot {

template <typename T>
using RigidTransform = std::array<T, 12>;  // row-major [R | t]

// [R | t] -> [Rᵀ | −Rᵀ·t], the closed-form inverse of a rigid transform.
template <typename T>
RigidTransform<T> rigid_inverse(const RigidTransform<T>& m) {
  RigidTransform<T> out{};
  for (int r = 0; r < 3; ++r) {
    T acc = T(0);
    for (int c = 0; c < 3; ++c) {
      out[r * 4 + c] = m[c * 4 + r];
      acc += m[c * 4 + r] * m[c * 4 + 3];
    }
    out[r * 4 + 3] = -acc;
  }
  return out;
}

// Quaternion (x, y, z, w: scalar last) of the rotation matrix m (row-major 3x3), with w >= 0.
// PyTorch3D's matrix_to_quaternion, as upstream's windowed warp re-encodes rotations: of the four
// candidates the one built from the largest of 2|w|, 2|x|, 2|y|, 2|z| is taken (the first on ties, as
// torch.argmax), so its divisor is never small; the sign is then flipped if w < 0. Unit length to
// rounding when m is orthonormal (no normalisation, to match the reference).
template <typename T>
std::array<T, 4> rotation_to_quat_xyzw(const std::array<T, 9>& m) {
  const T m00 = m[0], m01 = m[1], m02 = m[2], m10 = m[3], m11 = m[4], m12 = m[5], m20 = m[6], m21 = m[7], m22 = m[8];
  auto sqrt_pos = [](T x) { return x > T(0) ? std::sqrt(x) : T(0); };
  // 2|w|, 2|x|, 2|y|, 2|z| (PyTorch3D order: scalar first).
  const T q_abs[4] = {sqrt_pos(T(1) + m00 + m11 + m22), sqrt_pos(T(1) + m00 - m11 - m22),
                      sqrt_pos(T(1) - m00 + m11 - m22), sqrt_pos(T(1) - m00 - m11 + m22)};
  const T cand[4][4] = {{q_abs[0] * q_abs[0], m21 - m12, m02 - m20, m10 - m01},
                        {m21 - m12, q_abs[1] * q_abs[1], m10 + m01, m02 + m20},
                        {m02 - m20, m10 + m01, q_abs[2] * q_abs[2], m12 + m21},
                        {m10 - m01, m20 + m02, m21 + m12, q_abs[3] * q_abs[3]}};
  int best = 0;
  for (int i = 1; i < 4; ++i)
    if (q_abs[i] > q_abs[best]) best = i;
  const T denom = T(2) * std::max(q_abs[best], T(0.1));
  std::array<T, 4> q{cand[best][1] / denom, cand[best][2] / denom, cand[best][3] / denom, cand[best][0] / denom};
  if (q[3] < T(0))
    for (T& v : q) v = -v;
  return q;
}

}  // namespace lingbot
