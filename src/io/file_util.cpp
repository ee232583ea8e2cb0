#include "io/file_util.h"

#include <stdio_ext.h>  // __fpurge (glibc, musl)
#include <unistd.h>     // ftruncate, fileno, access

#include <algorithm>
#include <cctype>
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
  if (!std::filesystem::exists(st)) throw FileNotFound(detail::concat(what, " not found: ", path.string()), path.string());
}

void check_output_folder_path(const std::filesystem::path& path, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  LINGBOT_CHECK(ec.value() != ELOOP, what, " ", path.string(), " is a symbolic link loop");
  LINGBOT_CHECK(!fs::exists(st) || fs::is_directory(st), what, " ", path.string(), " exists and is not a folder");
  for (fs::path p = path.parent_path(); !p.empty(); p = p.parent_path()) {
    const fs::file_status ps = fs::status(p, ec);
    if (!fs::exists(ps)) continue;
    LINGBOT_CHECK(fs::is_directory(ps), what, " ", path.string(), ": ", p.string(), " is not a folder");
    break;
  }
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

std::string lower_extension(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

std::filesystem::path output_file_target(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target = path;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    target = fs::weakly_canonical(path, ec);  // the file it names, which may not exist yet
    if (ec) throw Error(detail::concat("cannot write ", path.string(), ": ", ec.message()));
  }
  const fs::file_status st = fs::status(target, ec);
  if (!ec && fs::exists(st)) {
    LINGBOT_CHECK(!fs::is_directory(st), "cannot write ", path.string(), ": it is a directory");
    LINGBOT_CHECK(fs::is_regular_file(st), "cannot write ", path.string(),
                  ": it is not a regular file (a device, pipe or socket)");
  }
  return target;
}

void check_output_file(const std::filesystem::path& path) {
  const std::filesystem::path target = output_file_target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::error_code ec;
  LINGBOT_CHECK(std::filesystem::exists(dir, ec), "cannot write ", path.string(), ": folder ", dir.string(),
                " does not exist");
  LINGBOT_CHECK(std::filesystem::is_directory(dir, ec), "cannot write ", path.string(), ": ", dir.string(),
                " is not a folder");
  LINGBOT_CHECK(::access(dir.c_str(), W_OK) == 0, "cannot write ", path.string(), ": ", std::strerror(errno));
}

namespace {

// `target`'s temporary holding `bytes`, flushed; on a failure it is removed and "cannot write <path>:
// <reason>" thrown. The caller commits it (commit_temp_file) or discards it.
UniqueFile write_temp_file(const std::filesystem::path& path, const std::filesystem::path& target,
                           std::span<const uint8_t> bytes) {
  UniqueFile f(std::fopen(temp_path(target).c_str(), "wb"));
  LINGBOT_CHECK(f != nullptr, "cannot write ", path.string(), ": ", std::strerror(errno));
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f.get());
  if (written != bytes.size() || std::fflush(f.get()) != 0) {
    const int err = errno;
    f.reset();
    discard_temp_file(target);
    LINGBOT_CHECK(false, "cannot write ", path.string(), ": ", std::strerror(err));
  }
  return f;
}

// The file a whole-file write to `path` goes to: a link there replaced, or written through.
std::filesystem::path write_target(const std::filesystem::path& path, OnLink on_link) {
  std::error_code ignored;
  return on_link == OnLink::WriteThrough || !std::filesystem::is_symlink(std::filesystem::symlink_status(path, ignored))
             ? output_file_target(path)  // a link replaced needs no check of what it names
             : path;
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes, OnLink on_link) {
  const std::filesystem::path target = write_target(path, on_link);
  UniqueFile f = write_temp_file(path, target, bytes);
  if (std::fclose(f.release()) != 0) {  // a delayed write error (NFS, quota) shows at close
    const int err = errno;
    discard_temp_file(target);
    LINGBOT_CHECK(false, "cannot write ", path.string(), ": ", std::strerror(err));
  }
  commit_temp_file(target);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text, OnLink on_link) {
  write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()), on_link);
}

UniqueFile open_for_writing(const std::filesystem::path& path, const char* mode) {
  UniqueFile f(std::fopen(path.c_str(), mode));
  LINGBOT_CHECK(f != nullptr, "cannot write ", path.string(), ": ", std::strerror(errno));
  return f;
}

UniqueFile create_with_content(const std::filesystem::path& path, std::string_view initial) {
  const std::filesystem::path target = write_target(path, OnLink::Replace);  // a run's own file
  UniqueFile f = write_temp_file(path, target,
                                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(initial.data()), initial.size()));
  commit_temp_file(target);
  return f;
}

bool roll_back_failed_append(std::FILE* f, long valid_bytes) {
  __fpurge(f);
  std::clearerr(f);
  const bool cut = ::ftruncate(::fileno(f), valid_bytes) == 0;
  return std::fseek(f, valid_bytes, SEEK_SET) == 0 && cut;
}

void cut_file_back(std::FILE* f, const std::filesystem::path& path, long bytes) {
  if (!roll_back_failed_append(f, bytes))
    throw Error(detail::concat("cannot cut ", path.string(), " back to ", bytes, " bytes: ", std::strerror(errno)));
}

void remove_output_file(const std::filesystem::path& path) {
  for (const std::filesystem::path& p : {path, temp_path(path)}) {
    std::error_code ec;
    if (std::filesystem::is_directory(std::filesystem::symlink_status(p, ec))) continue;
    std::filesystem::remove(p, ec);
    LINGBOT_CHECK(!ec, "cannot remove ", p.string(), ": ", ec.message());
  }
}

void check_output_file_target(const std::filesystem::path& path) {
  for (const std::filesystem::path& p : {path, temp_path(path)}) {  // the temporary is renamed over it
    std::error_code ec;
    LINGBOT_CHECK(!std::filesystem::is_directory(std::filesystem::symlink_status(p, ec)), "cannot write ", p.string(),
                  ": a folder of that name exists (move or remove it)");
  }
}

std::string frame_file_name(int64_t index, std::string_view suffix) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%06lld", static_cast<long long>(index));
  return std::string(digits) + std::string(suffix);
}

bool is_frame_file_name(std::string_view name, std::string_view suffix) {
  if (name.size() < 6 + suffix.size() || !name.ends_with(suffix)) return false;
  const std::string_view digits = name.substr(0, name.size() - suffix.size());
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace lingbot::io
