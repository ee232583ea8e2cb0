// JPEG decoding through libjpeg-turbo with PIL's settings: pixels, colour spaces, truncation and
// corruption errors, EXIF orientation. Every JPEG is encoded here with libjpeg.
#include <gtest/gtest.h>

#include "test_temp_dir.h"
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "core/error.h"
#include "io/image.h"
#include "test_files.h"
#include "test_jpeg.h"

using namespace lingbot;
using namespace lingbot::io;
using lingbot_test::encode_jpeg;
using lingbot_test::EncodeOptions;
using lingbot_test::k420;
using lingbot_test::k422;
using lingbot_test::k440;
using lingbot_test::k444;
using lingbot_test::Sampling;

namespace {

// libjpeg's own decode of a valid JPEG with the settings PIL uses, unless a test changes them:
// default parameters (ISLOW IDCT, fancy upsampling), output JCS_RGB, or JCS_GRAYSCALE for grey.
struct ReferenceOptions {
  J_DCT_METHOD dct = JDCT_ISLOW;
  bool fancy_upsampling = true;
};
std::vector<uint8_t> libjpeg_decode(const std::vector<uint8_t>& bytes, int* comps_out,
                                    const ReferenceOptions& opt = {}) {
  jpeg_decompress_struct d{};
  jpeg_error_mgr err{};
  d.err = jpeg_std_error(&err);
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&d, TRUE);
  d.out_color_space = d.num_components == 1 ? JCS_GRAYSCALE : d.num_components == 3 ? JCS_RGB : JCS_CMYK;
  d.dct_method = opt.dct;
  d.do_fancy_upsampling = opt.fancy_upsampling ? TRUE : FALSE;
  jpeg_start_decompress(&d);
  const size_t stride = static_cast<size_t>(d.output_width) * d.output_components;
  std::vector<uint8_t> px(stride * d.output_height);
  while (d.output_scanline < d.output_height) {
    JSAMPROW row = px.data() + d.output_scanline * stride;
    jpeg_read_scanlines(&d, &row, 1);
  }
  *comps_out = d.output_components;
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  return px;
}
std::vector<uint8_t> libjpeg_decode_rgb(const std::vector<uint8_t>& bytes, const ReferenceOptions& opt = {}) {
  int comps = 0;
  std::vector<uint8_t> px = libjpeg_decode(bytes, &comps, opt);
  EXPECT_EQ(comps, 3);
  return px;
}

