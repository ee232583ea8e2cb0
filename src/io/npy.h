#pragma once
// NumPy .npy files (format version 1.0), float32 little-endian, C order.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lingbot::io {

// The .npy header for a float32 C-order array of `shape`: magic, version 1.0, and the dict
// "{'descr': '<f4', 'fortran_order': False, 'shape': (...), }" padded with spaces and a newline so
// the data starts at a multiple of 64 bytes (as NumPy writes it).
std::string npy_header_f32(std::span<const int64_t> shape);
// The same for any NumPy dtype string `descr` ('<f4', '|b1', '|u1', '<i8', ...).
std::string npy_header(std::string_view descr, std::span<const int64_t> shape);

// Writes a float32 array atomically (temp file + rename). data.size() must equal the shape's
// element count. Errors: "cannot write <path>: <reason>", or a size mismatch naming both.
void write_npy_f32(const std::filesystem::path& path, std::span<const int64_t> shape,
                   std::span<const float> data);

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
// Reads a float32 ('<f4', C order) .npy file of format version 1.x/2.x.
// Errors: "invalid npy file <path>: <what is wrong>".
NpyArray read_npy_f32(const std::filesystem::path& path);

}  // namespace lingbot::io
