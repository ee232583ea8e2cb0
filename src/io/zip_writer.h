#pragma once
// Writes a ZIP archive of stored (uncompressed) entries: the container of NumPy's .npz (np.savez
// stores its entries the same way). The counterpart of io/zip_archive.h's reader. Entries are
// streamed: begin_entry(), any number of write() calls, end_entry(); the entry's CRC-32 and sizes
// are patched into its local header afterwards, so memory does not depend on the entry size.
// ZIP64 is not written: an entry, the archive and the entry count must stay below the classic
// limits (4 GiB - 1 bytes, 65535 entries); exceeding them is an Error, never a corrupt file.
// Timestamps are fixed (1980-01-01 00:00), so equal content gives equal files.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "io/file_util.h"

namespace lingbot::io {

class ZipWriter {
 public:
  // Creates (truncates) `path`. Error: "cannot write <path>: <reason>".
  explicit ZipWriter(const std::filesystem::path& path);
  // The file closes when the writer goes; an archive not close()d lacks its directory (invalid).
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  void begin_entry(const std::string& name);
  void write(const void* data, size_t n);
  void end_entry();
  void add_entry(const std::string& name, std::span<const uint8_t> bytes);  // begin + write + end
  // Writes the central directory and closes the file.
  void close();

  // The classic ZIP limit on sizes and offsets (without ZIP64).
  static constexpr uint64_t kMaxBytes = 0xFFFFFFFFull;

 private:
  struct Entry {
    std::string name;
    uint32_t crc = 0;
    uint64_t size = 0;
    uint64_t offset = 0;  // of the local header
  };
  void put(const void* data, size_t n);
  std::filesystem::path path_;
  UniqueFile file_;
  uint64_t pos_ = 0;
  std::vector<Entry> entries_;
  bool in_entry_ = false;
};

}  // namespace lingbot::io
