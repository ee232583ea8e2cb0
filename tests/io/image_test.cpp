// Image decoding: formats, EXIF orientation, alpha compositing, grey, and error messages.
#include <gtest/gtest.h>

#include "test_errors.h"
#include "test_temp_dir.h"
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/image.h"
#include "io/png.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb/stb_image_write.h>
#include "test_files.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

using namespace lingbot;
using namespace lingbot::io;

namespace {

using lingbot_test::TempDir;

void append_bytes(std::vector<uint8_t>* out, const void* data, int size) {
  const auto* p = static_cast<const uint8_t*>(data);
  out->insert(out->end(), p, p + size);
}
void stbi_to_vector(void* ctx, void* data, int size) {
  append_bytes(static_cast<std::vector<uint8_t>*>(ctx), data, size);
}

std::vector<uint8_t> encode_png(int w, int h, int comp, const std::vector<uint8_t>& px) {
  std::vector<uint8_t> out;
  stbi_write_png_to_func(stbi_to_vector, &out, w, h, comp, px.data(), w * comp);
  return out;
}

using lingbot_test::write_file;

// A 3x2 image with distinct pixels: value (x, y) = {10*x + 100*y, 7, 200}.
ImageU8 pattern() {
  ImageU8 img(3, 2);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x) {
      uint8_t* p = img.pixel(x, y);
      p[0] = static_cast<uint8_t>(10 * x + 100 * y);
      p[1] = 7;
      p[2] = 200;
    }
  return img;
}

// Minimal TIFF block with one IFD0 entry: Orientation (SHORT) = value.
std::vector<uint8_t> exif_tiff(int value, bool big_endian) {
  std::vector<uint8_t> t;
  if (big_endian) {
    t = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1,
         0, static_cast<uint8_t>(value), 0, 0, 0, 0, 0, 0};
  } else {
    t = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0,
         static_cast<uint8_t>(value), 0, 0, 0, 0, 0, 0, 0};
  }
  return t;
}

// A JPEG (stb encoder, quality 100) with an APP1 Exif segment inserted after SOI.
std::vector<uint8_t> jpeg_with_orientation(const ImageU8& img, int orientation, bool big_endian) {
  std::vector<uint8_t> jpg;
  stbi_write_jpg_to_func(stbi_to_vector, &jpg, img.width, img.height, 3, img.rgb.data(), 100);
  std::vector<uint8_t> app1 = {'E', 'x', 'i', 'f', 0, 0};
  const auto tiff = exif_tiff(orientation, big_endian);
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  const size_t len = app1.size() + 2;
  std::vector<uint8_t> seg = {0xff, 0xe1, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len & 0xff)};
  seg.insert(seg.end(), app1.begin(), app1.end());
  jpg.insert(jpg.begin() + 2, seg.begin(), seg.end());
  return jpg;
}

