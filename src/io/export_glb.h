#pragma once
// "glb": scene.glb, a glTF 2.0 binary written with TinyGLTF (Debian libtinygltf), for any glTF
// viewer (Blender, three.js, online viewers). Contents:
//   mesh "points"      POINTS with POSITION (float) and COLOR_0 (normalised RGBA16, linear: glTF
//                      defines vertex colours as linear, the frames are sRGB; 16 bits keep the dark
//                      tones 8 linear bits would band): the points of points.ply (same filter), at
//                      most kGlbMaxPoints — beyond that a uniform random sample of all of them
//                      (reservoir sampling, fixed seed: reproducible)
//   mesh "frustums"    LINES: a camera frustum per keyframe (apex at the camera centre, the image
//                      corners at 1/10 of the frame's median depth)
//   mesh "trajectory"  LINE_STRIP through the camera centres of every frame, in frame order
// Coordinates are the engine's world frame (metres of the model's scale, OpenCV axes: y down,
// z forward); the root node "lingbot-map world" rotates it 180 degrees about x so that glTF's
// y-up viewers show it upright. Frames with non-finite geometry are left out. The materials are
// unlit (KHR_materials_unlit): viewers show the colours as they are, not shaded by a light.
// GLB cannot be appended to, so the file is written once, atomically, in finish(); memory stays
// bounded by the point budget (20 bytes a point) plus 12 bytes per frame and 192 bytes per keyframe.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "io/export.h"

namespace lingbot::io {

inline constexpr int64_t kGlbMaxPoints = 2'000'000;

class GlbSceneBuilder {
 public:
  // Past max_points, the points kept are a uniform sample of all points seen (reservoir sampling):
  // the same seed, the same sample.
  explicit GlbSceneBuilder(int64_t max_points = kGlbMaxPoints, uint64_t seed = 0);
  void add_points(const PointBatch& points);
  void add_camera(const RigidTransform<double>& c2w, const Mat33& K, int width, int height, float frustum_depth, bool keyframe);
  // Writes the scene (temporary name + rename).
  void write(const std::filesystem::path& path) const;
  int64_t points_seen() const { return seen_; }
  int64_t points_kept() const { return static_cast<int64_t>(xyz_.size() / 3); }
  int64_t cameras() const { return static_cast<int64_t>(centres_.size() / 3); }     // trajectory points
  int64_t frustums() const { return static_cast<int64_t>(frustums_.size() / 48); }  // keyframes

 private:
  int64_t max_points_;
  int64_t seen_ = 0;
  std::vector<float> xyz_;
  std::vector<uint16_t> rgba_;  // linear, 65535 = 1
  std::vector<float> centres_;   // 3 per camera
  std::vector<float> frustums_;  // 16 vertices (8 segments) x 3 per keyframe
  std::mt19937_64 rng_;
};

std::unique_ptr<Exporter> make_glb_exporter();
void remove_glb_outputs(const std::filesystem::path& out_dir);

}  // namespace lingbot::io
