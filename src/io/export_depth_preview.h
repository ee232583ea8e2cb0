#pragma once
// Colourised depth previews (the "depth-preview" export): what a person looks at first.
//
// Colour map: Google's Turbo (polynomial approximation), near = red, far = blue, linear in
// depth between the 2nd and 98th percentile of the frame's valid depths (values outside are
// clamped), so a few outliers do not flatten the picture. Invalid pixels (depth non-finite or
// <= 0, the rule of io/export.h) are black; Turbo itself never reaches black.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include "io/export.h"
#include "io/image.h"

namespace lingbot::io {

inline constexpr double kDepthPreviewLowPercentile = 2.0;
inline constexpr double kDepthPreviewHighPercentile = 98.0;
// The far end of the range maps to turbo_rgb(kDepthPreviewFarEnd), not turbo_rgb(0): Turbo's own
// end is so dark that it would read as an invalid (black) pixel.
inline constexpr double kDepthPreviewFarEnd = 0.05;

// Turbo colour of t in [0, 1] (clamped): t = 0 dark blue, t = 1 dark red.
std::array<uint8_t, 3> turbo_rgb(double t);

// The depth range the preview maps onto the colour map: percentiles of the valid samples
// (linear interpolation between order statistics, as numpy.percentile). {0, 0} when none is valid.
struct DepthRange {
  float lo = 0, hi = 0;
};
DepthRange depth_preview_range(std::span<const float> depth);

// depth: [height, width] row-major. Returns the RGB preview.
ImageU8 colorize_depth(int width, int height, std::span<const float> depth);
// Writes colorize_depth() as an 8-bit RGB PNG, atomically.
void write_depth_preview(const std::filesystem::path& path, int width, int height, std::span<const float> depth);

// "depth-preview": depth_preview/NNNNNN.png per frame.
std::unique_ptr<Exporter> make_depth_preview_exporter();
void remove_depth_preview_outputs(const std::filesystem::path& out_dir);

}  // namespace lingbot::io