// What probe_image (run's canvas pass: headers only) or decode_image says of `bytes`; "" when it takes them.
std::string refusal(const std::vector<uint8_t>& bytes, const std::string& name, bool probe) {
  try {
    if (probe) {
      (void)probe_image(bytes, name);
    } else {
      (void)decode_image(bytes, name);
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Image, TransposesMatchPilDefinitions) {
  const ImageU8 img = pattern();  // 3 wide, 2 high
  const ImageU8 cw = transpose(img, Transpose::Rotate270);  // clockwise
  ASSERT_EQ(cw.width, 2);
  ASSERT_EQ(cw.height, 3);
  // Clockwise: the old bottom-left pixel (0,1) becomes the new top-left.
  EXPECT_EQ(cw.pixel(0, 0)[0], img.pixel(0, 1)[0]);
  EXPECT_EQ(cw.pixel(1, 0)[0], img.pixel(0, 0)[0]);
  const ImageU8 ccw = transpose(img, Transpose::Rotate90);
  EXPECT_EQ(ccw.pixel(0, 0)[0], img.pixel(2, 0)[0]);
  EXPECT_EQ(transpose(img, Transpose::Transpose).pixel(1, 2)[0], img.pixel(2, 1)[0]);
  EXPECT_EQ(transpose(img, Transpose::Transverse).pixel(0, 0)[0], img.pixel(2, 1)[0]);
  EXPECT_EQ(transpose(img, Transpose::FlipLeftRight).pixel(0, 1)[0], img.pixel(2, 1)[0]);
  EXPECT_EQ(transpose(img, Transpose::FlipTopBottom).pixel(2, 0)[0], img.pixel(2, 1)[0]);
  EXPECT_EQ(transpose(transpose(img, Transpose::Rotate180), Transpose::Rotate180).rgb, img.rgb);
  EXPECT_EQ(transpose(cw, Transpose::Rotate90).rgb, img.rgb);
}

TEST(Image, PngRgbRoundTripIsExact) {
  TempDir dir;
  const ImageU8 img = pattern();
  write_file(dir.path / "a.png", encode_png(3, 2, 3, img.rgb));
  const ImageU8 got = load_image(dir.path / "a.png");
  EXPECT_EQ(got.width, 3);
  EXPECT_EQ(got.height, 2);
  EXPECT_EQ(got.rgb, img.rgb);
  EXPECT_EQ(probe_image_size(dir.path / "a.png"), (ImageSize{3, 2}));
}

TEST(Image, GreyIsReplicatedAndGreyAlphaDropsAlpha) {
  const std::vector<uint8_t> grey = {0, 50, 255, 128};
  ImageU8 g = decode_image(encode_png(2, 2, 1, grey), "grey.png");
  EXPECT_EQ(g.rgb, (std::vector<uint8_t>{0, 0, 0, 50, 50, 50, 255, 255, 255, 128, 128, 128}));
  // PIL opens grey+alpha as "LA"; convert("RGB") drops alpha without compositing.
  const std::vector<uint8_t> la = {10, 0, 20, 255};
  ImageU8 l = decode_image(encode_png(2, 1, 2, la), "la.png");
  EXPECT_EQ(l.rgb, (std::vector<uint8_t>{10, 10, 10, 20, 20, 20}));
}

TEST(Image, RgbaIsCompositedOnWhiteLikePillow) {
  // Expected values computed with Pillow's integer alpha_composite formula over (255,255,255,255).
  const std::vector<uint8_t> rgba = {0, 0, 0, 0,        // transparent -> white
                                     0, 0, 0, 255,      // opaque black stays black
                                     0, 100, 200, 128,  // half
                                     10, 20, 30, 1};
  const ImageU8 img = decode_image(encode_png(4, 1, 4, rgba), "rgba.png");
  EXPECT_EQ(img.rgb, (std::vector<uint8_t>{255, 255, 255, 0, 0, 0, 127, 177, 227, 254, 254, 254}));
}

TEST(Image, JpegExifOrientationIsApplied) {
  // Large flat blocks so JPEG loss does not blur the check: left half dark, right half bright.
  ImageU8 img(32, 16);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 32; ++x) std::memset(img.pixel(x, y), x < 16 ? 20 : 230, 3);
  for (bool be : {false, true}) {
    const auto jpg6 = jpeg_with_orientation(img, 6, be);
    EXPECT_EQ(exif_orientation(jpg6), 6);
    const ImageU8 r = decode_image(jpg6, "o6.jpg");  // rotate 90 degrees clockwise
    ASSERT_EQ(r.width, 16);
    ASSERT_EQ(r.height, 32);
    EXPECT_LT(r.pixel(8, 4)[0], 60);    // top: old left (dark)
    EXPECT_GT(r.pixel(8, 28)[0], 190);  // bottom: old right (bright)
  }
  const ImageU8 r8 = decode_image(jpeg_with_orientation(img, 8, false), "o8.jpg");  // counter-clockwise
  ASSERT_EQ(r8.width, 16);
  EXPECT_GT(r8.pixel(8, 4)[0], 190);
  const ImageU8 r1 = decode_image(jpeg_with_orientation(img, 1, false), "o1.jpg");
  EXPECT_EQ(r1.width, 32);
  TempDir dir;
  write_file(dir.path / "o6.jpg", jpeg_with_orientation(img, 6, false));
  EXPECT_EQ(probe_image_size(dir.path / "o6.jpg"), (ImageSize{16, 32}));
}

namespace {
// `png` with an eXIf chunk holding Orientation = `orientation`, inserted right after IHDR (8 + 25 bytes)
// or, `after_idat`, right before IEND (libpng writes it there when it comes after the rows; PIL reads both).
std::vector<uint8_t> png_with_orientation(std::vector<uint8_t> png, int orientation, bool after_idat = false) {
  const auto tiff = exif_tiff(orientation, false);
  std::vector<uint8_t> chunk = {0, 0, 0, static_cast<uint8_t>(tiff.size()), 'e', 'X', 'I', 'f'};
  chunk.insert(chunk.end(), tiff.begin(), tiff.end());
  const uint32_t crc = static_cast<uint32_t>(::crc32(0, chunk.data() + 4, static_cast<unsigned>(chunk.size() - 4)));
  chunk.insert(chunk.end(), {static_cast<uint8_t>(crc >> 24), static_cast<uint8_t>(crc >> 16),
                             static_cast<uint8_t>(crc >> 8), static_cast<uint8_t>(crc)});
  png.insert(after_idat ? png.end() - 12 : png.begin() + 33, chunk.begin(), chunk.end());
  return png;
}
}  // namespace

TEST(Image, PngExifChunkOrientationIsApplied) {
  const ImageU8 img = pattern();
  const std::vector<uint8_t> png = png_with_orientation(encode_png(3, 2, 3, img.rgb), 3);  // rotate 180
  EXPECT_EQ(exif_orientation(png), 3);
  EXPECT_EQ(decode_image(png, "x.png").rgb, transpose(img, Transpose::Rotate180).rgb);
}

// run sizes the canvas from headers alone (probe_image) before decoding any frame: for every EXIF
// orientation, JPEG and PNG (its eXIf chunk before or after the image data), the picture is turned as
// the orientation says and the probed size is the decoded one (5 to 8 swap the sides).
TEST(Image, ProbedSizeIsTheDecodedSizeForEveryOrientation) {
  ImageU8 img(6, 4);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> png = encode_png(6, 4, 3, img.rgb);
  for (int orientation = 1; orientation <= 8; ++orientation) {
    SCOPED_TRACE(orientation);
    const bool swapped = orientation >= 5;
    for (const auto& [name, bytes] : {std::pair{std::string("o.jpg"), jpeg_with_orientation(img, orientation, false)},
                                      std::pair{std::string("o.png"), png_with_orientation(png, orientation)},
                                      std::pair{std::string("late.png"), png_with_orientation(png, orientation, true)}}) {
      SCOPED_TRACE(name);
      const ImageU8 decoded = decode_image(bytes, name);
      EXPECT_EQ(decoded.width, swapped ? 4 : 6);
      EXPECT_EQ(probe_image(bytes, name), (ImageSize{decoded.width, decoded.height}));
      if (name != "o.jpg") {  // lossless
        EXPECT_EQ(decoded.rgb, apply_exif_orientation(img, orientation).rgb);
      }
    }
  }
}

// Fill bytes (0xFF) before a marker are legal (libjpeg and PIL skip them): the Exif segment after them counts.
TEST(Image, JpegFillBytesBeforeTheExifSegmentKeepItsOrientation) {
  std::vector<uint8_t> jpg = jpeg_with_orientation(ImageU8(32, 16), 6, false);
  jpg.insert(jpg.begin() + 2, {0xff, 0xff});  // SOI, FF FF, then FF E1 ...
  EXPECT_EQ(exif_orientation(jpg), 6);
  EXPECT_EQ(decode_image(jpg, "fill.jpg").width, 16);
}

namespace {
// A JPEG (no EXIF) with an APP1 XMP packet whose tiff:Orientation is `value`, written as `form`
// (attribute or element); with `exif_orientation` > 0, an EXIF segment before it too.
std::vector<uint8_t> jpeg_with_xmp(const ImageU8& img, const std::string& form, int exif_orientation = 0) {
  std::vector<uint8_t> jpg = exif_orientation > 0 ? jpeg_with_orientation(img, exif_orientation, false) : [&] {
    std::vector<uint8_t> plain;
    stbi_write_jpg_to_func(stbi_to_vector, &plain, img.width, img.height, 3, img.rgb.data(), 100);
    return plain;
  }();
  const std::string packet = std::string("http://ns.adobe.com/xap/1.0/") + '\0' +
                             "<x:xmpmeta><rdf:RDF><rdf:Description xmlns:tiff=\"http://ns.adobe.com/tiff/1.0/\"" + form +
                             "</rdf:Description></rdf:RDF></x:xmpmeta>";
  const size_t len = packet.size() + 2;
  std::vector<uint8_t> seg = {0xff, 0xe1, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len & 0xff)};
  seg.insert(seg.end(), packet.begin(), packet.end());
  const size_t after_exif = exif_orientation > 0 ? 2 + 4 + (size_t{jpg[4]} << 8 | jpg[5]) - 2 : 2;
  jpg.insert(jpg.begin() + static_cast<std::ptrdiff_t>(after_exif), seg.begin(), seg.end());
  return jpg;
}
}  // namespace

