#include "io/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace lingbot::io {

void check_path_exists(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  LINGBOT_CHECK(ec.value() != ELOOP, what, " ", path.string(), " is a symbolic link loop (", ec.message(), ")");
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw Error(detail::concat("cannot access ", what, " ", path.string(), ": ", ec.message()));
  LINGBOT_CHECK(std::filesystem::exists(st), what, " not found: ", path.string());
}

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  check_path_exists(path, what);
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

void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
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
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    LINGBOT_CHECK(false, "cannot write ", path.string(), ": ", ec.message());
  }
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace lingbot::io
