#pragma once
// Test helper: encodes JPEGs with libjpeg, so JPEG tests need no committed files.
#include <cstdint>
#include <cstdio>  // before jpeglib.h, which uses FILE
#include <cstdlib>
#include <vector>

#include <jpeglib.h>

namespace lingbot_test {

// Chroma sampling of an encoded JPEG: luma's factors (chroma is 1x1), as PIL's "subsampling".
struct Sampling {
  int h = 1;
  int v = 1;
};
inline constexpr Sampling k444{1, 1}, k422{2, 1}, k420{2, 2}, k440{1, 2};

struct EncodeOptions {
  int quality = 95;
  Sampling sampling = k420;
  bool progressive = false;
  int restart_rows = 0;  // restart interval in MCU rows (0: none)
};

// Encodes 8-bit samples (1 = grey, 3 = RGB, 4 = CMYK as stored, i.e. Adobe-inverted; 2 = no
// colour space) with libjpeg.
inline std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& px, int w, int h, int comps,
                                        const EncodeOptions& opt = {}) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);  // encoding valid input cannot fail
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : comps == 4 ? JCS_CMYK : JCS_UNKNOWN;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, opt.quality, TRUE);
  if (comps == 3) {
    c.comp_info[0].h_samp_factor = opt.sampling.h;
    c.comp_info[0].v_samp_factor = opt.sampling.v;
  }
  if (opt.progressive) jpeg_simple_progression(&c);
  c.restart_in_rows = opt.restart_rows;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + static_cast<size_t>(c.next_scanline) * w * comps;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// A JPEG whose scan data is cut at `keep` (a fraction of the file) and closed with an EOI marker:
// libjpeg decodes it, warning "Corrupt JPEG data: premature end of data segment", and fills the
// rest of the picture in (as Pillow, which decodes it silently).
inline std::vector<uint8_t> cut_scan_jpeg(const std::vector<uint8_t>& jpeg, double keep = 0.75) {
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(static_cast<double>(jpeg.size()) * keep));
  cut.push_back(0xff);
  cut.push_back(0xd9);
  return cut;
}

// A w x h RGB picture with detail everywhere (so every scan segment holds data).
inline std::vector<uint8_t> textured_rgb(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        px[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>((x * 7 + y * 13 + c * 50 + (x * y) % 23) & 255);
  return px;
}

}  // namespace lingbot_test
