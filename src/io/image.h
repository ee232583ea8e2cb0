#pragma once
// 8-bit RGB images: decoding (libjpeg-turbo for JPEG, libpng for PNG, stb_image for BMP; the format
// is found from the file's first bytes, whatever its name), EXIF orientation, alpha handling,
// transposes.
//
// Decoding follows what upstream's loader gets from PIL (Image.open -> ImageOps.exif_transpose ->
// RGBA alpha-composited on white -> convert("RGB")):
//  * The orientation 2..8 is applied, found where Pillow's getexif finds it (io/image_orientation.h:
//    the EXIF tag of a JPEG APP1 "Exif" segment, a PNG eXIf chunk or ImageMagick's "Raw profile type
//    exif" PNG text; else the XMP packet's tiff:Orientation); other values are ignored.
//  * An image with a real alpha channel (PIL mode "RGBA": PNG colour type 6, a 16-bit grey+alpha PNG,
//    a BMP with an alpha bitfield) is composited over opaque white with Pillow's integer
//    alpha_composite arithmetic.
//  * 8-bit grey+alpha PNGs (PIL mode "LA") and transparency through tRNS (PIL modes "P"/"RGB" with a
//    transparency key) lose their alpha without compositing, as PIL's convert("RGB") does.
//  * Grey images are replicated to RGB. 16-bit channels keep their high byte, except 16-bit grey
//    PNGs (PIL mode "I;16"), whose values are clipped to 255 as PIL's convert("RGB") does. 16-bit
//    BMPs (5-5-5 or 5-6-5) expand their channels as Pillow does, v * 255 / (2^n - 1).
//  * JPEG is decoded by libjpeg-turbo with the settings PIL uses (libjpeg defaults: integer ISLOW
//    IDCT, fancy upsampling; grey replicated to RGB; 4-component JPEGs read as Adobe-inverted CMYK
//    and converted with PIL's CMYK -> RGB formula), so pixels match PIL on the same libjpeg-turbo.
//    Like PIL (without LOAD_TRUNCATED_IMAGES), a JPEG whose data ends before the last scanline is
//    an error ("image file is truncated"); corruption libjpeg recovers from is decoded as PIL
//    decodes it, and reported (CorruptData) where PIL stays silent.
//  * Other formats (WebP, GIF, TIFF, HEIC, ...) and RLE-compressed BMPs are refused with a message
//    naming what the file is.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "io/file_util.h"
#include "lingbot/preprocess.h"

namespace lingbot::io {

// Interleaved 8-bit RGB, row-major, `rgb.size() == width * height * 3`.
struct ImageU8 {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;

