#pragma once
// Minimal read-only ZIP directory reader for PyTorch checkpoints (torch.save's zip format).
// Parses the end-of-central-directory record (ZIP64 included), the central directory and, on demand,
// local headers, with every offset and size bounds-checked against the file. Entries are only
// located, never decompressed: torch.save stores them uncompressed, so an entry's bytes can be read
// straight from the file into their final buffer.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/byte_source.h"

namespace lingbot::io {

class ZipDirectory {
 public:
  struct Entry {
    std::string name;
    uint16_t method = 0;        // 0 = stored
    uint64_t compressed_size = 0;
    uint64_t size = 0;          // uncompressed
    uint64_t local_header_offset = 0;
    uint32_t crc32 = 0;
  };

  // Throws Error (naming source.label()) for a missing/corrupt directory or duplicate entry names.
  explicit ZipDirectory(const ByteSource& source);

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(std::string_view name) const;
  // Absolute file offset of the entry's bytes; checks the local header and that the entry is stored
  // uncompressed and lies inside the file.
  uint64_t data_offset(const Entry& e) const;

 private:
  const ByteSource& src_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Standard CRC-32 (IEEE 802.3), as stored in ZIP headers.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

// True when the source starts with a ZIP local-file or end-of-directory signature.
bool looks_like_zip(const ByteSource& source);

}  // namespace lingbot::io
