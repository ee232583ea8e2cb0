#pragma once
// ByteSource: random-access, bounds-checked reads from a file (pread) or an in-memory buffer.
// Checkpoint readers read tensor data through it straight into the tensor's own buffer, so a file is
// never held twice in memory (page-cache pages are not part of the process RSS).
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

  static std::unique_ptr<ByteSource> open_file(const std::string& path);
  static std::unique_ptr<ByteSource> from_memory(std::vector<uint8_t> bytes, std::string label);
};

}  // namespace lingbot::io
