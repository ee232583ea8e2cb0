#pragma once
// PNG encoding with libpng: 8-bit RGB images and 16-bit greyscale maps (depth, confidence), with
// optional tEXt key/value chunks that make a map self-describing (e.g. its unit).
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "io/image.h"

namespace lingbot::io {

struct PngText {
  std::string key;    // 1..79 Latin-1 characters
  std::string value;
};

std::vector<uint8_t> encode_png_rgb8(const ImageU8& img);
// values: width * height samples, row-major.
std::vector<uint8_t> encode_png_gray16(int width, int height, std::span<const uint16_t> values,
                                       std::span<const PngText> text = {});

// Atomic file writes (temp file + rename). Errors: "cannot write <path>: <reason>".
void write_png_rgb8(const std::filesystem::path& path, const ImageU8& img);
void write_png_gray16(const std::filesystem::path& path, int width, int height,
                      std::span<const uint16_t> values, std::span<const PngText> text = {});

}  // namespace lingbot::io