  ImageU8() = default;
  ImageU8(int w, int h);   // zero-filled
  uint8_t* pixel(int x, int y) { return rgb.data() + (static_cast<size_t>(y) * width + x) * 3; }
  const uint8_t* pixel(int x, int y) const {
    return rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
  }
};

// A model input (f32 [3, H, W] RGB in [0, 1], planes in order: preprocess's k / 255, or 1.0 for
// padding) back to 8-bit RGB, exactly for such values (v * 255 rounded, clamped to 0..255).
ImageU8 rgb8_from_chw(std::span<const float> chw, int width, int height);

// PIL's Image.Transpose operations (same names and meaning).
enum class Transpose {
  FlipLeftRight,   // mirror x
  FlipTopBottom,   // mirror y
  Rotate90,        // 90 degrees counter-clockwise
  Rotate180,
  Rotate270,       // 90 degrees clockwise (demo.py --rotate_clockwise_90)
  Transpose,       // swap x and y (main diagonal)
  Transverse,      // mirror over the anti-diagonal
};
ImageU8 transpose(const ImageU8& img, Transpose op);

// The orientation of an encoded JPEG or PNG file, in EXIF's codes 1..8, where Pillow's getexif finds
// it (io/image_orientation.h: the EXIF tag, else the XMP packet's); 1 when there is none or it cannot
// be parsed (malformed EXIF is ignored, like a missing tag).
int exif_orientation(std::span<const uint8_t> file_bytes);
// Applies an EXIF orientation as ImageOps.exif_transpose does (1 or unknown values: unchanged).
ImageU8 apply_exif_orientation(const ImageU8& img, int orientation);

// Largest image decoded, in pixels: PIL's decompression-bomb error threshold, 2 x Image.MAX_IMAGE_PIXELS
// (89,478,485), past which Image.open raises DecompressionBombError; checked on the header before
// any pixel memory is allocated.
inline constexpr int64_t kMaxImagePixels = 2 * int64_t{89478485};

// Decodes an encoded image held in memory. `name` is used in error messages.
// Throws Error("cannot decode image <name>: <reason>") when the bytes are not a supported image or
// have more than kMaxImagePixels pixels; for JPEG the reason is libjpeg's message or "image file is
// truncated". `corrupt` (optional): set to the corrupt data libjpeg recovered from (else cleared).
ImageU8 decode_image(std::span<const uint8_t> file_bytes, const std::string& name, CorruptData* corrupt = nullptr);

// Reads and decodes an image file (PNG, JPEG, BMP).
// Errors: "image file not found: <path>", "cannot read image file <path>: <reason>",
// "cannot decode image <path>: <reason>".
ImageU8 load_image(const std::filesystem::path& path, CorruptData* corrupt = nullptr);

struct ImageSize {
  int width = 0;
  int height = 0;
  bool operator==(const ImageSize&) const = default;
};
// Pixels x .. x + width - 1 (columns) and y .. y + height - 1 (rows) of an image.
struct PixelRect {
  int x = 0, y = 0, width = 0, height = 0;
  bool operator==(const PixelRect&) const = default;
  bool contains(int column, int row) const { return column >= x && column < x + width && row >= y && row < y + height; }
};
// Where a picture of displayed size `source` lies on a model frame made of it (io::place_on_frame):
// resized to `resized`, then placed with its pixel (0, 0) at frame pixel (left, top) (top < 0: crop
// mode cut -top rows off; left, top > 0: white padding before it).
struct SourcePlacement {
  ImageSize source, resized;
  int left = 0, top = 0;
  bool operator==(const SourcePlacement&) const = default;
};
// Displayed size (after EXIF orientation) of an encoded image, read from its header without
// decoding the pixels. Same errors as decode_image / load_image (the kMaxImagePixels limit included).
ImageSize probe_image(std::span<const uint8_t> file_bytes, const std::string& name);
ImageSize probe_image_size(const std::filesystem::path& path);

// The image files directly inside `dir` whose extension is .jpg, .jpeg, .png or .bmp (any case),
// sorted by file name (byte order, as Python's sorted() on the glob results upstream). Upstream
// demo.py only globs *.jpg, *.png and *.JPG; the wider set here is a superset. Hidden files (a name
// starting with '.', such as macOS's "._frame.png" companions) are skipped, as a glob skips them.
// Errors: "image folder not found: <dir>", "not a folder: <dir>",
// "no images (.jpg, .jpeg, .png, .bmp) in <dir>" (then, when there are some, "; " and
// unread_image_files_notice), "image file <path> is not a regular file (...)".
std::vector<std::filesystem::path> list_image_files(const std::filesystem::path& dir);
// Whether the name has an extension list_image_files reads (.jpg, .jpeg, .png, .bmp, in any case).
bool is_image_file_name(const std::filesystem::path& path);

// When byte order and the order of the numbers in names that differ only in their numbers differ
// ("img10.png" sorts before "img2.png"), says so for the first such pair and how to fix it; else "". Frames stay in byte order,
// as upstream reads them: this is the notice that un-padded numbers scramble a sequence.
std::string name_order_notice(const std::vector<std::filesystem::path>& sorted_files);

// When some of `files` are 16-bit greyscale PNGs (a depth or infrared camera's frames), says how many
// and that they come out nearly white: Pillow converts them to RGB clipping every value above 255,
// and so do upstream and this reader (decode_image); else "". Reads each file's first 26 bytes.
std::string grey16_png_notice(const std::vector<std::filesystem::path>& files);

// Files directly inside `dir` (not hidden) in an image format list_image_files does not read (.webp,
// .tif, .tiff, .jpe, .gif, .heic, ...): extension (lower case) -> count, for the notice that they
// are not frames. Errors as list_image_files for a missing folder.
std::map<std::string, int64_t> unread_image_files(const std::filesystem::path& dir);
// unread_image_files in words ("2 image files of another format in the folder are not read (1 .tif,
// 1 .webp): frames are .jpg, .jpeg, .png and .bmp files"), or "" when there are none: run's notice
// and the Python module's warning.
std::string unread_image_files_notice(const std::filesystem::path& dir);

}  // namespace lingbot::io
