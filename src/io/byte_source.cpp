#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lingbot::io {

namespace {

void check_range(const ByteSource& s, uint64_t offset, size_t n) {
  LINGBOT_CHECK(offset <= s.size() && n <= s.size() - offset, s.label(), ": read of ", n, " bytes at offset ", offset,
                " is past the end of the data (", s.size(), " bytes); the file is truncated or corrupt");
}

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    LINGBOT_CHECK(fd_ >= 0, "cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error(detail::concat("'", path, "' is not a regular file"));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~FileSource() override { ::close(fd_); }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  uint64_t size() const override { return size_; }
  const std::string& label() const override { return path_; }
  void read_at(uint64_t offset, void* dst, size_t n) const override {
    check_range(*this, offset, n);
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
      const ssize_t got = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      LINGBOT_CHECK(got > 0, path_, ": read failed at offset ", offset, ": ", got < 0 ? std::strerror(errno) : "unexpected end of file");
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::vector<uint8_t> bytes, std::string label) : bytes_(std::move(bytes)), label_(std::move(label)) {}
  uint64_t size() const override { return bytes_.size(); }
  const std::string& label() const override { return label_; }
  void read_at(uint64_t offset, void* dst, size_t n) const override {
    check_range(*this, offset, n);
    if (n) std::memcpy(dst, bytes_.data() + offset, n);
  }

 private:
  std::vector<uint8_t> bytes_;
  std::string label_;
};

}  // namespace

std::unique_ptr<ByteSource> ByteSource::open_file(const std::string& path) { return std::make_unique<FileSource>(path); }

std::unique_ptr<ByteSource> ByteSource::from_memory(std::vector<uint8_t> bytes, std::string label) {
  return std::make_unique<MemorySource>(std::move(bytes), std::move(label));
}

}  // namespace lingbot::io
