#include "io/image.h"

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cctype>
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE and size_t without including their headers
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string_view>

#include <jpeglib.h>
#include <jerror.h>  // the warning codes (JWRN_*)
#include <png.h>

#include "core/error.h"
#include "io/file_util.h"
#include "io/image_orientation.h"

#define STB_IMAGE_IMPLEMENTATION
// Internal linkage: an application that links our archives and compiles stb_image itself must not
// meet a second definition of every stbi_* symbol.
#define STB_IMAGE_STATIC
// stb decodes BMP only. JPEG goes to libjpeg-turbo (decode_jpeg): stb's own JPEG decoder also
// accepts streams that open with fill bytes (FF FF D8) and reads out of bounds on a bad Huffman
// table (found by fuzz_image). PNG goes to libpng (decode_png): stb checks neither the chunk CRCs
// nor the zlib checksum, so a damaged file decoded as garbage without a word. stb's PNG reader
// stays compiled in as the tests' independent reader of the PNGs we write.
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_FAILURE_USERMSG
#include "io/stb_image_quiet.h"

namespace lingbot::io {

ImageU8 rgb8_from_chw(std::span<const float> chw, int width, int height) {
  ImageU8 img(width, height);
  const size_t plane = static_cast<size_t>(width) * static_cast<size_t>(height);
  LINGBOT_CHECK(chw.size() == 3 * plane, "rgb8_from_chw: ", chw.size(), " values for a ", width, "x", height,
                " image (3 planes)");
  for (size_t i = 0; i < plane; ++i)
    for (size_t c = 0; c < 3; ++c)
      img.rgb[i * 3 + c] = static_cast<uint8_t>(std::lround(std::clamp(chw[c * plane + i], 0.0f, 1.0f) * 255.0f));
  return img;
}

ImageU8::ImageU8(int w, int h) : width(w), height(h), rgb(static_cast<size_t>(w) * h * 3, 0) {
  LINGBOT_CHECK(w > 0 && h > 0, "image size must be positive, got ", w, "x", h);
}

ImageU8 transpose(const ImageU8& img, Transpose op) {
  const int w = img.width, h = img.height;
  const bool swaps = op == Transpose::Rotate90 || op == Transpose::Rotate270 ||
                     op == Transpose::Transpose || op == Transpose::Transverse;
  ImageU8 out(swaps ? h : w, swaps ? w : h);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // source pixel of output (x, y)
      switch (op) {
        case Transpose::FlipLeftRight: sx = w - 1 - x; break;
        case Transpose::FlipTopBottom: sy = h - 1 - y; break;
        case Transpose::Rotate180: sx = w - 1 - x; sy = h - 1 - y; break;
        case Transpose::Rotate90: sx = w - 1 - y; sy = x; break;       // counter-clockwise
        case Transpose::Rotate270: sx = y; sy = h - 1 - x; break;      // clockwise
        case Transpose::Transpose: sx = y; sy = x; break;
        case Transpose::Transverse: sx = w - 1 - y; sy = h - 1 - x; break;
      }
      std::memcpy(out.pixel(x, y), img.pixel(sx, sy), 3);
    }
  }
  return out;
}

ImageU8 apply_exif_orientation(const ImageU8& img, int orientation) {
  switch (orientation) {
    case 2: return transpose(img, Transpose::FlipLeftRight);
    case 3: return transpose(img, Transpose::Rotate180);
    case 4: return transpose(img, Transpose::FlipTopBottom);
    case 5: return transpose(img, Transpose::Transpose);
    case 6: return transpose(img, Transpose::Rotate270);
    case 7: return transpose(img, Transpose::Transverse);
    case 8: return transpose(img, Transpose::Rotate90);
    default: {
      ImageU8 copy;
      copy.width = img.width;
      copy.height = img.height;
      copy.rgb = img.rgb;
      return copy;
    }
  }
}

namespace {

bool orientation_swaps_axes(int orientation) { return orientation >= 5 && orientation <= 8; }

bool is_png(std::span<const uint8_t> b) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  return b.size() >= 8 && std::memcmp(b.data(), sig, 8) == 0;
}
bool is_jpeg(std::span<const uint8_t> b) { return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8; }

bool is_bmp(std::span<const uint8_t> b) { return b.size() >= 2 && b[0] == 'B' && b[1] == 'M'; }

// What stb_image must be told of a BMP before it reads it, and what its pixels then need to be
// Pillow's (BmpImagePlugin + convert("RGB")).
//  * `problem`: pixel rows that run past the end of the file (stb_image reads the missing bytes as
//    zeros: a 200-byte file decoded as 2568 x 1286, found by fuzz_image; Pillow refuses it, "image
//    file is truncated") or a compression stb_image does not decode; "" = fine, or a header layout
//    this check does not know (stb_image then decides).
//  * `no_alpha`: 32 bits per pixel without bitfields (BI_RGB) is B, G, R and an unused byte, which
//    Pillow reads as BGRX; stb_image takes it for alpha, so a writer's junk there would composite the
//    picture towards white. Likewise the alpha bit of a 16-bit file, which Pillow does not read.
//  * `channel_bits`: 16 bits per pixel in the layouts Pillow reads (5-5-5, and 5-6-5 bitfields): the
//    bits of R, G and B. Pillow expands a channel as v * 255 / (2^n - 1) (4 of 31 -> 32), stb_image by
//    repeating its bits (4 -> 33); {0, 0, 0} otherwise.
//  * `as_windows_bmp`: an OS/2 file (12-byte header) with a palette, rewritten with a Windows header:
//    stb_image sizes an OS/2 palette wrongly (a 256-colour one as 252 colours, the last four read from
//    the stack; a 2-colour one skips into the pixels).
struct BmpCheck {
  std::string problem;
  bool no_alpha = false;
  std::array<int, 3> channel_bits{};
  std::vector<uint8_t> as_windows_bmp;
};