// A smooth pattern, by default with noise and sharp edges so chroma upsampling and the IDCT both
// matter.
std::vector<uint8_t> test_pattern(int w, int h, int comps, bool rough = true) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * comps);
  uint32_t state = 12345;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < comps; ++c) {
        state = state * 1664525u + 1013904223u;
        const int noise = rough ? static_cast<int>(state >> 28) - 8 : 0;
        const int edge = rough && ((x / 5 + y / 7 + c) % 3 == 0) ? 60 : 0;
        const int v = (x * (2 + c) + y * (3 - c) + 40 * c) % 180 + edge + noise + 8;
        px[(static_cast<size_t>(y) * w + x) * comps + c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
  return px;
}

int max_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  int m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::string error_of(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    decode_image(bytes, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

using lingbot_test::TempDir;
using lingbot_test::write_file;
using lingbot_test::cut_scan_jpeg;

// APP1 "Exif" segment holding a big-endian TIFF with IFD0 Orientation = value, inserted after SOI.
std::vector<uint8_t> with_orientation(std::vector<uint8_t> jpg, int value) {
  const std::vector<uint8_t> tiff = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1,
                                     0, static_cast<uint8_t>(value), 0, 0, 0, 0, 0, 0};
  std::vector<uint8_t> seg = {0xff, 0xe1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  seg.insert(seg.end(), tiff.begin(), tiff.end());
  seg[2] = static_cast<uint8_t>((seg.size() - 2) >> 8);
  seg[3] = static_cast<uint8_t>((seg.size() - 2) & 0xff);
  jpg.insert(jpg.begin() + 2, seg.begin(), seg.end());
  return jpg;
}

constexpr int kW = 61, kH = 43;  // not multiples of the MCU size, so edge blocks are partial

}  // namespace

TEST(JpegDecode, RgbEqualsLibjpegWithPilSettings) {
  const std::vector<uint8_t> src = test_pattern(kW, kH, 3);
  struct Case {
    const char* name;
    EncodeOptions opt;
  };
  const Case cases[] = {
      {"q95 4:2:0", {95, k420, false, 0}}, {"q95 4:4:4", {95, k444, false, 0}},
      {"q75 4:2:2", {75, k422, false, 0}}, {"q90 4:4:0", {90, k440, false, 0}},
      {"q90 4:2:0 progressive", {90, k420, true, 0}}, {"q90 4:2:0 restarts", {90, k420, false, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> jpg = encode_jpeg(src, kW, kH, 3, c.opt);
    const ImageU8 img = decode_image(jpg, "a.jpg");
    ASSERT_EQ(img.width, kW);
    ASSERT_EQ(img.height, kH);
    EXPECT_EQ(img.rgb, libjpeg_decode_rgb(jpg));
  }
}

TEST(JpegDecode, PilSettingsAreTheOnesThatMatter) {
  // Guards the reference: the fast IDCT or plain upsampling would give different pixels, so the
  // equality above does pin the ISLOW + fancy-upsampling decode.
  const std::vector<uint8_t> jpg = encode_jpeg(test_pattern(kW, kH, 3), kW, kH, 3, {95, k420});
  const ImageU8 img = decode_image(jpg, "a.jpg");
  EXPECT_NE(img.rgb, libjpeg_decode_rgb(jpg, {JDCT_IFAST, true}));
  EXPECT_NE(img.rgb, libjpeg_decode_rgb(jpg, {JDCT_ISLOW, false}));
}

TEST(JpegDecode, FlatColourDecodesToThatColour) {
  // A flat image has only DC coefficients: the error is the YCbCr round trip (±1 per channel)
  // plus DC quantisation (a q95 DC step of 2 moves a flat 8x8 block by at most 1/8 level).
  const uint8_t colour[3] = {200, 30, 90};
  std::vector<uint8_t> src(static_cast<size_t>(kW) * kH * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = colour[i % 3];
  for (Sampling s : {k420, k444}) {
    const ImageU8 img = decode_image(encode_jpeg(src, kW, kH, 3, {95, s}), "flat.jpg");
    EXPECT_LE(max_abs_diff(img.rgb, src), 1);
  }
}

TEST(JpegDecode, Quality100IsCloseToSource) {
  // q100 quantises every coefficient with step 1 (grey: within 1 here); colour adds the 8-bit
  // YCbCr round trip (up to 2 levels), so 3 bounds 4:4:4 RGB (measured: 3).
  const std::vector<uint8_t> src = test_pattern(kW, kH, 3, /*rough=*/false);
  const ImageU8 img = decode_image(encode_jpeg(src, kW, kH, 3, {100, k444}), "q100.jpg");
  EXPECT_LE(max_abs_diff(img.rgb, src), 3);
  const std::vector<uint8_t> grey = test_pattern(kW, kH, 1);
  const ImageU8 g = decode_image(encode_jpeg(grey, kW, kH, 1, {100, k444}), "q100g.jpg");
  for (size_t i = 0; i < grey.size(); ++i) ASSERT_NEAR(g.rgb[i * 3], grey[i], 1) << i;
}

TEST(JpegDecode, GreyIsReplicatedToRgb) {
  const std::vector<uint8_t> jpg = encode_jpeg(test_pattern(kW, kH, 1), kW, kH, 1, {90, k444});
  int comps = 0;
  const std::vector<uint8_t> grey = libjpeg_decode(jpg, &comps);  // PIL's mode "L"
  ASSERT_EQ(comps, 1);
  const ImageU8 img = decode_image(jpg, "grey.jpg");
  ASSERT_EQ(img.rgb.size(), grey.size() * 3);
  for (size_t i = 0; i < grey.size(); ++i) {
    ASSERT_EQ(img.rgb[i * 3 + 0], grey[i]) << i;
    ASSERT_EQ(img.rgb[i * 3 + 1], grey[i]) << i;
    ASSERT_EQ(img.rgb[i * 3 + 2], grey[i]) << i;
  }
}

TEST(JpegDecode, AdobeCmykIsConvertedAsPil) {
  // libjpeg writes a 4-component JPEG as Adobe CMYK, stored inverted (PIL's "CMYK;I"). PIL then
  // converts with r = (255 - k) * (255 - c) / 255 (rounded); flat blocks at q100 are lossless.
  struct Case {
    int c, m, y, k;  // ink amounts, 0..255
  };
  for (const Case ink : {Case{0, 0, 0, 0}, Case{255, 0, 0, 0}, Case{40, 120, 200, 0}, Case{40, 120, 200, 100},
                         Case{0, 0, 0, 255}}) {
    SCOPED_TRACE(testing::Message() << ink.c << "," << ink.m << "," << ink.y << "," << ink.k);
    std::vector<uint8_t> stored(16 * 16 * 4);
    for (size_t i = 0; i < stored.size(); i += 4) {
      stored[i + 0] = static_cast<uint8_t>(255 - ink.c);
      stored[i + 1] = static_cast<uint8_t>(255 - ink.m);
      stored[i + 2] = static_cast<uint8_t>(255 - ink.y);
      stored[i + 3] = static_cast<uint8_t>(255 - ink.k);
    }
    const ImageU8 img = decode_image(encode_jpeg(stored, 16, 16, 4, {100, k444}), "cmyk.jpg");
    const int inks[3] = {ink.c, ink.m, ink.y};
    for (int ch = 0; ch < 3; ++ch) {
      const double expect = (255.0 - ink.k) * (255.0 - inks[ch]) / 255.0;
      EXPECT_NEAR(img.pixel(7, 9)[ch], expect, 0.5 + 1e-9) << "channel " << ch;
    }
    for (size_t i = 0; i < img.rgb.size(); ++i) ASSERT_EQ(img.rgb[i], img.pixel(0, 0)[i % 3]) << i;
  }
}

TEST(JpegDecode, TruncatedJpegIsAnErrorLikePil) {
  // PIL (without LOAD_TRUNCATED_IMAGES) raises "image file is truncated" when the data ends before
  // the decoder is done, including a file that lacks only its final EOI marker.
  const std::vector<uint8_t> full = encode_jpeg(test_pattern(kW, kH, 3), kW, kH, 3, {95, k420});
  const std::vector<uint8_t> prog = encode_jpeg(test_pattern(kW, kH, 3), kW, kH, 3, {90, k420, true});
  const std::string msg = "cannot decode image cut.jpg: image file is truncated";
  EXPECT_EQ(error_of({full.begin(), full.begin() + full.size() / 2}, "cut.jpg"), msg);
  EXPECT_EQ(error_of({full.begin(), full.end() - 2}, "cut.jpg"), msg);
  EXPECT_EQ(error_of({full.begin(), full.begin() + 40}, "cut.jpg"), msg);  // inside the header
  EXPECT_EQ(error_of({prog.begin(), prog.begin() + prog.size() * 2 / 3}, "cut.jpg"), msg);

  TempDir dir;
  write_file(dir.path / "cut.jpg", std::vector<uint8_t>(full.begin(), full.begin() + full.size() / 2));
  try {
    load_image(dir.path / "cut.jpg");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image " + (dir.path / "cut.jpg").string() +
                                         ": image file is truncated");
  }
  write_file(dir.path / "head.jpg", std::vector<uint8_t>(full.begin(), full.begin() + 40));
  try {
    probe_image_size(dir.path / "head.jpg");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot decode image " + (dir.path / "head.jpg").string() +
                                         ": image file is truncated");
  }
}

TEST(JpegDecode, DataCutShortBeforeEoiDecodesLikePil) {
  // With an EOI marker after cut scan data, libjpeg pads the scan and only warns, and PIL returns
  // the image: the rows before the cut are intact.
  // Where PIL is silent, the decoder reports the corrupt data (run counts the frame as damaged).
  const std::vector<uint8_t> full = encode_jpeg(test_pattern(kW, kH, 3), kW, kH, 3, {95, k420});
  const std::vector<uint8_t> cut = cut_scan_jpeg(full);
  CorruptData corrupt{5, "stale"};
  const ImageU8 a = decode_image(full, "full.jpg", &corrupt);
  EXPECT_FALSE(corrupt.any());  // cleared
  EXPECT_EQ(corrupt.first_warning, "");
  const ImageU8 b = decode_image(cut, "cut.jpg", &corrupt);
  ASSERT_EQ(b.width, kW);
  ASSERT_EQ(b.height, kH);
  EXPECT_EQ(std::vector<uint8_t>(a.rgb.begin(), a.rgb.begin() + 16 * kW * 3),
            std::vector<uint8_t>(b.rgb.begin(), b.rgb.begin() + 16 * kW * 3));
  EXPECT_NE(a.rgb, b.rgb);
  EXPECT_EQ(corrupt.warnings, 1);
  EXPECT_EQ(corrupt.first_warning, "Corrupt JPEG data: premature end of data segment");
  EXPECT_EQ(decode_image(cut, "cut.jpg").rgb, b.rgb);  // the same pixels whether asked or not

  // Warnings that leave every pixel as encoded are not corrupt data: stray bytes before the end
  // marker (after the last scan), an unknown JFIF revision.
  std::vector<uint8_t> extra(full.begin(), full.end() - 2);
  for (uint8_t g : {0x01, 0x02, 0x03, 0xff, 0xd9}) extra.push_back(g);
  EXPECT_EQ(decode_image(extra, "extra.jpg", &corrupt).rgb, a.rgb);
  EXPECT_FALSE(corrupt.any());
  std::vector<uint8_t> jfif = full;
  const std::string tag = "JFIF";
  const auto at = std::search(jfif.begin(), jfif.end(), tag.begin(), tag.end());
  ASSERT_NE(at, jfif.end());
  at[5] = 2;  // version 2.01: libjpeg warns "unknown JFIF revision number"
  EXPECT_EQ(decode_image(jfif, "jfif.jpg", &corrupt).rgb, a.rgb);
  EXPECT_FALSE(corrupt.any());
  // Every restart interval whose marker is out of step counts.
  std::vector<uint8_t> rst = encode_jpeg(test_pattern(kW, kH, 3), kW, kH, 3, {95, k420, false, 1});
  int renamed = 0;
  for (size_t i = rst.size() / 4; i + 1 < rst.size() && renamed < 2; ++i) {
    if (rst[i] == 0xff && rst[i + 1] >= 0xd0 && rst[i + 1] <= 0xd7) {  // an RSTn marker: now out of sequence
      rst[i + 1] = static_cast<uint8_t>(0xd0 + (rst[i + 1] - 0xd0 + 4) % 8);
      ++renamed;
      i += 200;
    }
  }
  ASSERT_EQ(renamed, 2);
  (void)decode_image(rst, "rst.jpg", &corrupt);
  EXPECT_GE(corrupt.warnings, 2);
  EXPECT_EQ(corrupt.first_warning.rfind("Corrupt JPEG data: found marker 0xd", 0), 0u) << corrupt.first_warning;

  // load_image reports the same.
  TempDir dir;
  write_file(dir.path / "cut.jpg", cut);
  (void)load_image(dir.path / "cut.jpg", &corrupt);
  EXPECT_EQ(corrupt.warnings, 1);
}

TEST(JpegDecode, CorruptJpegGivesLibjpegsMessage) {
  const std::vector<uint8_t> full = encode_jpeg(test_pattern(16, 16, 3), 16, 16, 3, {95, k420});
  // The SOF0 segment: marker, length, precision, height, width.
  size_t sof = 2;
  while (!(full[sof] == 0xff && full[sof + 1] == 0xc0)) sof += 2 + ((full[sof + 2] << 8) | full[sof + 3]);
  std::vector<uint8_t> bad = full;
  bad[sof + 4] = 12;
  EXPECT_EQ(error_of(bad, "p.jpg"), "cannot decode image p.jpg: Unsupported JPEG data precision 12");
  bad = full;
  bad[sof + 5] = bad[sof + 6] = 0;
  EXPECT_EQ(error_of(bad, "h.jpg"), "cannot decode image h.jpg: Empty JPEG image (DNL not supported)");
  bad = full;
  bad[sof + 9] = 2;  // two components
  EXPECT_EQ(error_of(bad, "c.jpg"), "cannot decode image c.jpg: Bogus marker length");
  EXPECT_EQ(error_of(encode_jpeg(test_pattern(16, 16, 2), 16, 16, 2, {95, k444}), "two.jpg"),
            "cannot decode image two.jpg: cannot handle 2-component JPEG");  // as PIL
  bad = {0xff, 0xd8, 0xff, 0x4f, 0x00, 0x02};
  EXPECT_EQ(error_of(bad, "m.jpg"), "cannot decode image m.jpg: Unsupported marker type 0x4f");
}

TEST(JpegDecode, DamagedJpegsNeverCrash) {
  // Every truncation length and a spread of byte changes: each decodes or throws a named Error
  // (never exits or aborts the process, which libjpeg's default error handler would do).
  const std::vector<uint8_t> full = encode_jpeg(test_pattern(24, 16, 3), 24, 16, 3, {90, k420, true});
  const std::string prefix = "cannot decode image d.jpg: ";
  int errors = 0, decoded = 0;
  auto run = [&](const std::vector<uint8_t>& bytes) {
    try {
      const ImageU8 img = decode_image(bytes, "d.jpg");
      EXPECT_EQ(img.rgb.size(), static_cast<size_t>(img.width) * img.height * 3);
      ++decoded;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
      ++errors;
    }
  };
  for (size_t n = 0; n < full.size(); n += 7) run({full.begin(), full.begin() + n});
  uint32_t state = 7;
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> bytes = full;
    state = state * 1664525u + 1013904223u;
    const size_t at = 2 + (state >> 8) % (bytes.size() - 2);
    bytes[at] = static_cast<uint8_t>(bytes[at] ^ (1u << (state >> 29)));
    run(bytes);
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(decoded, 0);
}

TEST(JpegDecode, ExifOrientationIsApplied) {
  const std::vector<uint8_t> jpg = encode_jpeg(test_pattern(kW, kH, 3), kW, kH, 3, {95, k420});
  const ImageU8 plain = decode_image(jpg, "a.jpg");
  struct Case {
    int orientation;
    Transpose op;
  };
  for (const Case c : {Case{3, Transpose::Rotate180}, Case{6, Transpose::Rotate270}, Case{8, Transpose::Rotate90}}) {
    SCOPED_TRACE(c.orientation);
    const std::vector<uint8_t> tagged = with_orientation(jpg, c.orientation);
    const ImageU8 img = decode_image(tagged, "o.jpg");
    const ImageU8 expect = transpose(plain, c.op);
    EXPECT_EQ(img.width, expect.width);
    EXPECT_EQ(img.rgb, expect.rgb);
    TempDir dir;
    write_file(dir.path / "o.jpg", tagged);
    EXPECT_EQ(probe_image_size(dir.path / "o.jpg"), (ImageSize{expect.width, expect.height}));
  }
}