// A JPEG's XMP orientation counts when its EXIF has no Orientation tag, as in current Pillow (11 and
// later keep the APP1 XMP packet and getexif reads tiff:Orientation from it; Debian 12's Pillow 9.4,
// which the Python tests compare with, reads it from PNGs only, so this is checked here).
TEST(Image, JpegXmpOrientationCountsWithoutAnExifTag) {
  ImageU8 img(32, 16);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 32; ++x) std::memset(img.pixel(x, y), x < 16 ? 20 : 230, 3);
  const std::vector<uint8_t> attr = jpeg_with_xmp(img, " tiff:Orientation=\"6\">");
  EXPECT_EQ(exif_orientation(attr), 6);
  const ImageU8 turned = decode_image(attr, "xmp.jpg");
  ASSERT_EQ(turned.width, 16);
  EXPECT_LT(turned.pixel(8, 4)[0], 60);  // clockwise: the dark left half is on top
  EXPECT_EQ(probe_image(attr, "xmp.jpg"), (ImageSize{16, 32}));
  EXPECT_EQ(exif_orientation(jpeg_with_xmp(img, "><tiff:Orientation>8</tiff:Orientation>")), 8);
  EXPECT_EQ(exif_orientation(jpeg_with_xmp(img, " tiff:Orientation=\"9\">")), 1);   // not an orientation
  EXPECT_EQ(exif_orientation(jpeg_with_xmp(img, " tiff:Orientation='6'>")), 1);      // Pillow's pattern wants "
  EXPECT_EQ(exif_orientation(jpeg_with_xmp(img, " tiff:Orientation=\"6\">", 1)), 1);  // an EXIF tag, even 1, wins
  EXPECT_EQ(exif_orientation(jpeg_with_xmp(img, " tiff:Orientation=\"6\">", 3)), 3);
}

// Other formats are named, when decoded and when probed (run sizes the canvas first).
TEST(Image, OtherFormatsAreNamedByTheirContents) {
  const std::pair<std::string, std::string> files[] = {
      {std::string("RIFF\x10\0\0\0WEBPVP8 ", 16), "a WebP image"},
      {"GIF89a\x01\0\x01\0", "a GIF image"},
      {std::string("\0\0\0\x18" "ftypheic\0\0\0\0", 16), "a HEIF/HEIC image"},
      {std::string("\0\0\0\x1c" "ftypavif\0\0\0\0", 16), "an AVIF image"},
      {std::string("II*\0\x08\0\0\0", 8), "a TIFF image"},
      {"P6\n2 2\n255\n", "a Netpbm (PBM/PGM/PPM/PAM) image"}};
  for (const auto& [bytes, what] : files) {
    const std::vector<uint8_t> b(bytes.begin(), bytes.end());
    for (const bool probe : {false, true})
      EXPECT_EQ(refusal(b, "x.jpg", probe), "cannot decode image x.jpg: it is " + what +
                                                " (by its contents), not a JPEG, PNG or BMP file, the formats frames "
                                                "are read in: convert it to PNG or JPEG")
          << (probe ? "probe" : "decode");
  }
}

// Bytes that are not a marker between segments are skipped, as Pillow skips them: the Exif segment
// after them counts (the scan stopped there).
TEST(Image, JunkBetweenJpegSegmentsIsSkippedAsPillowSkipsIt) {
  std::vector<uint8_t> jpg = jpeg_with_orientation(ImageU8(32, 16), 6, false);
  jpg.insert(jpg.begin() + 2, {0x00, 0x13, 0x37});  // SOI, junk, then FF E1 ...
  EXPECT_EQ(exif_orientation(jpg), 6);
}

TEST(Image, MalformedExifIsIgnored) {
  std::vector<uint8_t> junk = {0xff, 0xd8, 0xff, 0xe1, 0x00, 0x08, 'E', 'x', 'i', 'f', 0, 0, 0xff, 0xd9};
  EXPECT_EQ(exif_orientation(junk), 1);
  junk = {0xff, 0xd8, 0xff, 0xe1, 0x7f, 0xff};  // segment longer than the file
  EXPECT_EQ(exif_orientation(junk), 1);
}

TEST(Image, ErrorsNameTheFile) {
  TempDir dir;
  const auto missing = dir.path / "missing.png";
  try {
    load_image(missing);
    FAIL();
  } catch (const FileNotFound& e) {
    EXPECT_EQ(std::string(e.what()), "image file not found: " + missing.string());
  }
  const auto text = dir.path / "notes.png";
  write_file(text, std::string("hello"));
  try {
    load_image(text);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image " + text.string() + ": not a JPEG, PNG or BMP file (by its contents: the file "
                                    "starts with bytes 68 65 6c 6c 6f), or damaged");
  }
  const auto empty = dir.path / "empty.jpg";
  write_file(empty, std::string());
  try {
    load_image(empty);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image " + empty.string() + ": file is empty");
  }
  try {
    load_image(dir.path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read image file " + dir.path.string() + ": is a directory");
  }
}

namespace {
uint32_t crc32_of(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}
void put_be(uint8_t* p, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * (bytes - 1 - i)));
}
}  // namespace

// A small file whose header claims a huge image is refused before any pixel memory is allocated.
TEST(Image, DecompressionBombsAreRefusedFromTheHeader) {
  const ImageU8 img = pattern();
  // Grey PNG (stb itself refuses RGB images past 2^30 bytes, about this limit; grey ones reach 3x
  // further): IHDR, right after the 8-byte signature, says 20000 x 20000, CRC fixed.
  std::vector<uint8_t> png = encode_png(img.width, img.height, 1, std::vector<uint8_t>(6, 9));
  put_be(png.data() + 16, 20000, 4);
  put_be(png.data() + 20, 20000, 4);
  put_be(png.data() + 29, crc32_of(png.data() + 12, 17), 4);
  try {
    decode_image(png, "bomb.png");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot decode image bomb.png: 20000x20000 = 400000000 pixels exceeds the limit of 178956970 "
              "(decompression bomb guard, as PIL's)");
  }
  // Between PIL's limit and twice it (the constant, already 2 x MAX_IMAGE_PIXELS, was doubled again):
  // 196 M pixels, which Image.open refuses too.
  put_be(png.data() + 16, 14000, 4);
  put_be(png.data() + 20, 14000, 4);
  put_be(png.data() + 29, crc32_of(png.data() + 12, 17), 4);
  lingbot_test::expect_error([&] { decode_image(png, "bomb.png"); },
                             "cannot decode image bomb.png: 14000x14000 = 196000000 pixels exceeds the limit of "
                             "178956970 (decompression bomb guard, as PIL's)");
  // JPEG: the baseline SOF0 frame header says 60000 x 60000.
  std::vector<uint8_t> jpg;
  stbi_write_jpg_to_func(stbi_to_vector, &jpg, img.width, img.height, 3, img.rgb.data(), 90);
  size_t sof = 2;
  while (sof + 9 < jpg.size() && !(jpg[sof] == 0xff && jpg[sof + 1] == 0xc0)) ++sof;
  ASSERT_LT(sof + 9, jpg.size());
  put_be(jpg.data() + sof + 5, 60000, 2);
  put_be(jpg.data() + sof + 7, 60000, 2);
  try {
    decode_image(jpg, "bomb.jpg");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot decode image bomb.jpg: 60000x60000 = 3600000000 pixels exceeds the limit of 178956970 "
              "(decompression bomb guard, as PIL's)");
  }
  // probe_image_size (run's up-front size pass) refuses them too, before any frame is processed.
  TempDir dir;
  write_file(dir.path / "bomb.jpg", jpg);
  try {
    probe_image_size(dir.path / "bomb.jpg");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image " + (dir.path / "bomb.jpg").string() +
                                         ": 60000x60000 = 3600000000 pixels exceeds the limit of 178956970 "
                                         "(decompression bomb guard, as PIL's)");
  }
  // Small images are unaffected.
  EXPECT_EQ(decode_image(encode_png(img.width, img.height, 3, img.rgb), "ok.png").width, 3);
}

