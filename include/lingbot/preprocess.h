#pragma once
// Frames from 8-bit RGB pictures, made exactly as `lingbot-map run` and Python's
// lingbot_map.preprocess() make them: upstream's load_and_preprocess_images (the loader of its
// demo.py) — resize with PIL's 8-bit bicubic filter (bit-exact), then a centre crop or white
// padding, then float32 = uint8 / 255. The result goes to Session::push_frame as it is.
//
// Every frame of one sequence must have the same size: pictures of different sizes give different
// shapes (upstream pads a whole batch to its largest; `run` does the same for an image folder).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "lingbot/tensor.h"

namespace lingbot {

// How a picture is fitted to image_size (CLI --preprocess, Python preprocess=).
enum class Preprocess : int8_t {
  Crop,  // width := image_size, the height keeps the aspect ratio (rounded to a multiple of
         // patch_size), then the centre image_size rows are kept if it is taller (upstream's default)
  Pad,   // the longer side := image_size, the shorter keeps the aspect ratio (rounded to a multiple
         // of patch_size), then centred on a white (1.0) image_size x image_size canvas
};

// "crop" | "pad" (the CLI's and Python's spelling), and back: parse_preprocess throws
// Error("unknown preprocess 'x' (expected crop or pad)").
std::string_view preprocess_name(Preprocess p);
Preprocess parse_preprocess(std::string_view name);

// The largest image_size accepted (4096 px: 85k tokens a frame at patch 14).
inline constexpr int kMaxImageSize = 4096;
// The released model's training width (run --image-size, Python image_size=): 518x378 for 4:3 frames.
inline constexpr int kDefaultImageSize = 518;

struct PreprocessOptions {
  int image_size = kDefaultImageSize;  // pixels, 1..kMaxImageSize and a multiple of patch_size (run --image-size)
  int patch_size = 14;   // the model's: Model::patch_size()
  Preprocess preprocess = Preprocess::Crop;
};

// Throws lingbot::Error naming the field unless image_size is in 1..kMaxImageSize and a multiple of
// patch_size, and patch_size is in 1..kMaxImageSize.
void check_preprocess_options(const PreprocessOptions& options);

// rgb: width x height pixels, 3 bytes each (R, G, B), rows top first with no gap between them
// (width * height * 3 bytes; the caller keeps ownership). Returns a new f32 [3, H, W] tensor, values
// k / 255 exactly (k the resampled 8-bit value) or 1.0 where padded; H and W are multiples of
// patch_size. Throws Error on bad options, a null pointer, a side below 1 pixel, more than
// 357,913,940 pixels (the limit of the image decoder, PIL's), or a picture so elongated that a side
// would shrink to 0.
Tensor preprocess_image(const uint8_t* rgb, int width, int height, const PreprocessOptions& options = {});

// What the decoder repaired in a picture it still decoded: libjpeg's warnings that picture data was
// lost (damaged entropy-coded data, which libjpeg, and so Pillow, conceal with grey or shifted blocks).
// Empty for an intact file, and for warnings that leave every pixel as encoded (stray bytes before the
// end marker, an unknown JFIF revision, a bad ICC profile marker); a damaged PNG or BMP, and a JPEG
// cut short, are errors instead.
struct CorruptData {
  int64_t warnings = 0;       // libjpeg's warnings of lost data for the file
  std::string first_warning;  // the first, in libjpeg's words: "Corrupt JPEG data: premature end of data segment"
  bool any() const { return warnings > 0; }
};

// Reads a PNG, JPEG or BMP file (a JPEG's EXIF orientation applied) and returns preprocess_image
// of it. Throws Error naming the file when it is missing, unreadable or cannot be decoded (FileNotFound
// when it does not exist). `corrupt` (optional; nullptr: not reported): set to what the decoder
// repaired, as `run` reports a damaged frame.
Tensor load_frame(const std::filesystem::path& image_file, const PreprocessOptions& options = {},
                  CorruptData* corrupt = nullptr);

}  // namespace lingbot
