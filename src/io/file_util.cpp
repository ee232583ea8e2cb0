#include "io/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace lingbot::io {

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  LINGBOT_CHECK(exists, what, " not found: ", path.string());
  LINGBOT_CHECK(!std::filesystem::is_directory(path, ec), "cannot read ", what, " ", path.string(),
                ": is a directory");
  std::ifstream in(path, std::ios::binary);
  LINGBOT_CHECK(in.good(), "cannot read ", what, " ", path.string(), ": ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  LINGBOT_CHECK(size >= 0, "cannot read ", what, " ", path.string(), ": cannot determine size");
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  LINGBOT_CHECK(in.good() || size == 0, "cannot read ", what, " ", path.string(), ": read failed");
  return bytes;
}

std::filesystem::path temp_path(const std::filesystem::path& path) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  return tmp;
}

void discard_temp_file(const std::filesystem::path& path) {
  std::error_code ignored;
  std::filesystem::remove(temp_path(path), ignored);
}

void commit_temp_file(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::rename(temp_path(path), path, ec);
  if (ec) {
    discard_temp_file(path);
    LINGBOT_CHECK(false, "cannot write ", path.string(), ": ", ec.message());
  }
}

void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  const std::filesystem::path tmp = temp_path(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  LINGBOT_CHECK(f != nullptr, "cannot write ", path.string(), ": ", std::strerror(errno));
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = written == bytes.size() && std::fflush(f) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    LINGBOT_CHECK(false, "cannot write ", path.string(), ": ", std::strerror(err));
  }
  commit_temp_file(path);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace lingbot::io