TEST(Image, ListsImageFilesSortedByName) {
  TempDir dir;
  const auto png = encode_png(3, 2, 3, pattern().rgb);
  for (const char* name : {"b.png", "a.JPG", "c.jpeg", "notes.txt", "10.png", "2.bmp"}) write_file(dir.path / name, png);
  // Hidden files are not frames: macOS's AppleDouble companion (not an image at all) and a dotfile.
  write_file(dir.path / "._b.png", std::vector<uint8_t>{0, 5, 22, 7, 0, 2, 0, 0});
  write_file(dir.path / ".hidden.png", png);
  std::filesystem::create_directories(dir.path / "sub.png");
  std::vector<std::string> names;
  for (const auto& p : list_image_files(dir.path)) names.push_back(p.filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"10.png", "2.bmp", "a.JPG", "b.png", "c.jpeg"}));

  TempDir empty_holder("_empty");
  const auto empty = empty_holder.path / "empty";
  std::filesystem::create_directories(empty);
  try {
    list_image_files(empty);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "no images (.jpg, .jpeg, .png, .bmp) in " + empty.string());
  }
  try {
    list_image_files(empty / "missing");
    FAIL();
  } catch (const FileNotFound& e) {
    EXPECT_EQ(std::string(e.what()), "image folder not found: " + (empty / "missing").string());
  }
  // A folder of frames in formats that are not read says what it holds (a probe found a TIFF-only
  // folder answered with "no images" alone).
  write_file(empty / "a.tif", png);
  write_file(empty / "b.tif", png);
  lingbot_test::expect_error([&] { list_image_files(empty); },
                             "no images (.jpg, .jpeg, .png, .bmp) in " + empty.string() +
                                 "; 2 image files of another format in the folder are not read (2 .tif): frames are "
                                 ".jpg, .jpeg, .png and .bmp files");
}

// A FIFO among the frames would block the first read forever: refused when the folder is listed.
TEST(Image, AFifoAmongTheFramesIsRefused) {
  TempDir dir;
  write_file(dir.path / "a.png", encode_png(3, 2, 3, pattern().rgb));
  ASSERT_EQ(::mkfifo((dir.path / "b.png").c_str(), 0600), 0);
  lingbot_test::expect_error([&] { list_image_files(dir.path); }, "image file " + (dir.path / "b.png").string() +
                                                                       " is not a regular file (a FIFO, socket or "
                                                                       "device is not a frame)");
}

// Frames stay in byte order (upstream's sorted()); numbers of different widths get a notice naming the
// first pair out of numeric order. Zero-padded numbers and TUM-style decimal timestamps get none.
TEST(Image, NameOrderNoticeNamesTheFirstPairOutOfNumericOrder) {
  auto notice = [](std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    std::vector<std::filesystem::path> paths(names.begin(), names.end());
    return name_order_notice(paths);
  };
  EXPECT_EQ(notice({"img1.png", "img2.png", "img9.png", "img10.png", "img11.png"}),
            "frames are read in byte order of their names, as upstream sorts them: img11.png comes before img2.png. If "
            "the numbers count the capture order, zero-pad them to one width (img002.png, img010.png)");
  EXPECT_EQ(notice({"img001.png", "img002.png", "img010.png", "img100.png"}), "");
  EXPECT_EQ(notice({"1305031102.175304.png", "1305031102.2.png", "1305031102.21.png", "1305031103.01.png"}), "");
  EXPECT_NE(notice({"frame.9.png", "frame.10.png"}), "");  // digits after a dot that follows a letter: a number
  EXPECT_EQ(notice({"scene2_0001.png", "scene10_0001.png"}),
            "frames are read in byte order of their names, as upstream sorts them: scene10_0001.png comes before "
            "scene2_0001.png. If the numbers count the capture order, zero-pad them to one width (img002.png, "
            "img010.png)");
  EXPECT_EQ(notice({"a.png", "b.png", "frame.png", "frame1.png"}), "");
  EXPECT_EQ(notice({"DSC_0099.JPG", "DSC_0100.JPG", "IMG_5.jpg"}), "");
  EXPECT_EQ(notice({"000000.png", "000001.png", "00000\xe9.png"}), "");  // not one numbered sequence
  EXPECT_EQ(notice({"a9.png", "a10b.png"}), "");
  // Interleaved sequences (stereo pairs): each compared with the previous name of its own pattern.
  EXPECT_EQ(notice({"frame_1_left.png", "frame_1_right.png", "frame_2_left.png", "frame_2_right.png",
                    "frame_10_left.png", "frame_10_right.png"}),
            "frames are read in byte order of their names, as upstream sorts them: frame_10_left.png comes before "
            "frame_1_left.png. If the numbers count the capture order, zero-pad them to one width (img002.png, "
            "img010.png)");
}

TEST(Image, Grey16PngIsClippedLikePil) {
  // PIL: mode "I;16" -> convert("RGB") keeps values < 256 and turns larger ones into 255.
  const std::vector<uint16_t> v = {0, 200, 255, 256, 1000, 65535};
  const ImageU8 img = decode_image(encode_png_gray16(3, 2, v), "g16.png");
  std::vector<uint8_t> grey;
  for (size_t i = 0; i < img.rgb.size(); i += 3) grey.push_back(img.rgb[i]);
  EXPECT_EQ(grey, (std::vector<uint8_t>{0, 200, 255, 255, 255, 255}));
}