// The OS/2 palette file `b` (header checked by check_bmp) as a Windows BMP: 40-byte header, the
// 2^bpp palette entries Pillow reads right after the 12-byte header as B, G, R, 0, then the pixels.
std::vector<uint8_t> os2_palette_bmp_as_windows(std::span<const uint8_t> b, uint32_t w, uint32_t h, uint32_t bpp,
                                                 uint64_t pixel_offset) {
  const uint32_t colors = 1u << bpp;
  const uint32_t new_offset = 14 + 40 + 4 * colors;
  const std::span<const uint8_t> pixels = b.subspan(pixel_offset);
  std::vector<uint8_t> out;
  out.reserve(new_offset + pixels.size());
  auto put16 = [&](uint32_t v) { out.push_back(static_cast<uint8_t>(v)), out.push_back(static_cast<uint8_t>(v >> 8)); };
  auto put32 = [&](uint32_t v) { put16(v & 0xffff), put16(v >> 16); };
  out.push_back('B'), out.push_back('M');
  put32(static_cast<uint32_t>(new_offset + pixels.size())), put32(0), put32(new_offset);
  put32(40), put32(w), put32(h), put16(1), put16(bpp), put32(0), put32(0), put32(0), put32(0), put32(colors), put32(0);
  for (uint32_t i = 0; i < colors; ++i) {
    const uint8_t* e = b.data() + 26 + 3 * i;
    out.insert(out.end(), {e[0], e[1], e[2], 0});
  }
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

BmpCheck refused(std::string why) {
  BmpCheck check;
  check.problem = std::move(why);
  return check;
}

BmpCheck check_bmp(std::span<const uint8_t> b) {
  auto le16 = [&](size_t o) { return uint32_t{b[o]} | (uint32_t{b[o + 1]} << 8); };
  auto le32 = [&](size_t o) { return le16(o) | (le16(o + 2) << 16); };
  if (b.size() < 18) return refused(detail::concat("BMP header is truncated (", b.size(), " bytes)"));
  const uint32_t header = le32(14);
  if (header != 12 && header != 40 && header != 56 && header != 108 && header != 124) return {};
  if (b.size() < 14 + uint64_t{header})
    return refused(detail::concat("BMP header is truncated (", b.size(), " bytes, its info header needs ", 14 + header, ")"));
  const uint64_t offset = le32(10);
  uint64_t w = 0, h = 0, bpp = 0, compression = 0;
  if (header == 12) {  // BITMAPCOREHEADER (OS/2)
    w = le16(18), h = le16(20), bpp = le16(24);
  } else {
    w = static_cast<uint64_t>(std::abs(static_cast<int64_t>(static_cast<int32_t>(le32(18)))));
    h = static_cast<uint64_t>(std::abs(static_cast<int64_t>(static_cast<int32_t>(le32(22)))));  // < 0: top-down
    bpp = le16(28), compression = le32(30);
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
    return refused(detail::concat("BMP with ", bpp, " bits per pixel is not supported"));
  // stb_image refuses only RLE (1, 2) and decodes any other value as uncompressed rows.
  if (compression != 0 && compression != 3) {
    const char* kind = compression == 1 ? " (RLE8)" : compression == 2 ? " (RLE4)" : "";
    return refused(detail::concat("BMP compression ", compression, kind,
                           " is not supported (uncompressed and bitfields only): convert it to PNG"));
  }
  const uint64_t row_bytes = (w * bpp + 31) / 32 * 4;
  const uint64_t needed = offset + row_bytes * h;
  if (needed > b.size())
    return refused(detail::concat("BMP pixel data is truncated: ", w, "x", h, " at ", bpp, " bits per pixel needs ", needed,
                           " bytes, the file has ", b.size()));
  BmpCheck check;
  check.no_alpha = bpp == 32 && compression == 0;
  if (bpp == 16) {
    uint32_t masks[3] = {0x7c00, 0x03e0, 0x001f};  // BI_RGB: 5-5-5
    if (compression == 3) {
      if (b.size() < 14 + 40 + 12) return check;
      for (int k = 0; k < 3; ++k) masks[k] = le32(14 + 40 + 4 * k);
    }
    if (masks[0] == 0x7c00 && masks[1] == 0x03e0 && masks[2] == 0x001f) {
      check.channel_bits = {5, 5, 5};
    } else if (masks[0] == 0xf800 && masks[1] == 0x07e0 && masks[2] == 0x001f) {
      check.channel_bits = {5, 6, 5};
    }
    check.no_alpha = check.channel_bits[0] != 0;
  }
  if (header == 12 && bpp <= 8) {
    const uint64_t palette_end = 26 + 3 * (uint64_t{1} << bpp);
    if (palette_end > b.size())
      return refused(detail::concat("BMP palette is truncated: ", 1u << bpp, " colours need ", palette_end,
                                    " bytes, the file has ", b.size()));
    if (offset < 26) return refused(detail::concat("BMP pixel data offset ", offset, " is inside its 26-byte header"));
    check.as_windows_bmp = os2_palette_bmp_as_windows(b, static_cast<uint32_t>(w), static_cast<uint32_t>(h),
                                                      static_cast<uint32_t>(bpp), offset);
  }
  return check;
}

// Pillow's alpha_composite of (r,g,b,a) over opaque white, integer arithmetic as in
// AlphaComposite.c (7 extra precision bits, rounded divisions by 255).
inline uint8_t composite_over_white(uint32_t c, uint32_t a) {
  if (a == 0) return 255;
  constexpr uint32_t kBits = 7;
  const uint32_t blend = 255 * (255 - a);
  const uint32_t outa255 = a * 255 + blend;
  const uint32_t coef1 = a * 255 * 255 * (1u << kBits) / outa255;
  const uint32_t coef2 = 255 * (1u << kBits) - coef1;
  const uint32_t tmp = c * coef1 + 255 * coef2 + (0x80u << kBits);
  return static_cast<uint8_t>((((tmp >> 8) + tmp) >> 8) >> kBits);
}

struct StbFree {
  void operator()(stbi_uc* p) const noexcept { stbi_image_free(p); }
};

// ---- PNG: libpng, with the transforms that give PIL's pixels ----
// libpng checks every chunk's CRC (ancillary ones too: PIL refuses those it reads) and the zlib
// stream (inflate errors, its Adler-32 once the rows are read: png_read_end), and refuses a file
// that ends before its last row. Pixels as PIL's PngImagePlugin
// + convert("RGB") give them: palette -> RGB, grey of 1/2/4 bits scaled to 8 (0 -> 0, max -> 255),
// 16-bit samples -> their high byte (PIL's ";16B" raw modes), except 16-bit grey (mode "I;16",
// clipped to 255), tRNS transparency ignored, the alpha of RGBA and of 16-bit grey+alpha kept for the
// white composite and that of 8-bit grey+alpha dropped.

struct PngReadState {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  char message[256] = {};
  bool truncated = false;  // a read past the end of the file
  bool rows_done = false;  // every row decoded
};

void png_read_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngReadState*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof st->message, "%s", msg);
  png_longjmp(png, 1);
}
// libpng reports damage it finds in the image data after the last row (png_read_end: a wrong
// Adler-32, a bad deflate code) as a warning about IDAT: an error here. Data after the end of the
// zlib stream, or a stream that inflates to more than the rows, stay warnings: the rows are whole
// and Pillow, which stops at the last row, decodes such files. Other warnings are about ancillary
// chunks libpng skips (as Pillow ignores them).
void png_read_warning(png_structp png, png_const_charp msg) {
  const bool harmless = std::strstr(msg, "Extra compress") != nullptr || std::strstr(msg, "Too much image data") != nullptr;
  if (std::strncmp(msg, "IDAT", 4) == 0 && !harmless) png_read_error(png, msg);
}
void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* st = static_cast<PngReadState*>(png_get_io_ptr(png));
  if (n > st->bytes.size() - st->pos) {
    st->truncated = true;
    png_error(png, "image file is truncated");
  }
  std::memcpy(out, st->bytes.data() + st->pos, n);
  st->pos += n;
}

