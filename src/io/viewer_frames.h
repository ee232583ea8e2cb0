#pragma once
// Compact per-frame binaries for the browser viewer (`lingbot-map view`, `run --serve`):
// viewer/NNNNNN.bin, one per completed frame, written atomically (temp file + rename), so a page
// that polls a live run only ever reads whole frames. One fetch per frame gives the page everything
// it draws for that frame: pose, intrinsics, the same points as points.ply (with their confidence),
// a small RGB preview of the frame and a small depth preview. The layout is little-endian and
// documented in README.md ("Viewer frame format"); fields are 4-byte aligned so the page reads them
// with typed arrays, without copies.
//
// Header (kViewerHeaderBytes = 128 bytes):
//   0 char[4] "LBVF"          4 u32 version (1)      8 u32 header bytes (128)   12 u32 flags (bit 0: keyframe)
//  16 i64 frame index        24 f64 timestamp (s)   32 u32 image width W       36 u32 image height H
//  40 f32[12] c2w, row-major 3x4 camera->world (OpenCV camera axes: x right, y down, z forward)
//  88 f32 fx, fy, cx, cy (pixels of the W x H preprocessed image)
// 104 u32 point count N     108 f32 confidence threshold the points were selected with
// 112 u32 preview width w   116 u32 preview height h
// 120 f32 depth min, 124 f32 depth max (valid depths of the frame; both 0 when none is valid)
// Payload, each part zero-padded to a multiple of 4 bytes:
//   f32 xyz[N][3] world points; f32 conf[N] (+inf when the model gave none); u8 rgb[N][3];
//   u8 preview_rgb[h][w][3]; u16 preview_depth[h][w]: 0 = invalid, else
//   depth = min + (v - 1) / 65534 * (max - min).
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "io/writers.h"

namespace lingbot::io {

inline constexpr char kViewerMagic[4] = {'L', 'B', 'V', 'F'};
inline constexpr uint32_t kViewerFormatVersion = 1;
inline constexpr uint32_t kViewerHeaderBytes = 128;
inline constexpr uint32_t kViewerFlagKeyframe = 1;
// Longer side of the frame / depth previews, in pixels (frames smaller than this keep their size).
inline constexpr int kViewerPreviewMaxSide = 160;

// One completed frame, as the run has it. Spans are borrowed for the call.
struct ViewerFrame {
  int64_t index = 0;
  double timestamp = 0;
  bool keyframe = false;
  Mat34 w2c{};         // world -> camera; the file stores its inverse (camera -> world)
  Mat33 intrinsics{};  // K in pixels of the preprocessed image
  int width = 0, height = 0;           // preprocessed image size W x H
  std::span<const float> image_chw;    // [3, H, W], values in [0, 1]
  std::span<const float> depth;        // [H, W]
  const PointBatch* points = nullptr;  // the frame's points.ply points (conf: one per point, or empty)
  float conf_threshold = 0;            // the threshold `points` were selected with
};

// The bytes of viewer/NNNNNN.bin for `f` (layout above). Throws Error on inconsistent sizes.
std::vector<uint8_t> encode_viewer_frame(const ViewerFrame& f, int preview_max_side = kViewerPreviewMaxSide);

// File name of frame `index`: "NNNNNN.bin" (zero-padded to 6 digits).
std::string viewer_frame_file_name(int64_t index);

// Writes one file per frame into `dir`. The constructor creates `dir` and removes the frame files
// an earlier run left there (only NNNNNN.bin names), so the folder never mixes two runs.
class ViewerFrameWriter {
 public:
  explicit ViewerFrameWriter(const std::filesystem::path& dir);
  void append(const ViewerFrame& f);
  int64_t frames() const { return frames_; }

 private:
  std::filesystem::path dir_;
  int64_t frames_ = 0;
};

}  // namespace lingbot::io