// Such frames come out nearly white: a folder run says so (a 16-bit depth or IR camera's frames gave a
// meaningless reconstruction without a hint). Only 16-bit grey: 8-bit grey and 16-bit grey+alpha are read well.
TEST(Image, Grey16PngFramesAreNamedInANotice) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "grey16_notice";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<uint16_t> v(6, 1000);
  const std::vector<uint8_t> g16 = encode_png_gray16(3, 2, v);
  const auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                       static_cast<std::streamsize>(bytes.size()));
    return dir / name;
  };
  const ImageU8 rgb(3, 2);
  const fs::path a = write("a.png", encode_png_rgb8(rgb)), b = write("b.png", g16), c = write("c.jpg", g16),
                 d = write("d.png", {0x89, 'P', 'N'});
  EXPECT_EQ(grey16_png_notice({a, d}), "");
  EXPECT_EQ(grey16_png_notice({a, b}),
            "1 frame is a 16-bit greyscale PNG (b.png): its values above 255 become 255, as Pillow converts such a "
            "PNG to RGB and upstream reads it, so it comes out nearly white: convert to 8 bits first (e.g. ffmpeg -i "
            "in.png -pix_fmt gray out.png)");
  EXPECT_EQ(grey16_png_notice({a, b, c, d}).substr(0, 56), "2 frames are 16-bit greyscale PNGs (b.png, ...): their v");
  fs::remove_all(dir);
}

// Found by fuzz_image: a PNG whose IDAT chunk declares 1 GiB in a 100-byte file made stb_image grow
// its buffer towards that length (gigabytes reserved, seconds of work) before seeing the data end.
// The chunk table is now checked against the file size first.
// stb decodes only BMP: a JPEG stream that opens with a fill byte (FF FF D8), which libjpeg
// refuses and stb's own JPEG decoder used to take (and read out of bounds on, found by fuzz_image),
// is refused as a file of no format we read.
TEST(Image, JpegWithLeadingFillByteIsRefusedNotHandedToStb) {
  ImageU8 img(4, 4);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> jpg = jpeg_with_orientation(img, 1, false);
  ASSERT_EQ(decode_image(jpg, "ok.jpg").width, 4);
  jpg.insert(jpg.begin() + 1, 0xff);
  try {
    (void)decode_image(jpg, "fill.jpg");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image fill.jpg: not a JPEG, PNG or BMP file (by its contents: the "
                                     "file starts with bytes ff ff d8 ff e1 00 22 45), or damaged");
  }
}

namespace {
// An uncompressed BMP (BITMAPINFOHEADER, BI_RGB, rows bottom-up, BGR, rows padded to 4 bytes); 32 bits
// per pixel: BGRX, X = fourth(pixel index).
std::vector<uint8_t> encode_bmp(const ImageU8& img, int bits, const std::function<uint8_t(size_t)>& fourth = {}) {
  const uint32_t bytes_pp = static_cast<uint32_t>(bits / 8);
  const uint32_t row = (static_cast<uint32_t>(img.width) * bytes_pp + 3) / 4 * 4;
  const uint32_t size = 54 + row * static_cast<uint32_t>(img.height);
  std::vector<uint8_t> b(size, 0);
  auto le = [&](size_t o, uint32_t v, int n) {
    for (int i = 0; i < n; ++i) b[o + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  b[0] = 'B', b[1] = 'M';
  le(2, size, 4), le(10, 54, 4), le(14, 40, 4), le(18, static_cast<uint32_t>(img.width), 4);
  le(22, static_cast<uint32_t>(img.height), 4), le(26, 1, 2), le(28, static_cast<uint32_t>(bits), 2);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      const size_t pixel = static_cast<size_t>(y) * img.width + x;
      uint8_t* out = &b[54 + (img.height - 1 - y) * row + x * bytes_pp];
      for (int c = 0; c < 3; ++c) out[c] = img.rgb[pixel * 3 + 2 - c];
      if (bits == 32) out[3] = fourth(pixel);
    }
  return b;
}
std::vector<uint8_t> encode_bmp24(const ImageU8& img) { return encode_bmp(img, 24); }
}  // namespace

TEST(Image, BmpDecodesExactlyAndATruncatedOneIsRefused) {
  ImageU8 img(5, 3);  // 15-byte rows: padding in every row
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 11 + 3);
  std::vector<uint8_t> bmp = encode_bmp24(img);
  EXPECT_EQ(decode_image(bmp, "ok.bmp").rgb, img.rgb);
  bmp.resize(bmp.size() - 1);
  try {
    (void)decode_image(bmp, "cut.bmp");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image cut.bmp: BMP pixel data is truncated: 5x3 at 24 bits per "
                                     "pixel needs 102 bytes, the file has 101");
  }
  bmp = encode_bmp24(img);
  bmp[33] = 0x90;  // compression 0x90000000 (stb_image would read it as uncompressed)
  try {
    (void)decode_image(bmp, "odd.bmp");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image odd.bmp: BMP compression 2415919104 is not supported "
                                     "(uncompressed and bitfields only): convert it to PNG");
  }
  // An RLE8 file: named, and probed (run sizes the canvas first) with the same reason: the probe said
  // stb_image's "Image not of any known type, or corrupt".
  bmp[30] = 1, bmp[33] = 0;
  for (const bool probe : {false, true})
    EXPECT_EQ(refusal(bmp, "rle.bmp", probe), "cannot decode image rle.bmp: BMP compression 1 (RLE8) is not supported "
                                              "(uncompressed and bitfields only): convert it to PNG");
  bmp = encode_bmp24(img);
  bmp.resize(32);  // the 40-byte info header cut short (stb_image reads the rest as zeros)
  try {
    (void)decode_image(bmp, "short.bmp");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image short.bmp: BMP header is truncated (32 bytes, its info "
                                     "header needs 54)");
  }
}