struct PngPixels {
  uint32_t width = 0, height = 0;
  int channels = 0;          // of `pixels`: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
  int bytes_per_sample = 1;  // 2 only for 16-bit grey, kept whole for PIL's clip
  int color_type = -1;       // IHDR's
  int bit_depth = 0;         // IHDR's
  // malloc'd by read_png (no allocation that can throw there); members, not locals of read_png, so
  // their values after a longjmp are defined.
  uint8_t* pixels = nullptr;
  png_bytep* rows = nullptr;
  PngPixels() = default;
  PngPixels(const PngPixels&) = delete;
  PngPixels& operator=(const PngPixels&) = delete;
  ~PngPixels() {
    std::free(rows);
    std::free(pixels);
  }
};

void check_pixel_limit(int64_t w, int64_t h, const std::string& name);

enum class PngRead { HeaderOnly, Pixels };

// Reads the header (into `out`), then, for PngRead::Pixels and a size within `max_pixels`, every row
// and the end of the file. Kept free of C++ objects with destructors and of throwing calls between
// setjmp and the libpng calls (libpng reports errors by longjmp). Returns false with the message in
// `st`.
bool read_png(PngReadState* st, PngPixels* out, PngRead what, int64_t max_pixels, bool* too_large) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, st, png_read_error, png_read_warning);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, st, png_read_bytes);
  png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);  // a bad CRC in any chunk is an error
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  // libpng allocates a chunk's declared length (or an inflated text or profile) before reading it,
  // up to its chunk_malloc_max (8,000,000 bytes as Debian builds it): lowered to the file's size, 1 MiB
  // at least, as no chunk can be larger than the file (png_chunk_facts refuses those first). Never raised.
  const png_alloc_size_t bound = st->bytes.size() > (size_t{1} << 20) ? st->bytes.size() : (size_t{1} << 20);
  const png_alloc_size_t current = png_get_chunk_malloc_max(png);
  png_set_chunk_malloc_max(png, current == 0 || bound < current ? bound : current);
  png_read_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  out->color_type = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  out->bit_depth = depth;
  *too_large = static_cast<int64_t>(out->width) * out->height > max_pixels;
  if (what == PngRead::HeaderOnly || *too_large) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  const bool grey16 = out->color_type == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (out->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (out->color_type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !grey16) png_set_strip_16(png);  // the high byte, as PIL's ";16B" raw modes
  if (grey16) png_set_swap(png);                      // host order for the uint16 reads below
  (void)png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->channels = png_get_channels(png, info);
  out->bytes_per_sample = grey16 ? 2 : 1;
  const size_t row_bytes = png_get_rowbytes(png, info);
  out->pixels = static_cast<uint8_t*>(std::malloc(row_bytes * out->height));
  out->rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * out->height));
  if (!out->pixels || !out->rows) png_error(png, "out of memory");
  for (uint32_t y = 0; y < out->height; ++y) out->rows[y] = out->pixels + y * row_bytes;
  png_read_image(png, out->rows);
  st->rows_done = true;
  png_read_end(png, nullptr);  // the rest of the zlib stream (its Adler-32) and the chunks up to IEND
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

