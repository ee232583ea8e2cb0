#pragma once
// The "viewer" export: compact per-frame binaries for the browser viewer (`lingbot-map view`,
// `run --serve`), viewer/NNNNNN.bin, one per completed frame, written atomically (temp file +
// rename), so a page that polls a live run only ever reads whole frames. One fetch per frame gives
// the page what it draws for that frame: pose, intrinsics, the same points as points.ply (the
// frame_points rule of io/export.h) with their confidence, and a small RGB preview of the frame (the
// depth preview is the depth-preview export's PNG). Little-endian, every part 4-byte aligned so the
// page reads it with typed arrays, no copies; documented in docs/viewer.md ("Viewer frame format").
//
// Header (kViewerHeaderBytes = 128 bytes):
//   0 char[4] "LBVF"          4 u32 version (2)      8 u32 header bytes (128)   12 u32 flags (bit 0: keyframe,
//     bit 1: timestamp in seconds; clear: it is the frame index, the input had no clock)
//  16 i64 frame index        24 f64 timestamp       32 u32 image width W       36 u32 image height H
//  40 f32[12] c2w, row-major 3x4 camera->world (OpenCV camera axes: x right, y down, z forward)
//  88 f32 fx, fy, cx, cy (pixels of the W x H preprocessed image)
// 104 u32 point count N     108 f32 confidence threshold the points were selected with (conf > it)
// 112 u32 preview width w   116 u32 preview height h
// 120 f32 depth range lo, 124 f32 hi: what depth_preview/NNNNNN.png maps onto its colours
//     (depth_preview_range: 2nd / 98th percentile of the valid depths; 0, 0 when none is valid)
// Payload, each part zero-padded to a multiple of 4 bytes:
//   f32 xyz[N][3] world points; f32 conf[N] (+inf when the model gave none); u8 rgb[N][3];
//   u8 preview_rgb[h][w][3] (box average of the preprocessed frame, rows top first).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/export.h"

namespace lingbot::io {

inline constexpr char kViewerMagic[4] = {'L', 'B', 'V', 'F'};
// Version 2 added flags bit 1 (timestamp in seconds); in version 1 files the unit is unknown.
inline constexpr uint32_t kViewerFormatVersion = 2;
inline constexpr uint32_t kViewerHeaderBytes = 128;
inline constexpr uint32_t kViewerFlagKeyframe = 1;
inline constexpr uint32_t kViewerFlagTimestampSeconds = 2;
// Longer side of the frame preview, in pixels (frames smaller than this keep their size).
inline constexpr int kViewerPreviewMaxSide = 160;

// The bytes of viewer/NNNNNN.bin for frame `f` of a W x H run, with `points` (frame_points of `f`;
// conf one per point, or empty) selected at `conf_threshold`. Throws Error on inconsistent sizes.
std::vector<uint8_t> encode_viewer_frame(const ExportFrame& f, int width, int height, const PointBatch& points,
                                         float conf_threshold, int preview_max_side = kViewerPreviewMaxSide);

// File name of frame `index`: "NNNNNN.bin" (zero-padded to 6 digits).
std::string viewer_frame_file_name(int64_t index);

// "viewer": viewer/NNNNNN.bin per frame.
std::unique_ptr<Exporter> make_viewer_exporter();
void remove_viewer_outputs(const std::filesystem::path& out_dir);

}  // namespace lingbot::io
