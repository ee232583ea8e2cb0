#pragma once
// Image preprocessing identical to upstream's load_and_preprocess_images (utils/load_fn.py), the
// loader demo.py uses: resize with PIL's 8-bit BICUBIC resampler (bit-exact port), centre crop
// (crop mode) or white padding (pad mode), then float32 CHW = uint8 / 255. The options and the
// one-picture entry points are public (lingbot/preprocess.h); these are the pieces and the batch form.
//
// Mixed image sizes: upstream pads every image of a batch with 1.0 (white), centred, to the largest
// height and width in the batch. A streaming caller does the same by probing all sizes first
// (probe_image_size + preprocessed_size), taking batch_canvas_size(), and passing that canvas to
// preprocess_image for every frame.
#include <array>
#include <span>
#include <string>

#include "io/image.h"
#include "lingbot/preprocess.h"
#include "lingbot/tensor.h"

namespace lingbot::io {

// Python's round() for doubles: ties go to the even integer.
long long round_half_even(double v);

// PIL Image.resize(size, BICUBIC) on an 8-bit RGB image, bit-exact with Pillow's Resample.c
// (a = -0.5 cubic, support widened by the downscale factor, 22-bit fixed-point weights, horizontal
// pass into an 8-bit intermediate, then vertical pass). Same size: a plain copy.
ImageU8 resize_bicubic(const ImageU8& img, int out_width, int out_height);

// Size after resize (before crop/pad) for an input of `in` under `opt`.
ImageSize resized_size(ImageSize in, const PreprocessOptions& opt);
// Size of the tensor preprocess_image returns for one image of displayed size `in` (after crop or
// pad), before any batch padding.
ImageSize preprocessed_size(ImageSize in, const PreprocessOptions& opt);
// The largest height and width over `sizes` (upstream's batch canvas). Throws on an empty list.
ImageSize batch_canvas_size(std::span<const ImageSize> sizes);
// For preprocessed sizes of more than one kind, the notice that says so (each smaller frame is
// padded with white to the batch canvas: "the frames preprocess to 2 sizes (...)"); else "".
std::string mixed_sizes_notice(std::span<const ImageSize> sizes);

// One image -> float32 tensor [3, H, W], values k/255 exactly (k the 8-bit value), or 1.0 where
// padded. With canvas = {0,0} the result has preprocessed_size(); otherwise it is padded with 1.0,
// centred (top = pad/2, left = pad/2, floor), to the canvas, as upstream does for mixed sizes.
Tensor preprocess_image(const ImageU8& img, const PreprocessOptions& opt, ImageSize canvas = {});

// The pixels of preprocess_image(img, opt, canvas)'s result that come from the picture, for an
// image of displayed size `in`: the whole frame in crop mode without a canvas; in pad mode, and on a
// canvas larger than the frame, the rest is the white (1.0) padding, which shows no scene.
PixelRect content_rect(ImageSize in, const PreprocessOptions& opt, ImageSize canvas = {});

// Where a picture of displayed size `in` lies on the frame preprocess_image(img, opt, canvas) makes
// of it (SourcePlacement, io/image.h), and the frame pixels that came from it (content_rect): the
// steps of preprocess_image on sizes alone, once for both.
struct FramePlacement {
  SourcePlacement source;
  PixelRect content;
};
FramePlacement place_on_frame(ImageSize in, const PreprocessOptions& opt, ImageSize canvas = {});

// The intrinsics K (row-major 3x3, frame pixels, integer coordinates at pixel centres) of a camera
// seen through the preprocessed frame, in the pixels of the source picture instead: the same rays.
// A frame pixel x is the source's (x - left + 0.5) / sx - 0.5 with sx = resized / source width (the
// resizer's pixel-centre mapping), likewise y: fx0 = fx / sx, cx0 = (cx - left + 0.5) / sx - 0.5.
std::array<double, 9> source_intrinsics(const std::array<double, 9>& K, const SourcePlacement& p);

// Several images -> [N, 3, H, W], padded to the batch canvas when sizes differ (upstream batch).
Tensor preprocess_images(std::span<const ImageU8> images, const PreprocessOptions& opt);

}  // namespace lingbot::io