ImageU8 decode_png(std::span<const uint8_t> file_bytes, const std::string& name) {
  const PngChunkFacts f = png_chunk_facts(file_bytes);
  LINGBOT_CHECK(f.chunk_error.empty(), "cannot decode image ", name, ": ", f.chunk_error);
  PngReadState st{file_bytes};
  PngPixels px;
  bool too_large = false;
  // A file that ends after its last row (no IEND) is accepted, as PIL does; one whose stream
  // is damaged before that is not.
  const bool ok = read_png(&st, &px, PngRead::Pixels, kMaxImagePixels, &too_large) || (st.rows_done && st.truncated);
  LINGBOT_CHECK(ok, "cannot decode image ", name, ": ", st.message[0] ? st.message : "out of memory");
  if (too_large) check_pixel_limit(px.width, px.height, name);
  ImageU8 img(static_cast<int>(px.width), static_cast<int>(px.height));
  const size_t n = static_cast<size_t>(px.width) * px.height;
  const int c = px.channels;
  // PIL mode "RGBA": RGB+alpha, and 16-bit grey+alpha (PIL opens it as RGBA, raw mode "LA;16B"); an
  // 8-bit grey+alpha PNG is mode "LA", whose alpha convert("RGB") drops.
  const bool composite = (c == 4 && px.color_type == PNG_COLOR_TYPE_RGB_ALPHA) ||
                         (c == 2 && px.color_type == PNG_COLOR_TYPE_GRAY_ALPHA && px.bit_depth == 16);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* dst = img.rgb.data() + i * 3;
    if (px.bytes_per_sample == 2) {  // PIL "I;16" -> "RGB": values above 255 become 255
      uint16_t v;
      std::memcpy(&v, px.pixels + i * 2, 2);
      dst[0] = dst[1] = dst[2] = static_cast<uint8_t>(std::min<uint16_t>(v, 255));
      continue;
    }
    const uint8_t* src = px.pixels + i * static_cast<size_t>(c);
    if (composite && c == 2) {
      dst[0] = dst[1] = dst[2] = composite_over_white(src[0], src[1]);
    } else if (c <= 2) {
      dst[0] = dst[1] = dst[2] = src[0];
    } else if (composite) {
      for (int k = 0; k < 3; ++k) dst[k] = composite_over_white(src[k], src[3]);
    } else {
      std::memcpy(dst, src, 3);
    }
  }
  return f.orientation != 1 ? apply_exif_orientation(img, f.orientation) : img;
}

// ---- JPEG: libjpeg-turbo driven as Pillow's JpegDecode drives it ----
// Pillow keeps libjpeg's default decompression parameters (JDCT_ISLOW, fancy upsampling, block
// smoothing), lets libjpeg guess the colour space, and asks for JCS_RGB (3 components),
// JCS_GRAYSCALE (1) or JCS_CMYK (4, read as Adobe-inverted "CMYK;I"). Its source suspends when the
// data runs out, and ImageFile.load then raises "image file is truncated"; warnings are silenced.

// libjpeg reports fatal errors through error_exit, which must not return (the default calls
// exit()). Ours longjmps back to the setjmp in the jpeg_* wrappers below; those frames and the
// libjpeg frames in between hold no object with a destructor, so the jump skips nothing.
struct JpegErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg only sees this part
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  long corrupt_warnings;  // the warnings that mean pixels were lost (jpeg_emit_message)
  char first_warning[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}
// Whether a libjpeg warning means picture data was lost and concealed (grey or shifted blocks): entropy
// data cut short, undecodable or out of step with its restart markers, or garbage before a marker
// inside the image data. Not: stray bytes before the end marker, after the last scan (a common quirk of
// some writers, pixels intact), or metadata warnings (an unknown JFIF revision, a bad ICC marker).
bool jpeg_warning_loses_pixels(const jpeg_error_mgr& e) {
  switch (e.msg_code) {
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_JPEG_EOF:
      return true;
    case JWRN_EXTRANEOUS_DATA:
      return e.msg_parm.i[1] != 0xd9;  // the marker the bytes came before: EOI follows the whole image
    default:
      return false;
  }
}
// Nothing is printed. Warnings (msg_level < 0) are counted as libjpeg's own emit_message counts them;
// those that lost pixels are counted apart and the first is kept. Trace messages are dropped.
void jpeg_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  ++err->pub.num_warnings;
  if (!jpeg_warning_loses_pixels(err->pub)) return;
  if (err->corrupt_warnings++ == 0) (*cinfo->err->format_message)(cinfo, err->first_warning);
}
void jpeg_source_noop(j_decompress_ptr) {}
// The whole file is already in the buffer, so asking for more means the file is truncated.
boolean jpeg_source_suspend(j_decompress_ptr) { return FALSE; }
void jpeg_source_skip(j_decompress_ptr cinfo, long num_bytes) {
  if (num_bytes <= 0) return;
  jpeg_source_mgr* src = cinfo->src;
  const size_t n = std::min(static_cast<size_t>(num_bytes), src->bytes_in_buffer);
  src->next_input_byte += n;
  src->bytes_in_buffer -= n;
}