// 32 bits per pixel without bitfields is BGRX: Pillow ignores the fourth byte. stb_image took it for
// alpha (opaque only where it is 0 in every pixel), so an X8R8G8B8 writer's junk there turned the
// frame white (found by a probe: one pixel's X = 1 gave an all-white frame).
// A 32-bit BITFIELDS BMP with an alpha mask (V4 header) is RGBA to Pillow: composited on white.
TEST(Image, Bmp32WithAnAlphaMaskIsCompositedOnWhite) {
  std::vector<uint8_t> b(122 + 8, 0);
  auto le = [&](size_t o, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[o + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  b[0] = 'B', b[1] = 'M';
  le(2, static_cast<uint32_t>(b.size())), le(10, 122), le(14, 108), le(18, 2), le(22, 1);
  b[26] = 1, b[28] = 32, le(30, 3);                                                  // 1 plane, 32 bits, BI_BITFIELDS
  le(54, 0x00ff0000), le(58, 0x0000ff00), le(62, 0x000000ff), le(66, 0xff000000);  // R, G, B, A masks
  le(70, 0x73524742);                                                                // 'sRGB'
  const uint8_t px[8] = {40, 80, 120, 255, 40, 80, 120, 0};  // B G R A: opaque, then transparent
  std::memcpy(b.data() + 122, px, 8);
  const ImageU8 d = decode_image(b, "alpha.bmp");
  ASSERT_EQ(d.width, 2);
  EXPECT_EQ(d.rgb, (std::vector<uint8_t>{120, 80, 40, 255, 255, 255}));
}

TEST(Image, Bmp32WithoutBitfieldsIgnoresTheFourthByte) {
  ImageU8 img(5, 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 17 + 5);
  EXPECT_EQ(decode_image(encode_bmp(img, 32, [](size_t) { return uint8_t{0}; }), "zero.bmp").rgb, img.rgb);
  EXPECT_EQ(decode_image(encode_bmp(img, 32, [](size_t i) { return uint8_t(i == 7 ? 1 : 0); }), "one.bmp").rgb, img.rgb);
  EXPECT_EQ(decode_image(encode_bmp(img, 32, [](size_t i) { return uint8_t(i * 40); }), "junk.bmp").rgb, img.rgb);
}

// A zero-length IDAT chunk is legal and carries nothing: the image decodes exactly as without it
// (stb_image alone copied it into a null buffer, found by fuzz_image under UBSan).
TEST(Image, PngWithAnEmptyIdatChunkDecodesExactly) {
  ImageU8 img(4, 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 13 + 1);
  std::vector<uint8_t> png = encode_png(img.width, img.height, 3, img.rgb);
  const std::vector<uint8_t> empty_idat = {0, 0, 0, 0, 'I', 'D', 'A', 'T', 0x35, 0xaf, 0x06, 0x1e};
  png.insert(png.begin() + 8 + 25, empty_idat.begin(), empty_idat.end());  // right after IHDR
  EXPECT_EQ(decode_image(png, "empty_idat.png").rgb, img.rgb);
}

TEST(Image, PngChunkLongerThanTheFileIsRefusedBeforeDecoding) {
  const std::vector<uint16_t> grey(48, 1000);
  std::vector<uint8_t> png = lingbot::io::encode_png_gray16(8, 6, grey);
  // Chunks after the 8-byte signature: IHDR (8 + 13 + 4 bytes), then the first IDAT's length field.
  const size_t idat = 8 + 25;
  ASSERT_EQ(std::string(png.begin() + idat + 4, png.begin() + idat + 8), "IDAT");
  png[idat] = 0x40, png[idat + 1] = 0, png[idat + 2] = 0, png[idat + 3] = 0x2e;
  try {
    (void)lingbot::io::decode_image(png, "bomb.png");
    FAIL() << "no error";
  } catch (const lingbot::Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image bomb.png: PNG chunk 'IDAT' at byte 33 declares 1073741870 data "
                                     "bytes but the file has only " + std::to_string(png.size() - 45) +
                                     " left (truncated or corrupt)");
  }
  // A text chunk before the image data claiming 2 GB: the probe (run sizes the canvas from headers)
  // let libpng allocate its declared length before finding the file shorter (fuzz_image, out of memory).
  std::vector<uint8_t> text(png.begin(), png.begin() + idat);
  const std::string ztxt = "zTXtRaw profile type exif";
  text.insert(text.end(), {0x7a, 0x00, 0x00, 0x45});  // the declared length
  text.insert(text.end(), ztxt.begin(), ztxt.end());
  for (const bool probe : {true, false})
    EXPECT_EQ(refusal(text, "text.png", probe), "cannot decode image text.png: PNG chunk 'zTXt' at byte 33 declares "
                                                "2046820421 data bytes but the file has only 17 left (truncated or corrupt)");
  // The same header with fewer than 4 bytes after it (it was not checked: a 41-byte file made libpng
  // allocate 2 GB, a review finding).
  text.resize(idat + 8 + 3);
  for (const bool probe : {true, false})
    EXPECT_EQ(refusal(text, "end.png", probe), "cannot decode image end.png: PNG chunk 'zTXt' at byte 33 declares "
                                               "2046820421 data bytes but the file has only 0 left (truncated or corrupt)");
}

// ---- PNG through libpng ----------------------------------------------------------------------
namespace {

// A PNG written by libpng from `samples` (one value per channel, in the file's bit depth; palette
// images: the index), for any colour type, bit depth, interlace and tRNS.
struct PngVariant {
  int color_type, depth;
  bool interlace = false, trns = false;
};
int png_channels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: case PNG_COLOR_TYPE_PALETTE: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    default: return 4;
  }
}
void png_to_vector(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
// Rows in the file's layout before packing: one byte per sample (depth <= 8) or two, big-endian.
std::vector<std::vector<uint8_t>> png_rows(const PngVariant& v, int w, int h, const std::vector<uint16_t>& samples) {
  const int c = png_channels(v.color_type), bytes = v.depth == 16 ? 2 : 1;
  std::vector<std::vector<uint8_t>> rows(static_cast<size_t>(h), std::vector<uint8_t>(static_cast<size_t>(w * c * bytes)));
  for (int y = 0; y < h; ++y)
    for (int i = 0; i < w * c; ++i) {
      const uint16_t s = samples[static_cast<size_t>(y * w * c + i)];
      uint8_t* out = rows[static_cast<size_t>(y)].data() + static_cast<size_t>(i * bytes);
      if (bytes == 2) {
        out[0] = static_cast<uint8_t>(s >> 8);
        out[1] = static_cast<uint8_t>(s & 0xff);
      } else {
        out[0] = static_cast<uint8_t>(s);
      }
    }
  return rows;
}
std::vector<uint8_t> write_png_variant(const PngVariant& v, int w, int h, std::vector<std::vector<uint8_t>>& rows,
                                       const std::vector<png_color>& palette) {
  std::vector<uint8_t> out;
  std::vector<png_bytep> ptrs;
  for (auto& r : rows) ptrs.push_back(r.data());
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(png, &out, png_to_vector, nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), v.depth, v.color_type,
               v.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (v.color_type == PNG_COLOR_TYPE_PALETTE) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  png_byte alphas[2] = {0, 128};
  png_color_16 key{};
  if (v.trns) png_set_tRNS(png, info, alphas, v.color_type == PNG_COLOR_TYPE_PALETTE ? 2 : 0, &key);
  png_write_info(png, info);
  if (v.depth < 8) png_set_packing(png);  // one byte per sample in, packed in the file
  (void)png_set_interlace_handling(png);
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace

// Every PNG colour type, bit depth, Adam7 interlacing and tRNS, decoded to the pixels PIL's
// PngImagePlugin + convert("RGB") give: grey of 1/2/4 bits scaled to 0..255, 16-bit samples to their
// high byte (";16B" raw modes) except 16-bit grey ("I;16", clipped to 255), palette looked up, tRNS
// ignored, grey+alpha's alpha dropped, RGBA composited over white (alpha 0 -> white, max -> colour).
TEST(Image, EveryPngColourTypeAndBitDepthDecodesAsPil) {
  const int w = 7, h = 5;  // odd: partial bytes in packed rows
  std::vector<png_color> palette;
  for (int i = 0; i < 16; ++i)
    palette.push_back({static_cast<png_byte>(i * 16), static_cast<png_byte>(255 - i * 9), static_cast<png_byte>(i * 5 + 3)});
  auto palette_of = [&](int depth) {  // at most 2^depth entries
    return std::vector<png_color>(palette.begin(), palette.begin() + std::min(16, 1 << depth));
  };
  std::vector<PngVariant> variants;
  for (const int d : {1, 2, 4, 8, 16}) variants.push_back({PNG_COLOR_TYPE_GRAY, d});
  for (const int d : {1, 2, 4, 8}) variants.push_back({PNG_COLOR_TYPE_PALETTE, d});
  for (const int d : {8, 16}) {
    variants.push_back({PNG_COLOR_TYPE_GRAY_ALPHA, d});
    variants.push_back({PNG_COLOR_TYPE_RGB, d});
    variants.push_back({PNG_COLOR_TYPE_RGB_ALPHA, d});
  }
  int checked = 0;
  for (const PngVariant& base : variants)
    for (const bool interlace : {false, true})
      for (const bool trns : {false, true}) {
        if (trns && (base.color_type & PNG_COLOR_MASK_ALPHA)) continue;  // tRNS only without an alpha channel
        const PngVariant v{base.color_type, base.depth, interlace, trns};
        SCOPED_TRACE("colour type " + std::to_string(v.color_type) + ", " + std::to_string(v.depth) + " bits" +
                     (v.interlace ? ", interlaced" : "") + (v.trns ? ", tRNS" : ""));
        const int c = png_channels(v.color_type);
        const uint32_t max = v.color_type == PNG_COLOR_TYPE_PALETTE ? std::min<uint32_t>((1u << v.depth) - 1, 15)
                                                                     : (1u << v.depth) - 1;
        std::vector<uint16_t> samples(static_cast<size_t>(w * h * c));
        for (size_t i = 0; i < samples.size(); ++i) {
          samples[i] = static_cast<uint16_t>((i * 7919 + 13) % (max + 1));
          if (c == 4 && i % 4 == 3) samples[i] = i % 8 == 3 ? static_cast<uint16_t>(max) : 0;  // opaque or clear
          if (c == 2 && v.depth == 16 && i % 2 == 1) samples[i] = i % 4 == 1 ? static_cast<uint16_t>(max) : 0;
        }
        auto rows = png_rows(v, w, h, samples);
        const std::vector<uint8_t> png = write_png_variant(v, w, h, rows, palette_of(v.depth));
        ASSERT_FALSE(png.empty());
        const ImageU8 img = decode_image(png, "variant.png");
        ASSERT_EQ(img.width, w);
        ASSERT_EQ(img.height, h);
        EXPECT_EQ(probe_image(png, "variant.png"), (ImageSize{w, h}));
        auto to8 = [&](uint16_t s) {
          return static_cast<uint8_t>(v.depth == 16 ? s >> 8 : s * (255 / max));
        };
        for (int i = 0; i < w * h; ++i) {
          const uint16_t* px = samples.data() + static_cast<size_t>(i * c);
          uint8_t want[3];
          if (v.color_type == PNG_COLOR_TYPE_PALETTE) {
            want[0] = palette[px[0]].red, want[1] = palette[px[0]].green, want[2] = palette[px[0]].blue;
          } else if (c == 2 && v.depth == 16) {  // PIL opens it as RGBA ("LA;16B"): composited on white
            want[0] = want[1] = want[2] = px[1] == 0 ? 255 : to8(px[0]);
          } else if (c <= 2) {  // 8-bit grey+alpha is PIL mode "LA": its alpha is dropped
            want[0] = want[1] = want[2] =
                v.depth == 16 && c == 1 ? static_cast<uint8_t>(std::min<uint16_t>(px[0], 255)) : to8(px[0]);
          } else {
            for (int k = 0; k < 3; ++k) want[k] = c == 4 && px[3] == 0 ? 255 : to8(px[k]);
          }
          const uint8_t* got = img.rgb.data() + static_cast<size_t>(i) * 3;
          ASSERT_TRUE(got[0] == want[0] && got[1] == want[1] && got[2] == want[2])
              << "pixel " << i << ": got " << int(got[0]) << "," << int(got[1]) << "," << int(got[2]) << ", want "
              << int(want[0]) << "," << int(want[1]) << "," << int(want[2]);
        }
        ++checked;
      }
  EXPECT_EQ(checked, 52);
}

namespace {

uint32_t chunk_length(const std::vector<uint8_t>& png, size_t at) {
  return (uint32_t{png[at]} << 24) | (uint32_t{png[at + 1]} << 16) | (uint32_t{png[at + 2]} << 8) | png[at + 3];
}
// Offset of the length field of the first chunk of `type`, or 0.
size_t find_chunk(const std::vector<uint8_t>& png, const std::string& type) {
  for (size_t pos = 8; pos + 12 <= png.size(); pos += 12 + chunk_length(png, pos))
    if (std::equal(type.begin(), type.end(), png.begin() + static_cast<long>(pos + 4))) return pos;
  return 0;
}
// Writes the right CRC for the chunk at `at` (so only the damage planted in its data remains).
void fix_crc(std::vector<uint8_t>* png, size_t at) {
  const uint32_t len = chunk_length(*png, at);
  const uint32_t crc = static_cast<uint32_t>(::crc32(0, png->data() + at + 4, len + 4));
  for (size_t k = 0; k < 4; ++k) (*png)[at + 8 + len + k] = static_cast<uint8_t>(crc >> (24 - 8 * k));
}
void append_chunk(std::vector<uint8_t>* png, const std::string& type, const std::vector<uint8_t>& data) {
  const size_t at = png->size();
  const uint32_t len = static_cast<uint32_t>(data.size());
  for (int k = 0; k < 4; ++k) png->push_back(static_cast<uint8_t>(len >> (24 - 8 * k)));
  png->insert(png->end(), type.begin(), type.end());
  png->insert(png->end(), data.begin(), data.end());
  png->insert(png->end(), 4, 0);
  fix_crc(png, at);
}
// An 8-bit RGB PNG written by hand: IDAT = zlib(`raw`, the filtered rows) then `after` (bytes after
// the zlib stream).
std::vector<uint8_t> hand_png(int w, int h, const std::vector<uint8_t>& raw, const std::vector<uint8_t>& after = {}) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  append_chunk(&png, "IHDR", {0, 0, 0, static_cast<uint8_t>(w), 0, 0, 0, static_cast<uint8_t>(h), 8, 2, 0, 0, 0});
  uLongf n = ::compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(n);
  EXPECT_EQ(::compress2(z.data(), &n, raw.data(), static_cast<uLong>(raw.size()), 6), Z_OK);
  z.resize(n);
  z.insert(z.end(), after.begin(), after.end());
  append_chunk(&png, "IDAT", z);
  append_chunk(&png, "IEND", {});
  return png;
}
// Filtered rows (filter type 0) of an 8-bit RGB image.
std::vector<uint8_t> raw_rows(const ImageU8& img) {
  std::vector<uint8_t> raw;
  for (int y = 0; y < img.height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), img.pixel(0, y), img.pixel(0, y) + 3 * img.width);
  }
  return raw;
}
std::string decode_error(const std::vector<uint8_t>& png) {
  try {
    (void)decode_image(png, "damaged.png");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// stb_image checked neither chunk CRCs nor the zlib checksum: a damaged PNG decoded as garbage
// without a word. libpng refuses a bad CRC in any chunk, damaged deflate data, and a wrong Adler-32
// (the checksum of the decompressed rows); a file that ends after its image data (no IEND) still
// decodes, as PIL reads it.
TEST(Image, DamagedPngIsRefusedWithLibpngsReason) {
  ImageU8 img(16, 12);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 31) ^ (i >> 3));
  const std::vector<uint8_t> good = encode_png(img.width, img.height, 3, img.rgb);
  ASSERT_EQ(decode_image(good, "good.png").rgb, img.rgb);
  const size_t idat = find_chunk(good, "IDAT"), iend = find_chunk(good, "IEND");
  ASSERT_GT(idat, 0u);
  ASSERT_GT(iend, idat);
  const uint32_t len = chunk_length(good, idat);
  ASSERT_GT(len, 20u);
  const std::string prefix = "cannot decode image damaged.png: ";

  std::vector<uint8_t> bad = good;  // one bit of image data flipped, the CRC left as it was
  bad[idat + 8 + len / 2] ^= 0x10;
  EXPECT_EQ(decode_error(bad), prefix + "IDAT: incorrect data check");  // zlib's check comes first
  bad[idat + 8 + len / 2] ^= 0x10;  // the data right, the CRC wrong
  bad[idat + 8 + len] ^= 0x01;
  EXPECT_EQ(decode_error(bad), prefix + "IDAT: CRC error");

  bad = good;  // the Adler-32 (the last 4 bytes of the zlib stream) wrong, the CRC made right
  bad[idat + 8 + len - 1] ^= 0x01;
  fix_crc(&bad, idat);
  EXPECT_EQ(decode_error(bad), prefix + "IDAT: incorrect data check");

  bad = good;  // a bad CRC on an ancillary chunk: PIL refuses it too
  const std::vector<uint8_t> text = {0, 0, 0, 5, 't', 'E', 'X', 't', 'a', 0, 'b', 'c', 'd', 1, 2, 3, 4};
  bad.insert(bad.begin() + 33, text.begin(), text.end());
  EXPECT_EQ(decode_error(bad), prefix + "tEXt: CRC error");
  fix_crc(&bad, 33);
  EXPECT_EQ(decode_image(bad, "text.png").rgb, img.rgb);

  bad.assign(good.begin(), good.begin() + static_cast<long>(iend));  // no IEND: decodes, as PIL
  EXPECT_EQ(decode_image(bad, "no_iend.png").rgb, img.rgb);

  // Whole rows with something after them decode, as Pillow (it stops at the last row): bytes after
  // the zlib stream, or a stream that inflates to more than the rows. Fewer rows than the header's
  // height is a truncated image.
  const std::vector<uint8_t> raw = raw_rows(img);
  ASSERT_EQ(decode_image(hand_png(16, 12, raw), "hand.png").rgb, img.rgb);
  EXPECT_EQ(decode_image(hand_png(16, 12, raw, {1, 2, 3, 4}), "extra.png").rgb, img.rgb);
  std::vector<uint8_t> longer = raw;
  longer.insert(longer.end(), 49, 7);  // one more row than the header has
  EXPECT_EQ(decode_image(hand_png(16, 12, longer), "too_much.png").rgb, img.rgb);
  const std::vector<uint8_t> shorter(raw.begin(), raw.end() - 49);
  EXPECT_EQ(decode_error(hand_png(16, 12, shorter)), prefix + "Not enough image data");

  int refused = 0;
  for (int trial = 0; trial < 200; ++trial) {  // any damaged byte of the image data: refused or exact, never garbage
    bad = good;
    const size_t at = idat + 8 + (static_cast<size_t>(trial) * 7919) % len;
    bad[at] ^= static_cast<uint8_t>(1 + trial % 255);
    fix_crc(&bad, idat);
    const std::string error = decode_error(bad);
    if (error.empty()) {
      EXPECT_EQ(decode_image(bad, "damaged.png").rgb, img.rgb) << "byte " << at << " changed the pixels silently";
    } else {
      EXPECT_EQ(error.rfind(prefix, 0), 0u) << error;
      ++refused;
    }
  }
  EXPECT_GT(refused, 150);
}

