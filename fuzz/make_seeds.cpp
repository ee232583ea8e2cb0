// Writes the binary seed corpora of fuzz_video and fuzz_image (fuzz/make_corpus.py runs it):
//   video: tiny clips in the containers and codecs users feed (MP4/H.264 with the index in front,
//          MP4/MPEG-4 with a display rotation, Matroska/FFV1, AVI/MPEG-4), a few kilobytes each;
//   image: 8x6 PNG (RGB, 16-bit grey, alpha), JPEG (baseline, progressive, grey, EXIF orientation 6)
//          and BMP (24-bit), encoded with libpng / libjpeg-turbo / by hand.
// Usage: make_seeds VIDEO_DIR IMAGE_DIR
#include <cstddef>  // jpeglib.h uses size_t and FILE without including their headers
#include <cstdio>

#include <jpeglib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/png.h"
#include "test_video_writer.h"

namespace {

void write(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> jpeg(const lingbot::io::ImageU8& img, bool grey, bool progressive, bool exif6) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(img.width);
  c.image_height = static_cast<JDIMENSION>(img.height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  if (grey) jpeg_set_colorspace(&c, JCS_GRAYSCALE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  if (exif6) {
    // Minimal big-endian TIFF with one IFD entry: Orientation (0x0112) = 6.
    const uint8_t exif[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
                            0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0};
    jpeg_write_marker(&c, JPEG_APP0 + 1, exif, sizeof exif);
  }
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(img.rgb.data() + static_cast<size_t>(c.next_scanline) * img.width * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

std::vector<uint8_t> bmp24(const lingbot::io::ImageU8& img) {
  const int row = (img.width * 3 + 3) / 4 * 4;
  const uint32_t data = static_cast<uint32_t>(row * img.height), size = 54 + data;
  std::vector<uint8_t> b(54, 0);
  auto le = [&](size_t at, uint32_t v, int n) {
    for (int i = 0; i < n; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  };
  b[0] = 'B';
  b[1] = 'M';
  le(2, size, 4);
  le(10, 54, 4);
  le(14, 40, 4);
  le(18, static_cast<uint32_t>(img.width), 4);
  le(22, static_cast<uint32_t>(img.height), 4);
  le(26, 1, 2);
  le(28, 24, 2);
  le(34, data, 4);
  for (int y = img.height - 1; y >= 0; --y) {
    for (int x = 0; x < img.width; ++x) {
      const uint8_t* p = img.pixel(x, y);
      b.insert(b.end(), {p[2], p[1], p[0]});
    }
    b.insert(b.end(), static_cast<size_t>(row - img.width * 3), 0);
  }
  return b;
}

void images(const std::filesystem::path& out) {
  std::filesystem::create_directories(out);
  lingbot::io::ImageU8 img(8, 6);
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 8; ++x) {
      uint8_t* p = img.pixel(x, y);
      p[0] = static_cast<uint8_t>(30 * x);
      p[1] = static_cast<uint8_t>(40 * y);
      p[2] = 200;
    }
  write(out / "rgb.png", lingbot::io::encode_png_rgb8(img));
  std::vector<uint16_t> grey(48);
  for (size_t i = 0; i < grey.size(); ++i) grey[i] = static_cast<uint16_t>(1000 * i);
  write(out / "grey16.png", lingbot::io::encode_png_gray16(8, 6, grey, {}));
  write(out / "baseline.jpg", jpeg(img, false, false, false));
  write(out / "progressive.jpg", jpeg(img, false, true, false));
  write(out / "grey.jpg", jpeg(img, true, false, false));
  write(out / "exif6.jpg", jpeg(img, false, false, true));
  write(out / "rgb.bmp", bmp24(img));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds VIDEO_DIR IMAGE_DIR\n");
    return 2;
  }
  images(argv[2]);
  const std::filesystem::path out(argv[1]);
  std::filesystem::create_directories(out);
  std::vector<lingbot::io::ImageU8> frames;
  for (int i = 0; i < 4; ++i) {
    lingbot::io::ImageU8 img(16, 16);
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 16; ++x) {
        uint8_t* p = img.pixel(x, y);
        p[0] = static_cast<uint8_t>(16 * x + 40 * i);
        p[1] = static_cast<uint8_t>(16 * y);
        p[2] = static_cast<uint8_t>(60 * i);
      }
    frames.push_back(img);
  }
  struct Seed {
    const char* name;
    const char* codec;
    double rotation;
    const char* movflags;
  };
  const Seed seeds[] = {{"h264.mp4", "libx264", 0, "+faststart"}, {"mpeg4.mp4", "mpeg4", 90, nullptr},
                        {"ffv1.mkv", "ffv1", 0, nullptr},         {"mpeg4.avi", "mpeg4", 0, nullptr}};
  for (const Seed& s : seeds) {
    if (!lingbot_test::write_test_video(out / s.name, s.codec, frames, 10, s.rotation, s.movflags))
      std::fprintf(stderr, "skipped %s: no %s encoder\n", s.name, s.codec);
  }
  return 0;
}