enum class JpegStatus { Ok, Truncated, Failed };

// One libjpeg decompressor reading `bytes` (which must outlive it).
class JpegSession {
 public:
  explicit JpegSession(std::span<const uint8_t> bytes) {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = jpeg_error_exit;
    err_.pub.emit_message = jpeg_emit_message;
    src_.next_input_byte = bytes.data();
    src_.bytes_in_buffer = bytes.size();
    src_.init_source = jpeg_source_noop;
    src_.fill_input_buffer = jpeg_source_suspend;
    src_.skip_input_data = jpeg_source_skip;
    src_.resync_to_restart = jpeg_resync_to_restart;
    src_.term_source = jpeg_source_noop;
  }
  ~JpegSession() { jpeg_destroy_decompress(&cinfo_); }  // safe on a zeroed or half-made cinfo
  JpegSession(const JpegSession&) = delete;
  JpegSession& operator=(const JpegSession&) = delete;

  jpeg_decompress_struct& cinfo() { return cinfo_; }
  const char* error_message() const { return err_.message; }
  CorruptData corrupt_data() const {
    if (err_.corrupt_warnings == 0) return {};
    return {err_.corrupt_warnings, err_.first_warning};
  }

  // Creates the decompressor and reads the header up to the first image (tables-only datastreams
  // are skipped, as Pillow does).
  JpegStatus read_header() {
    if (setjmp(err_.jump) != 0) return JpegStatus::Failed;
    jpeg_create_decompress(&cinfo_);
    cinfo_.src = &src_;
    int ret;
    do {
      ret = jpeg_read_header(&cinfo_, FALSE);
    } while (ret == JPEG_HEADER_TABLES_ONLY);
    return ret == JPEG_SUSPENDED ? JpegStatus::Truncated : JpegStatus::Ok;
  }

  // Decodes every scanline into `pixels` (output_height rows of `row_bytes`). A missing end
  // (EOI) after the last scanline is accepted, as Pillow does.
  JpegStatus decompress(uint8_t* pixels, size_t row_bytes) {
    if (setjmp(err_.jump) != 0) return JpegStatus::Failed;
    if (!jpeg_start_decompress(&cinfo_)) return JpegStatus::Truncated;
    while (cinfo_.output_scanline < cinfo_.output_height) {
      JSAMPROW row = pixels + cinfo_.output_scanline * row_bytes;
      if (jpeg_read_scanlines(&cinfo_, &row, 1) != 1) return JpegStatus::Truncated;
    }
    jpeg_finish_decompress(&cinfo_);
    return JpegStatus::Ok;
  }

 private:
  jpeg_decompress_struct cinfo_{};
  JpegErrorManager err_{};
  jpeg_source_mgr src_{};
};

void check_jpeg_status(const JpegSession& s, JpegStatus status, const std::string& name) {
  LINGBOT_CHECK(status != JpegStatus::Truncated, "cannot decode image ", name, ": image file is truncated");
  LINGBOT_CHECK(status != JpegStatus::Failed, "cannot decode image ", name, ": ", s.error_message());
}

// Header of a JPEG as PIL's JpegImagePlugin accepts it: 8-bit samples, 1, 3 or 4 components.
void read_jpeg_header(JpegSession& s, const std::string& name) {
  check_jpeg_status(s, s.read_header(), name);
  const int comps = s.cinfo().num_components;
  LINGBOT_CHECK(comps == 1 || comps == 3 || comps == 4, "cannot decode image ", name,
                ": cannot handle ", comps, "-component JPEG");
}

