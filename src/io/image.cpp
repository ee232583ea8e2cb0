#include "io/image.h"

#include <algorithm>
#include <map>
#include <cmath>
#include <cctype>
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE and size_t without including their headers
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string_view>

#include <jpeglib.h>
#include <jerror.h>  // the warning codes (JWRN_*)
#include <png.h>

#include "core/error.h"
#include "io/file_util.h"

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

// Orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block; 1 when absent or malformed.
int tiff_orientation(std::span<const uint8_t> tiff) {
  if (tiff.size() < 8) return 1;
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little = false;
  } else {
    return 1;
  }
  auto u16 = [&](size_t off) -> uint32_t {
    return little ? (tiff[off] | (tiff[off + 1] << 8)) : ((tiff[off] << 8) | tiff[off + 1]);
  };
  auto u32 = [&](size_t off) -> uint32_t {
    return little ? (u16(off) | (u16(off + 2) << 16)) : ((u16(off) << 16) | u16(off + 2));
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd + 2 > tiff.size()) return 1;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + i * 12;
    if (e + 12 > tiff.size()) return 1;
    if (u16(e) != 0x0112) continue;
    const uint32_t type = u16(e + 2);
    uint32_t value = 0;
    if (type == 3) {        // SHORT
      value = u16(e + 8);
    } else if (type == 4) { // LONG (non-standard but seen in the wild)
      value = u32(e + 8);
    } else {
      return 1;
    }
    return (value >= 1 && value <= 8) ? static_cast<int>(value) : 1;
  }
  return 1;
}

bool is_png(std::span<const uint8_t> b) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  return b.size() >= 8 && std::memcmp(b.data(), sig, 8) == 0;
}
bool is_jpeg(std::span<const uint8_t> b) { return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8; }

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

int jpeg_orientation(std::span<const uint8_t> b) {
  size_t pos = 2;
  while (pos + 4 <= b.size()) {
    if (b[pos] != 0xff) return 1;
    const uint8_t marker = b[pos + 1];
    if (marker == 0xff) { ++pos; continue; }                 // fill byte
    if (marker == 0xd9 || marker == 0xda) return 1;          // end of image / start of scan
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) { pos += 2; continue; }
    const size_t len = (size_t{b[pos + 2]} << 8) | b[pos + 3];
    if (len < 2 || pos + 2 + len > b.size()) return 1;
    const uint8_t* seg = b.data() + pos + 4;
    const size_t seg_len = len - 2;
    if (marker == 0xe1 && seg_len >= 6 && std::memcmp(seg, "Exif\0\0", 6) == 0) {
      return tiff_orientation(std::span<const uint8_t>(seg + 6, seg_len - 6));
    }
    pos += 2 + len;
  }
  return 1;
}

// What libpng does not tell: the eXIf chunk's orientation (PIL applies it), and a chunk that claims
// more bytes than the file has.
struct PngFacts {
  int orientation = 1;
  std::string chunk_error;  // a chunk whose declared length runs past the end of the file
};
PngFacts png_facts(std::span<const uint8_t> b) {
  PngFacts f;
  size_t pos = 8;
  while (pos + 12 <= b.size()) {
    const uint32_t len = be32(b.data() + pos);
    const uint8_t* type = b.data() + pos + 4;
    if (len > b.size() - pos - 12) {
      // A decoder would read towards the declared length before finding the data missing (stb_image
      // grew its buffer to gigabytes for a 100-byte file, found by fuzz_image). Refuse it here.
      f.chunk_error = detail::concat("PNG chunk '", printable_excerpt(std::string_view(reinterpret_cast<const char*>(type), 4)),
                                     "' at byte ", pos, " declares ", len, " data bytes but the file has only ",
                                     b.size() - pos - 12, " left (truncated or corrupt)");
      break;
    }
    const uint8_t* data = b.data() + pos + 8;
    if (std::memcmp(type, "eXIf", 4) == 0) {
      f.orientation = tiff_orientation(std::span<const uint8_t>(data, len));
    }
    // An eXIf chunk may follow IDAT (PIL sees it once the image is loaded, which exif_transpose
    // does first), so scan up to IEND.
    if (std::memcmp(type, "IEND", 4) == 0) break;
    pos += 12 + size_t{len};
  }
  return f;
}

bool is_bmp(std::span<const uint8_t> b) { return b.size() >= 2 && b[0] == 'B' && b[1] == 'M'; }