// A palette index past the PLTE entries (a file a careless writer makes) decodes to black, as
// current Pillow gives it (its palette is zero-filled past PLTE; Debian 12's Pillow 9.4 filled a grey
// ramp instead: (i, i, i)); libpng would otherwise refuse the file or leave the pixel undefined.
TEST(Image, PaletteIndexPastPlteIsBlackAsPillow) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  append_chunk(&png, "IHDR", {0, 0, 0, 4, 0, 0, 0, 2, 8, 3, 0, 0, 0});  // 4x2, 8-bit palette
  append_chunk(&png, "PLTE", {255, 0, 0, 0, 255, 0});                 // two entries: red, green
  const std::vector<uint8_t> raw = {0, 0, 1, 2, 5, 0, 1, 0, 255, 7};   // filter byte + 4 indices per row
  uLongf n = ::compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(n);
  ASSERT_EQ(::compress2(z.data(), &n, raw.data(), static_cast<uLong>(raw.size()), 6), Z_OK);
  z.resize(n);
  append_chunk(&png, "IDAT", z);
  append_chunk(&png, "IEND", {});
  const ImageU8 img = decode_image(png, "palette.png");
  ASSERT_EQ(img.width, 4);
  ASSERT_EQ(img.height, 2);
  const std::vector<std::array<uint8_t, 3>> want = {{255, 0, 0}, {0, 255, 0}, {0, 0, 0}, {0, 0, 0},
                                                     {0, 255, 0}, {255, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  for (int i = 0; i < 8; ++i) {
    const uint8_t* px = img.pixel(i % 4, i / 4);
    EXPECT_EQ((std::array<uint8_t, 3>{px[0], px[1], px[2]}), want[static_cast<size_t>(i)]) << "pixel " << i;
  }
}