// Pillow's cmyk2rgb on "CMYK;I" samples (Adobe JPEGs store CMYK inverted): with c = 255 - raw,
// r = clip(nk - nk * c / 255) where nk = 255 - k = raw k, and the division rounds as MULDIV255.
inline uint8_t inverted_cmyk_to_rgb(uint32_t raw_c, uint32_t raw_k) {
  const int nk = static_cast<int>(raw_k);
  const uint32_t t = (255 - raw_c) * raw_k + 128;
  const int v = nk - static_cast<int>(((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

// Refuses images past kMaxImagePixels before their pixels are allocated (checked on header sizes).
void check_pixel_limit(int64_t w, int64_t h, const std::string& name) {
  LINGBOT_CHECK(w * h <= kMaxImagePixels, "cannot decode image ", name, ": ", w, "x", h, " = ", w * h,
                " pixels exceeds the limit of ", kMaxImagePixels, " (decompression bomb guard, as PIL's)");
}

ImageU8 decode_jpeg(std::span<const uint8_t> file_bytes, const std::string& name, CorruptData* corrupt) {
  JpegSession s(file_bytes);
  read_jpeg_header(s, name);
  jpeg_decompress_struct& ci = s.cinfo();
  check_pixel_limit(ci.image_width, ci.image_height, name);
  const bool cmyk = ci.num_components == 4;
  // Grey goes straight to RGB: libjpeg replicates the sample, as PIL's convert("RGB") from "L".
  ci.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  const int w = static_cast<int>(ci.image_width), h = static_cast<int>(ci.image_height);
  ImageU8 img(w, h);
  if (!cmyk) {
    check_jpeg_status(s, s.decompress(img.rgb.data(), static_cast<size_t>(w) * 3), name);
  } else {
    std::vector<uint8_t> raw(static_cast<size_t>(w) * h * 4);
    check_jpeg_status(s, s.decompress(raw.data(), static_cast<size_t>(w) * 4), name);
    for (size_t i = 0, n = static_cast<size_t>(w) * h; i < n; ++i) {
      for (int c = 0; c < 3; ++c) img.rgb[i * 3 + c] = inverted_cmyk_to_rgb(raw[i * 4 + c], raw[i * 4 + 3]);
    }
  }
  if (corrupt) *corrupt = s.corrupt_data();
  const int orientation = jpeg_file_orientation(file_bytes);
  return orientation != 1 ? apply_exif_orientation(img, orientation) : img;
}

// ---- BMP: stb_image, told what check_bmp found ----
ImageU8 decode_bmp(std::span<const uint8_t> file_bytes, const std::string& name) {
  BmpCheck bmp = check_bmp(file_bytes);
  LINGBOT_CHECK(bmp.problem.empty(), "cannot decode image ", name, ": ", bmp.problem);
  const std::span<const uint8_t> bytes = bmp.as_windows_bmp.empty() ? file_bytes : std::span<const uint8_t>(bmp.as_windows_bmp);
  int w = 0, h = 0, comp = 0;
  LINGBOT_CHECK(stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &comp) != 0,
                "cannot decode image ", name, ": ", stbi_failure_reason());
  check_pixel_limit(w, h, name);
  std::unique_ptr<stbi_uc, StbFree> data(
      stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &comp, bmp.no_alpha ? 3 : 0));
  if (bmp.no_alpha) comp = 3;  // stb_image reports the file's channels, and converted to the 3 asked for
  LINGBOT_CHECK(data != nullptr, "cannot decode image ", name, ": ", stbi_failure_reason());
  LINGBOT_CHECK(comp >= 1 && comp <= 4, "cannot decode image ", name, ": unsupported channel count ", comp);
  // stb_image's expansion of an n-bit channel keeps the value in its top n bits (see check_bmp).
  std::array<std::array<uint8_t, 256>, 3> expand{};
  const bool pillow_16bit = bmp.channel_bits[0] != 0;
  for (int c = 0; c < 3 && pillow_16bit; ++c) {
    const int n = bmp.channel_bits[c];
    for (int o = 0; o < 256; ++o) expand[c][o] = static_cast<uint8_t>((o >> (8 - n)) * 255 / ((1 << n) - 1));
  }
  ImageU8 img(w, h);
  const uint8_t* src = data.get();
  const size_t n = static_cast<size_t>(w) * h;
  uint8_t* dst = img.rgb.data();
  for (size_t i = 0; i < n; ++i, src += comp, dst += 3) {
    if (comp <= 2) {
      dst[0] = dst[1] = dst[2] = src[0];
    } else if (comp == 4) {
      for (int c = 0; c < 3; ++c) dst[c] = composite_over_white(src[c], src[3]);
    } else if (pillow_16bit) {
      for (int c = 0; c < 3; ++c) dst[c] = expand[c][src[c]];
    } else {
      dst[0] = src[0];
      dst[1] = src[1];
      dst[2] = src[2];
    }
  }
  return img;
}

// Why a file that is not a JPEG, PNG or BMP (by its first bytes, whatever its name) is not read: the
// format when its signature is a common one, else its first bytes.
std::string unknown_format_problem(std::span<const uint8_t> b) {
  const std::string_view t(reinterpret_cast<const char*>(b.data()), b.size());
  const char* format = nullptr;
  if (t.size() >= 12 && t.starts_with("RIFF") && t.substr(8, 4) == "WEBP") {
    format = "a WebP image";
  } else if (t.starts_with("GIF87a") || t.starts_with("GIF89a")) {
    format = "a GIF image";
  } else if (t.starts_with(std::string_view("II*\0", 4)) || t.starts_with(std::string_view("MM\0*", 4))) {
    format = "a TIFF image";
  } else if (t.size() >= 12 && t.substr(4, 4) == "ftyp") {
    const std::string_view brand = t.substr(8, 4);
    format = brand == "avif" || brand == "avis" ? "an AVIF image"
             : brand == "heic" || brand == "heix" || brand == "mif1" || brand == "msf1" || brand == "hevc"
                 ? "a HEIF/HEIC image"
                 : "an MP4/QuickTime file";
  } else if (t.starts_with(std::string_view("\0\0\0\x0cjP  ", 8)) || t.starts_with("\xff\x4f\xff\x51")) {
    format = "a JPEG 2000 image";
  } else if (t.starts_with(std::string_view("\0\0\0\x0cJXL ", 8)) || t.starts_with("\xff\x0a")) {
    format = "a JPEG XL image";
  } else if (t.starts_with("8BPS")) {
    format = "a Photoshop document";
  } else if (t.starts_with(std::string_view("\0\0\1\0", 4))) {
    format = "a Windows icon";
  } else if (t.size() >= 3 && t[0] == 'P' && t[1] >= '1' && t[1] <= '7' && std::isspace(static_cast<unsigned char>(t[2]))) {
    format = "a Netpbm (PBM/PGM/PPM/PAM) image";
  }
  if (format)
    return detail::concat("it is ", format, " (by its contents), not a JPEG, PNG or BMP file, the formats frames are "
                          "read in: convert it to PNG or JPEG");
  std::string first;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 8); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, " %02x", b[i]);
    first += hex;
  }
  return detail::concat("not a JPEG, PNG or BMP file (by its contents: the file starts with bytes", first,
                        "), or damaged");
}

}  // namespace