// What stb_image must be told of a BMP before it reads it. `problem`: pixel rows that run past the end
// of the file (stb_image reads the missing bytes as zeros: a 200-byte file decoded as 2568 x 1286,
// found by fuzz_image; Pillow refuses it, "image file is truncated") or a compression stb_image does
// not decode; "" = fine, or a header layout this check does not know (stb_image then decides).
// `padding_byte`: 32 bits per pixel without bitfields (BI_RGB) is B, G, R and an unused byte, which
// Pillow reads as BGRX (no alpha); stb_image takes it for alpha, so a writer's junk there would
// composite the picture towards white.
struct BmpCheck {
  std::string problem;
  bool padding_byte = false;
};
BmpCheck check_bmp(std::span<const uint8_t> b) {
  auto le16 = [&](size_t o) { return uint32_t{b[o]} | (uint32_t{b[o + 1]} << 8); };
  auto le32 = [&](size_t o) { return le16(o) | (le16(o + 2) << 16); };
  if (b.size() < 18) return {detail::concat("BMP header is truncated (", b.size(), " bytes)")};
  const uint32_t header = le32(14);
  if (header != 12 && header != 40 && header != 56 && header != 108 && header != 124) return {};
  if (b.size() < 14 + uint64_t{header})
    return {detail::concat("BMP header is truncated (", b.size(), " bytes, its info header needs ", 14 + header, ")")};
  const uint64_t offset = le32(10);
  uint64_t w = 0, h = 0, bpp = 0, compression = 0;
  if (header == 12) {  // BITMAPCOREHEADER
    w = le16(18), h = le16(20), bpp = le16(24);
  } else {
    w = static_cast<uint64_t>(std::abs(static_cast<int64_t>(static_cast<int32_t>(le32(18)))));
    h = static_cast<uint64_t>(std::abs(static_cast<int64_t>(static_cast<int32_t>(le32(22)))));  // < 0: top-down
    bpp = le16(28), compression = le32(30);
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
    return {detail::concat("BMP with ", bpp, " bits per pixel is not supported")};
  // stb_image refuses only RLE (1, 2) and decodes any other value as uncompressed rows.
  if (compression != 0 && compression != 3)
    return {detail::concat("BMP compression ", compression, " is not supported (uncompressed and bitfields only)")};
  const uint64_t row_bytes = (w * bpp + 31) / 32 * 4;
  const uint64_t needed = offset + row_bytes * h;
  if (needed <= b.size()) return {"", bpp == 32 && compression == 0};
  return {detail::concat("BMP pixel data is truncated: ", w, "x", h, " at ", bpp, " bits per pixel needs ", needed,
                         " bytes, the file has ", b.size())};
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
// clipped to 255), tRNS transparency ignored, the alpha of RGBA kept for the white composite and
// that of grey+alpha dropped.

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

// Reads the header (into `out`), then, when `rows` is true and the size is within `max_pixels`, every
// row and the end of the file. Kept free of C++ objects with destructors and of throwing calls
// between setjmp and the libpng calls (libpng reports errors by longjmp). Returns false with the
// message in `st`.
bool read_png(PngReadState* st, PngPixels* out, bool rows, int64_t max_pixels, bool* too_large) {
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
  png_read_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  out->color_type = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  *too_large = static_cast<int64_t>(out->width) * out->height > max_pixels;
  if (!rows || *too_large) {
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
  const PngFacts f = png_facts(file_bytes);
  LINGBOT_CHECK(f.chunk_error.empty(), "cannot decode image ", name, ": ", f.chunk_error);
  PngReadState st{file_bytes};
  PngPixels px;
  bool too_large = false;
  // A file that ends after its last row (no IEND) is accepted, as PIL does; one whose stream
  // is damaged before that is not.
  const bool ok = read_png(&st, &px, true, kMaxImagePixels, &too_large) || (st.rows_done && st.truncated);
  LINGBOT_CHECK(ok, "cannot decode image ", name, ": ", st.message[0] ? st.message : "out of memory");
  if (too_large) check_pixel_limit(px.width, px.height, name);
  ImageU8 img(static_cast<int>(px.width), static_cast<int>(px.height));
  const size_t n = static_cast<size_t>(px.width) * px.height;
  const int c = px.channels;
  const bool composite = c == 4 && px.color_type == PNG_COLOR_TYPE_RGB_ALPHA;  // PIL mode "RGBA" only
  for (size_t i = 0; i < n; ++i) {
    uint8_t* dst = img.rgb.data() + i * 3;
    if (px.bytes_per_sample == 2) {  // PIL "I;16" -> "RGB": values above 255 become 255
      uint16_t v;
      std::memcpy(&v, px.pixels + i * 2, 2);
      dst[0] = dst[1] = dst[2] = static_cast<uint8_t>(std::min<uint16_t>(v, 255));
      continue;
    }
    const uint8_t* src = px.pixels + i * static_cast<size_t>(c);
    if (c <= 2) {
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
  const int orientation = jpeg_orientation(file_bytes);
  return orientation != 1 ? apply_exif_orientation(img, orientation) : img;
}

}  // namespace

int exif_orientation(std::span<const uint8_t> file_bytes) {
  if (is_jpeg(file_bytes)) return jpeg_orientation(file_bytes);
  if (is_png(file_bytes)) return png_facts(file_bytes).orientation;
  return 1;
}

ImageU8 decode_image(std::span<const uint8_t> file_bytes, const std::string& name, CorruptData* corrupt) {
  if (corrupt) *corrupt = {};
  LINGBOT_CHECK(!file_bytes.empty(), "cannot decode image ", name, ": file is empty");
  LINGBOT_CHECK(file_bytes.size() <= static_cast<size_t>(INT32_MAX), "cannot decode image ", name,
                ": file too large");
  if (is_jpeg(file_bytes)) return decode_jpeg(file_bytes, name, corrupt);
  if (is_png(file_bytes)) return decode_png(file_bytes, name);
  int w = 0, h = 0, comp = 0;
  if (stbi_info_from_memory(file_bytes.data(), static_cast<int>(file_bytes.size()), &w, &h, &comp) != 0)
    check_pixel_limit(w, h, name);
  BmpCheck bmp;
  if (is_bmp(file_bytes)) {
    bmp = check_bmp(file_bytes);
    LINGBOT_CHECK(bmp.problem.empty(), "cannot decode image ", name, ": ", bmp.problem);
  }
  std::unique_ptr<stbi_uc, StbFree> data(stbi_load_from_memory(
      file_bytes.data(), static_cast<int>(file_bytes.size()), &w, &h, &comp, bmp.padding_byte ? 3 : 0));
  if (bmp.padding_byte) comp = 3;  // stb_image reports the file's 4 channels, and converted to the 3 asked for
  LINGBOT_CHECK(data != nullptr, "cannot decode image ", name, ": ", stbi_failure_reason());
  LINGBOT_CHECK(comp >= 1 && comp <= 4, "cannot decode image ", name, ": unsupported channel count ",
                comp);
  ImageU8 img(w, h);
  const uint8_t* src = data.get();
  const size_t n = static_cast<size_t>(w) * h;
  uint8_t* dst = img.rgb.data();
  for (size_t i = 0; i < n; ++i, src += comp, dst += 3) {
    if (comp <= 2) {
      dst[0] = dst[1] = dst[2] = src[0];
    } else if (comp == 4) {
      for (int c = 0; c < 3; ++c) dst[c] = composite_over_white(src[c], src[3]);
    } else {
      dst[0] = src[0];
      dst[1] = src[1];
      dst[2] = src[2];
    }
  }
  return img;
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
    if (orientation_swaps_axes(jpeg_orientation(bytes))) return {h, w};
    return {w, h};
  }
  int w = 0, h = 0, comp = 0;
  if (is_png(bytes)) {
    PngReadState st{bytes};
    PngPixels px;
    bool too_large = false;
    LINGBOT_CHECK(read_png(&st, &px, false, kMaxImagePixels, &too_large), "cannot decode image ", name, ": ",
                  st.message[0] ? st.message : "out of memory");
    w = static_cast<int>(std::min<uint32_t>(px.width, INT32_MAX));
    h = static_cast<int>(std::min<uint32_t>(px.height, INT32_MAX));
    check_pixel_limit(px.width, px.height, name);
  } else {
    const int ok = stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &comp);
    LINGBOT_CHECK(ok != 0, "cannot decode image ", name, ": ", stbi_failure_reason());
    check_pixel_limit(w, h, name);
  }
  if (orientation_swaps_axes(exif_orientation(bytes))) return {h, w};
  return {w, h};
}

ImageSize probe_image_size(const std::filesystem::path& path) {
  return probe_image(read_file_bytes(path, "image file"), path.string());
}

namespace {

std::string lower_extension(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

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
