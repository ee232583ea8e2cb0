#pragma once
// Result writers for `lingbot-map run`. Every writer is incremental: it writes per frame, and after
// each call returns the file on disk is complete and parseable for the frames written so far, so
// an interrupted run leaves valid files. A call that fails (a full disk) throws and cuts the file
// back to what it was before the call, so it stays valid for the earlier frames. The appending
// writers also take back frames that were written: mark() is the state after the frames so far,
// rewind(mark) returns the file to it (a frame that another export failed on). Files written whole (depth maps, summary) are written to a
// temporary name and renamed, so a half-written file never carries the final name.
//
// Conventions: poses are OpenCV-style (x right, y down, z forward); `w2c` maps world to camera,
// `c2w` is its inverse; matrices are row-major; intrinsics K = [[fx,0,cx],[0,fy,cy],[0,0,1]] in
// pixels of the preprocessed image.
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/rigid_transform.h"
#include "io/image.h"
#include "io/line_file.h"

namespace lingbot::io {

using Mat44 = std::array<double, 16>;  // row-major 4x4
using Mat33 = std::array<double, 9>;   // row-major 3x3

// Inverse of a rigid transform [R | t] -> [R^T | -R^T t] (core/rigid_transform.h's rigid_inverse,
// which the 3x4 form is), as a 4x4 with last row 0 0 0 1.
Mat44 rigid_inverse_4x4(const RigidTransform<double>& m);
// Unit quaternion (qx, qy, qz, qw) of a rotation matrix (rows of `m`'s left 3x3), qw >= 0:
// core/rigid_transform.h's rotation_to_quat_xyzw, normalised in double.
std::array<double, 4> rotation_to_quaternion_xyzw(const RigidTransform<double>& m);

struct FramePose {
  int64_t index = 0;        // frame number in the run (0-based)
  double timestamp = 0;     // seconds (video) or the frame index (image folders)
  bool keyframe = false;    // stored in the KV cache (scale frames count as keyframes)
  std::string source;       // input file name, or "frame_<n>" for video (SourceFrame::name)
  RigidTransform<double> c2w{};  // camera -> world: the decoded pose (FrameResult::extrinsic_c2w)
  Mat33 intrinsics{};
  // Where the source picture lies on the model frame (io::place_on_frame): poses.json then also
  // gives the picture's size and K in its pixels. nullopt: a model input given as it is.
  std::optional<SourcePlacement> placement;
  // False when the camera is not finite (io/output_validity.h has_valid_geometry): the frame is
  // listed without matrices and every geometric writer skips it.
  bool valid = true;
};

// Throws Error unless `meta` is null or a JSON object without the keys poses.json writes itself
// ("frames", "format", "version"): "poses.json metadata must not contain the key '<k>' (the file's own)".
void check_poses_metadata(const nlohmann::json& meta);

// poses.json: {"format": "lingbot-map poses", "version": 1, <meta...>, "frames": [
//   {"index", "timestamp", "keyframe", "source", "source_size" [width, height], "valid": true,
//    "c2w" 4x4, "w2c" 3x4, "intrinsics" 3x3, "source_intrinsics" 3x3}, ...]}; a frame without valid
//   geometry has "valid": false and no matrices; one without a placement no "source_..." keys.
// After every append the file ends with the closing "]}" (the next append overwrites it).
class PosesJsonWriter {
 public:
  // `meta` (an object, may be null) adds top-level fields such as the image size.
  PosesJsonWriter(const std::filesystem::path& path, const nlohmann::json& meta = nullptr);
  PosesJsonWriter(const PosesJsonWriter&) = delete;
  PosesJsonWriter& operator=(const PosesJsonWriter&) = delete;
  void append(const FramePose& pose);
  int64_t frames() const { return frames_; }
  struct Mark {
    long trailer_pos = 0;
    int64_t frames = 0;
  };
  Mark mark() const { return {trailer_pos_, frames_}; }
  void rewind(const Mark& m);

 private:
  std::filesystem::path path_;
  UniqueFile file_;
  long trailer_pos_ = 0;  // where the closing "\n]}\n" starts
  int64_t frames_ = 0;
};

// TUM RGB-D trajectory: one line per frame "timestamp tx ty tz qx qy qz qw" of the camera-to-world
// pose (translation = camera centre in world coordinates); no header line, so lines == frames.
class TumWriter {
 public:
  explicit TumWriter(const std::filesystem::path& path) : file_(path) {}
  // Appends one line of the camera -> world pose; a pose with a non-finite value is skipped
  // (returns false), as for every geometric export (io/output_validity.h).
  bool append(double timestamp, const RigidTransform<double>& c2w);
  using Mark = LineFile::Mark;
  Mark mark() const { return file_.mark(); }
  void rewind(const Mark& m) { file_.rewind(m); }