int exif_orientation(std::span<const uint8_t> file_bytes) {
  if (is_jpeg(file_bytes)) return jpeg_file_orientation(file_bytes);
  if (is_png(file_bytes)) return png_chunk_facts(file_bytes).orientation;
  return 1;
}

ImageU8 decode_image(std::span<const uint8_t> file_bytes, const std::string& name, CorruptData* corrupt) {
  if (corrupt) *corrupt = {};
  LINGBOT_CHECK(!file_bytes.empty(), "cannot decode image ", name, ": file is empty");
  LINGBOT_CHECK(file_bytes.size() <= static_cast<size_t>(INT32_MAX), "cannot decode image ", name,
                ": file too large");
  if (is_jpeg(file_bytes)) return decode_jpeg(file_bytes, name, corrupt);
  if (is_png(file_bytes)) return decode_png(file_bytes, name);
  if (is_bmp(file_bytes)) return decode_bmp(file_bytes, name);
  throw Error(detail::concat("cannot decode image ", name, ": ", unknown_format_problem(file_bytes)));
}

ImageU8 load_image(const std::filesystem::path& path, CorruptData* corrupt) {
  if (corrupt) *corrupt = {};
  const std::vector<uint8_t> bytes = read_file_bytes(path, "image file");
  return decode_image(bytes, path.string(), corrupt);
}

ImageSize probe_image(std::span<const uint8_t> bytes, const std::string& name) {
  LINGBOT_CHECK(!bytes.empty(), "cannot decode image ", name, ": file is empty");
  LINGBOT_CHECK(bytes.size() <= static_cast<size_t>(INT32_MAX), "cannot decode image ", name, ": file too large");
  if (is_jpeg(bytes)) {
    JpegSession s(bytes);
    read_jpeg_header(s, name);
    const int w = static_cast<int>(s.cinfo().image_width), h = static_cast<int>(s.cinfo().image_height);
    check_pixel_limit(w, h, name);
    if (orientation_swaps_axes(jpeg_file_orientation(bytes))) return {h, w};
    return {w, h};
  }
  int w = 0, h = 0, comp = 0;
  int orientation = 1;
  if (is_png(bytes)) {
    // The chunk table first: libpng allocates a text chunk's declared length before finding the
    // file shorter (a 77-byte file declaring a 2 GB zTXt: fuzz_image, out of memory). A file cut
    // inside its image data still has a readable header: it fails at decode_png, at its turn.
    const PngChunkFacts f = png_chunk_facts(bytes);
    LINGBOT_CHECK(!f.error_in_header, "cannot decode image ", name, ": ", f.chunk_error);
    orientation = f.orientation;
    PngReadState st{bytes};
    PngPixels px;
    bool too_large = false;
    LINGBOT_CHECK(read_png(&st, &px, PngRead::HeaderOnly, kMaxImagePixels, &too_large), "cannot decode image ", name, ": ",
                  st.message[0] ? st.message : "out of memory");
    w = static_cast<int>(std::min<uint32_t>(px.width, INT32_MAX));
    h = static_cast<int>(std::min<uint32_t>(px.height, INT32_MAX));
    check_pixel_limit(px.width, px.height, name);
  } else if (is_bmp(bytes)) {  // refused for what decode_image refuses it for (an RLE file: its reason)
    const BmpCheck bmp = check_bmp(bytes);
    LINGBOT_CHECK(bmp.problem.empty(), "cannot decode image ", name, ": ", bmp.problem);
    const std::span<const uint8_t> b = bmp.as_windows_bmp.empty() ? bytes : std::span<const uint8_t>(bmp.as_windows_bmp);
    LINGBOT_CHECK(stbi_info_from_memory(b.data(), static_cast<int>(b.size()), &w, &h, &comp) != 0,
                  "cannot decode image ", name, ": ", stbi_failure_reason());
    check_pixel_limit(w, h, name);
  } else {
    throw Error(detail::concat("cannot decode image ", name, ": ", unknown_format_problem(bytes)));
  }
  if (orientation_swaps_axes(orientation)) return {h, w};
  return {w, h};
}

ImageSize probe_image_size(const std::filesystem::path& path) {
  return probe_image(read_file_bytes(path, "image file"), path.string());
}

namespace {

// The visible (not hidden) files directly inside `dir` with their lower-case extensions.
std::vector<std::pair<std::filesystem::path, std::string>> folder_files(const std::filesystem::path& dir) {
  std::error_code ec;
  check_path_exists(dir, "image folder");
  LINGBOT_CHECK(std::filesystem::is_directory(dir, ec), "not a folder: ", dir.string());
  std::vector<std::pair<std::filesystem::path, std::string>> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    // Hidden files (macOS's "._a.png" AppleDouble companions, editors' ".a.png.swp") are not frames;
    // upstream's glob skips them too.
    if (entry.is_directory(ec) || entry.path().filename().string().starts_with(".")) continue;
    files.emplace_back(entry.path(), lower_extension(entry.path()));
  }
  return files;
}

