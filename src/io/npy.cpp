#include "io/npy.h"

#include <bit>
#include <charconv>
#include <cstring>

#include "core/error.h"
#include "io/file_util.h"
#include "io/tensor_map.h"  // checked_numel

namespace lingbot::io {

static_assert(std::endian::native == std::endian::little, "the io writers assume a little-endian host");

std::string npy_header_f32(std::span<const int64_t> shape) { return npy_header("<f4", shape); }

std::string npy_header(std::string_view descr, std::span<const int64_t> shape) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += shape.size() == 1 ? "," : ", ";
  }
  dict += "), }";
  const size_t prefix = 10;  // magic(6) + version(2) + header length(2)
  size_t total = prefix + dict.size() + 1;
  total = (total + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const uint16_t len = static_cast<uint16_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  return out + dict;
}

void write_npy_f32(const std::filesystem::path& path, std::span<const int64_t> shape,
                   std::span<const float> data) {
  int64_t n = 1;
  for (int64_t d : shape) {
    LINGBOT_CHECK(d >= 0, "cannot write ", path.string(), ": negative dimension ", d);
    n *= d;
  }
  LINGBOT_CHECK(static_cast<size_t>(n) == data.size(), "cannot write ", path.string(), ": shape holds ", n,
                " values but ", data.size(), " were given");
  const std::string header = npy_header_f32(shape);
  std::vector<uint8_t> bytes(header.size() + data.size_bytes());
  std::memcpy(bytes.data(), header.data(), header.size());
  if (!data.empty()) std::memcpy(bytes.data() + header.size(), data.data(), data.size_bytes());  // host is little-endian
  write_file_atomic(path, bytes);
}

NpyArray read_npy_f32(const std::filesystem::path& path) {
  const std::vector<uint8_t> b = read_file_bytes(path, "npy file");
  const std::string name = path.string();
  LINGBOT_CHECK(b.size() >= 10 && std::memcmp(b.data(), "\x93NUMPY", 6) == 0, "invalid npy file ", name,
                ": bad magic");
  const int major = b[6];
  size_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = b[8] | (size_t{b[9]} << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    LINGBOT_CHECK(b.size() >= 12, "invalid npy file ", name, ": truncated header");
    hlen = b[8] | (size_t{b[9]} << 8) | (size_t{b[10]} << 16) | (size_t{b[11]} << 24);
    start = 12;
  } else {
    LINGBOT_CHECK(false, "invalid npy file ", name, ": unsupported version ", major);
  }
  LINGBOT_CHECK(start + hlen <= b.size(), "invalid npy file ", name, ": truncated header");
  const std::string dict(reinterpret_cast<const char*>(b.data() + start), hlen);
  LINGBOT_CHECK(dict.find("'descr': '<f4'") != std::string::npos, "invalid npy file ", name,
                ": dtype is not little-endian float32 ('<f4')");
  LINGBOT_CHECK(dict.find("'fortran_order': False") != std::string::npos, "invalid npy file ", name,
                ": Fortran order is not supported");
  const size_t sp = dict.find("'shape': (");
  LINGBOT_CHECK(sp != std::string::npos, "invalid npy file ", name, ": no shape");
  const size_t close = dict.find(')', sp);
  LINGBOT_CHECK(close != std::string::npos, "invalid npy file ", name, ": unterminated shape");
  NpyArray arr;
  const std::string dims = dict.substr(sp + 10, close - sp - 10);
  size_t pos = 0;
  while (pos < dims.size()) {
    while (pos < dims.size() && (dims[pos] == ' ' || dims[pos] == ',')) ++pos;
    if (pos >= dims.size()) break;
    int64_t d = -1;
    const auto [end, ec] = std::from_chars(dims.data() + pos, dims.data() + dims.size(), d);
    LINGBOT_CHECK(ec == std::errc() && d >= 0, "invalid npy file ", name, ": bad shape (", dims, ")");
    arr.shape.push_back(d);
    pos = static_cast<size_t>(end - dims.data());
  }
  const int64_t n = checked_numel(arr.shape, "invalid npy file " + name);  // a declared shape is untrusted: no overflow
  const size_t data_start = start + hlen, data_bytes = b.size() - data_start;
  LINGBOT_CHECK(data_bytes % 4 == 0 && data_bytes / 4 == static_cast<size_t>(n), "invalid npy file ", name,
                ": the shape holds ", n, " float32 values, found ", data_bytes, " data bytes");
  arr.data.resize(static_cast<size_t>(n));
  if (n > 0) std::memcpy(arr.data.data(), b.data() + data_start, static_cast<size_t>(n) * 4);
  return arr;
}

}  // namespace lingbot::io