 private:
  LineFile file_;  // flushed per line; a failed append leaves no half line
};

// Binary little-endian PLY with per-vertex "float x, y, z; uchar red, green, blue". The header's
// vertex count is a fixed-width field patched on every flush(), so the file is valid after each
// flush; append_points() buffers, flush() writes (call it once per frame), the destructor flushes.
class PlyWriter {
 public:
  explicit PlyWriter(const std::filesystem::path& path);
  ~PlyWriter();
  PlyWriter(const PlyWriter&) = delete;
  PlyWriter& operator=(const PlyWriter&) = delete;
  // xyz: 3 floats per point, rgb: 3 bytes per point (same count).
  void append_points(std::span<const float> xyz, std::span<const uint8_t> rgb);
  void flush();
  int64_t points() const { return written_ + pending_; }
  // The points flushed so far; rewind() drops the points after them (buffered ones too).
  struct Mark {
    int64_t points = 0;
  };
  Mark mark() const { return {written_}; }
  void rewind(const Mark& m);

 private:
  std::filesystem::path path_;
  UniqueFile file_;
  long count_pos_ = 0;
  long data_pos_ = 0;  // end of the header
  int64_t written_ = 0;
  int64_t pending_ = 0;
  std::string buffer_;
};
// The header's count field: decimal digits then spaces up to this width (readers split on
// whitespace; no leading zeros, which base-0 strtol would read as octal).
inline constexpr int kPlyCountWidth = 12;

// 16-bit depth / confidence PNGs. A sample stores round(value / unit), clipped to 1..65535;
// 0 marks an invalid value (NaN, inf, <= 0). The unit is also written into the PNG as a tEXt chunk
// (key "lingbot:unit"), next to "lingbot:quantity" ("depth" / "confidence").
inline constexpr double kDepthPngUnit = 1e-3;       // depth: 1/1000 scene unit, max 65.535
inline constexpr double kConfidencePngUnit = 1e-2;  // confidence: 1/100, max 655.35
// Returns the samples clipped to 65535 (values of 65535 units or more: the PNG cannot say how far).
int64_t write_map_png16(const std::filesystem::path& path, int width, int height, std::span<const float> values,
                        double unit, const std::string& quantity);
// Quantisation used by write_map_png16 (exposed for tests and readers).
uint16_t quantize_u16(float value, double unit);

// One frame's depth outputs in `dir`: NNNNNN.png (16-bit, kDepthPngUnit), NNNNNN.npy (float32
// [H, W]), and, when `conf` is not empty, NNNNNN_conf.png (kConfidencePngUnit) and
// NNNNNN_conf.npy. NNNNNN is the zero-padded frame index. Each file is written atomically.
// Returns the samples each PNG clipped (write_map_png16); the .npy files keep every value.
struct ClippedSamples {
  int64_t depth = 0;
  int64_t confidence = 0;
};
ClippedSamples write_depth_frame(const std::filesystem::path& dir, int64_t index, int width, int height,
                                 std::span<const float> depth, std::span<const float> conf);
// The four file names write_depth_frame may write for `index` (NNNNNN.png, .npy, _conf.png, _conf.npy).
std::array<std::string, 4> depth_frame_file_names(int64_t index);

// Points of one frame for the PLY, chosen as upstream's viewer does (vis/point_cloud_viewer.py
// parse_pc_data): drop points with a non-finite coordinate, keep conf > conf_threshold (when conf is
// given), then keep every downsample-th remaining point (0, d, 2d, ...). Pixels whose depth or
// confidence is invalid (io/output_validity.h: non-finite or <= 0) never give a point, whatever the
// threshold, nor do pixels outside `area` (a padded frame's margins show no scene). Colours come from
// the preprocessed image (values k/255 -> k).
struct PointBatch {
  std::vector<float> xyz;    // 3 per point
  std::vector<uint8_t> rgb;  // 3 per point
  std::vector<float> conf;   // 1 per point when confidences were given, else empty
  std::vector<uint32_t> pixel;  // select_points: the pixel each point came from, row * W + col; else empty
  size_t size() const { return xyz.size() / 3; }
};
// points: [H*W, 3] world points; image_chw: [3, H, W] in [0, 1]; conf: [H*W] or empty.
// depth: [H*W] or empty; when given, pixels whose depth or confidence is non-finite or <= 0 are
// dropped first (the invalid-value rule of io/export.h).
// The pixels points may come from: `rect` of a frame `frame_width` pixels wide (io::content_rect: the
// rest is padding); frame_width 0 (the default) means every pixel. `mask`: [H*W], 0 = the pixel gives
// no point (a caller's mask of sky or moving objects: ExportFrame::point_mask); empty = every pixel.
struct PointArea {
  int frame_width = 0;
  PixelRect rect;
  std::span<const uint8_t> mask;
};
PointBatch select_points(std::span<const float> points, std::span<const float> image_chw, std::span<const float> conf,
                         float conf_threshold, int downsample, std::span<const float> depth = {},
                         const PointArea& area = {});

// JSON text of `doc` (indent < 0: one line). Strings holding bytes that are not UTF-8 (file names
// from Latin-1 systems, camera cards) get U+FFFD in their place instead of failing the write.
std::string json_text(const nlohmann::json& doc, int indent = -1);

// Whole JSON document written atomically (summary.json), pretty-printed with 2-space indent.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& doc);

}  // namespace lingbot::io
