#pragma once
// ByteSource: random-access, bounds-checked reads from a file (pread), a memory-mapped file, or an
// in-memory buffer. Checkpoint readers read tensor data through it straight into the tensor's own
// buffer, so a file is never held twice in memory; from a mapped file they borrow the mapping
// instead (no copy at all: tensors share the page cache, also with other processes).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lingbot::io {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at offset into dst; throws Error naming label() when [offset, offset+n)
  // is outside the source or the read fails.
  virtual void read_at(uint64_t offset, void* dst, size_t n) const = 0;
  // Name used in error messages (the file path, or a caller-given label for memory sources).
  virtual const std::string& label() const = 0;
  // The whole source as one read-only-shared block (size() bytes) for sources made by map_file();
  // null otherwise. Memory borrowed from it stays valid while any copy of the pointer lives. The
  // mapping is private copy-on-write: writing through it never changes the file.
  virtual std::shared_ptr<uint8_t> mapping() const { return nullptr; }

  static std::unique_ptr<ByteSource> open_file(const std::string& path);
  // mmap()s the file (MAP_PRIVATE); pages are read on first touch. Throws Error naming the file.
  static std::unique_ptr<ByteSource> map_file(const std::string& path);
  static std::unique_ptr<ByteSource> from_memory(std::vector<uint8_t> bytes, std::string label);
};

}  // namespace lingbot::io
