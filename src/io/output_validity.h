#pragma once
// The one rule every writer applies to non-finite model outputs (a model with bad weights, an
// overflow in fp16, a degenerate pose can all produce NaN / inf):
//   * depth / confidence pixels: a value that is non-finite or <= 0 is INVALID. 16-bit PNGs store it
//     as 0, point clouds never contain it; raw float arrays (.npy) keep every value as computed.
//   * camera: a frame whose pose encoding, extrinsics or intrinsics contain a non-finite value has
//     NO GEOMETRY. Its raw arrays are still written, but it is left out of every geometric export:
//     poses.json records it with "valid": false and no matrices, the TUM trajectory skips it, it
//     adds no points (and any other pose / point / mesh writer must skip it the same way).
// Runs report each such frame and field (see `lingbot-map run`'s summary.json "warnings").
#include <cmath>
#include <cstdint>
#include <span>

namespace lingbot::io {

// Depth / confidence pixel validity (see above).
inline bool is_valid_map_value(float v) { return std::isfinite(v) && v > 0; }

// Every value finite (a span or array of float or double: the camera matrices, the pose encoding).
template <class Values>
bool all_finite(const Values& values) {
  for (const auto v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

inline int64_t count_non_finite(std::span<const float> values) {
  int64_t n = 0;
  for (float v : values) n += std::isfinite(v) ? 0 : 1;
  return n;
}

// Map pixels that are invalid by is_valid_map_value.
inline int64_t count_invalid_map_values(std::span<const float> values) {
  int64_t n = 0;
  for (float v : values) n += is_valid_map_value(v) ? 0 : 1;
  return n;
}

// A frame has geometry iff every camera value is finite (any argument may be empty = absent).
inline bool has_valid_geometry(std::span<const float> pose_encoding, std::span<const float> extrinsic,
                               std::span<const float> intrinsic) {
  return all_finite(pose_encoding) && all_finite(extrinsic) && all_finite(intrinsic);
}

}  // namespace lingbot::io