bool is_frame_extension(const std::string& ext) {
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp";
}

}  // namespace

bool is_image_file_name(const std::filesystem::path& path) { return is_frame_extension(lower_extension(path)); }

std::vector<std::filesystem::path> list_image_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (auto& [path, ext] : folder_files(dir)) {
    if (!is_frame_extension(ext)) continue;
    // Reading a FIFO would wait for a writer forever (found by a probe: a run stuck before its first
    // frame). A broken link stays in the list: reading it names it ("image file not found").
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(path, ec);
    LINGBOT_CHECK(ec || std::filesystem::is_regular_file(st) || !std::filesystem::exists(st), "image file ",
                  path.string(), " is not a regular file (a FIFO, socket or device is not a frame)");
    files.push_back(std::move(path));
  }
  if (files.empty()) {
    const std::string unread = unread_image_files_notice(dir);
    throw Error(detail::concat("no images (.jpg, .jpeg, .png, .bmp) in ", dir.string(), unread.empty() ? "" : "; ", unread));
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.filename().string() < b.filename().string(); });
  return files;
}

namespace {
// Whether `a` comes after `b` when runs of digits compare as numbers ("img10" after "img2"). Digits
// after a decimal point ("1305031102.2" vs "1305031102.175304", as TUM names frames) are a fraction,
// which byte order already sorts.
bool after_by_numbers(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      std::string_view na(a.data() + i, ei - i), nb(b.data() + j, ej - j);
      const bool fraction = i >= 2 && a[i - 1] == '.' && digit(a[i - 2]);  // so is b's: all before compared equal
      if (fraction) {
        if (na != nb) return na > nb;
        i = ei, j = ej;
        continue;
      }
      while (na.size() > 1 && na.front() == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb.front() == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() > nb.size();
      if (na != nb) return na > nb;
      i = ei, j = ej;
    } else {
      if (a[i] != b[j]) return a[i] > b[j];
      ++i, ++j;
    }
  }
  return i < a.size() && j >= b.size();
}


// The name with every run of digits as one '#': names of one sequence share it ("img#.png").
std::string digits_as_one(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool digit = c >= '0' && c <= '9';
    if (!digit) out += c;
    else if (out.empty() || out.back() != '#') out += '#';
  }
  return out;
}
}  // namespace

std::string grey16_png_notice(const std::vector<std::filesystem::path>& files) {
  static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  size_t count = 0;
  std::string first;
  for (const std::filesystem::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    unsigned char h[26];  // signature, IHDR's length and type, width, height, bit depth, colour type
    if (!in.read(reinterpret_cast<char*>(h), sizeof h)) continue;  // decoding it says what is wrong
    if (std::memcmp(h, kSignature, 8) != 0 || std::memcmp(h + 12, "IHDR", 4) != 0) continue;
    if (h[24] == 16 && h[25] == PNG_COLOR_TYPE_GRAY && count++ == 0) first = file.filename().string();
  }
  if (count == 0) return "";
  return detail::concat(count, count == 1 ? " frame is a 16-bit greyscale PNG (" : " frames are 16-bit greyscale PNGs (",
                        first, count > 1 ? ", ...): their" : "): its",
                        " values above 255 become 255, as Pillow converts such a PNG to RGB and upstream reads it, so "
                        "it comes out nearly white: convert to 8 bits first (e.g. ffmpeg -i in.png -pix_fmt gray out.png)");
}

std::string name_order_notice(const std::vector<std::filesystem::path>& sorted_files) {
  // Each name against the previous one of its pattern, so interleaved sequences (stereo pairs:
  // frame_1_left, frame_1_right, ...) are compared within themselves.
  std::map<std::string, std::string> previous;
  for (const std::filesystem::path& file : sorted_files) {
    const std::string b = file.filename().string();
    std::string& a = previous[digits_as_one(b)];
    if (!a.empty() && after_by_numbers(a, b))
      return detail::concat("frames are read in byte order of their names, as upstream sorts them: ", a,
                            " comes before ", b, ". If the numbers count the capture order, zero-pad them to one "
                            "width (img002.png, img010.png)");
    a = b;
  }
  return "";
}

std::map<std::string, int64_t> unread_image_files(const std::filesystem::path& dir) {
  static constexpr std::string_view kOtherImages[] = {".webp", ".tif", ".tiff", ".jpe", ".jfif", ".gif",
                                                      ".heic", ".heif", ".avif", ".jp2", ".ppm", ".pgm",
                                                      ".pnm",  ".tga", ".exr",  ".dng"};
  std::map<std::string, int64_t> counts;
  for (const auto& [path, ext] : folder_files(dir))
    if (std::find(std::begin(kOtherImages), std::end(kOtherImages), ext) != std::end(kOtherImages)) ++counts[ext];
  return counts;
}

std::string unread_image_files_notice(const std::filesystem::path& dir) {
  const std::map<std::string, int64_t> unread = unread_image_files(dir);
  if (unread.empty()) return "";
  int64_t total = 0;
  std::string kinds;
  for (const auto& [ext, n] : unread) {
    total += n;
    kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + ext;
  }
  return detail::concat(total, " image file", total == 1 ? "" : "s", " of another format in the folder ",
                        total == 1 ? "is" : "are", " not read (", kinds, "): frames are .jpg, .jpeg, .png and .bmp files");
}

}  // namespace lingbot::io
