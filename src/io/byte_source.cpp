#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/unique_fd.h"

namespace lingbot::io {

namespace {

void check_range(const ByteSource& s, uint64_t offset, size_t n) {
  LINGBOT_CHECK(offset <= s.size() && n <= s.size() - offset, s.label(), ": read of ", n, " bytes at offset ", offset,
                " is past the end of the data (", s.size(), " bytes); the file is truncated or corrupt");
}

// An open regular file and its size. Errors: "cannot open '<path>': <reason>", "'<path>' is not a
// regular file".
struct RegularFile {
  UniqueFd fd;
  uint64_t size = 0;
};

RegularFile open_regular_file(const std::string& path) {
  RegularFile f{UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))};
  LINGBOT_CHECK(f.fd.valid(), "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  LINGBOT_CHECK(::fstat(f.fd.get(), &st) == 0 && S_ISREG(st.st_mode), "'", path, "' is not a regular file");
  f.size = static_cast<uint64_t>(st.st_size);
  return f;
}

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path), file_(open_regular_file(path)) {}

  uint64_t size() const override { return file_.size; }
  const std::string& label() const override { return path_; }
  void read_at(uint64_t offset, void* dst, size_t n) const override {
    check_range(*this, offset, n);
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
      const ssize_t got = ::pread(file_.fd.get(), p, chunk, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      LINGBOT_CHECK(got > 0, path_, ": read failed at offset ", offset, ": ", got < 0 ? std::strerror(errno) : "unexpected end of file");
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  }

 private:
  std::string path_;
  RegularFile file_;
};

class MappedSource final : public ByteSource {
 public:
  explicit MappedSource(const std::string& path) : path_(path) {
    const RegularFile file = open_regular_file(path);  // closed on return: the mapping keeps the file referenced
    size_ = file.size;
    if (size_ == 0) {  // mmap of 0 bytes fails; an empty mapping is a valid empty source
      map_ = std::shared_ptr<uint8_t>(new uint8_t[1], std::default_delete<uint8_t[]>());
      return;
    }
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd.get(), 0);
    LINGBOT_CHECK(p != MAP_FAILED, "cannot memory-map '", path, "': ", std::strerror(errno));
    const size_t len = size_;
    map_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [len](uint8_t* q) { ::munmap(q, len); });
  }

  uint64_t size() const override { return size_; }
  const std::string& label() const override { return path_; }
  std::shared_ptr<uint8_t> mapping() const override { return map_; }
  void read_at(uint64_t offset, void* dst, size_t n) const override {
    check_range(*this, offset, n);
    if (n) std::memcpy(dst, map_.get() + offset, n);
  }

 private:
  std::string path_;
  uint64_t size_ = 0;
  std::shared_ptr<uint8_t> map_;
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

std::unique_ptr<ByteSource> ByteSource::map_file(const std::string& path) {
  return std::make_unique<MappedSource>(path);
}

std::unique_ptr<ByteSource> ByteSource::from_memory(std::vector<uint8_t> bytes, std::string label) {
  return std::make_unique<MemorySource>(std::move(bytes), std::move(label));
}

}  // namespace lingbot::io
