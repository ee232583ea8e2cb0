#include "io/zip_archive.h"

#include <algorithm>
#include <cstring>
#include <zlib.h>

#include "core/error.h"

namespace lingbot::io {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kMaxCentralDirBytes = 512ull << 20;

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint64_t u64(const uint8_t* p) { return u32(p) | (static_cast<uint64_t>(u32(p + 4)) << 32); }

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  // zlib's (the same CRC-32 as ZIP's); its length is a 32-bit uInt, so large buffers go in pieces.
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, size_t{1} << 30));
    c = ::crc32(c, p, piece);
    p += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(c);
}

bool looks_like_zip(const ByteSource& source) {
  if (source.size() < 4) return false;
  uint8_t b[4];
  source.read_at(0, b, 4);
  return u32(b) == kLocalSig || u32(b) == kEocdSig;
}

ZipDirectory::ZipDirectory(const ByteSource& source) : src_(source) {
  const std::string& file = source.label();
  const uint64_t size = source.size();
  LINGBOT_CHECK(size >= 22, file, ": not a zip archive (", size, " bytes)");
  // The end-of-central-directory record sits in the last 22 + 65535 (max comment) bytes.
  const uint64_t tail_len = std::min<uint64_t>(size, 22 + 65535);
  std::vector<uint8_t> tail(tail_len);
  source.read_at(size - tail_len, tail.data(), tail_len);
  int64_t pos = -1;
  for (int64_t i = static_cast<int64_t>(tail_len) - 22; i >= 0; --i) {
    if (u32(&tail[i]) == kEocdSig && static_cast<uint64_t>(i) + 22 + u16(&tail[i + 20]) == tail_len) {
      pos = i;
      break;
    }
  }
  LINGBOT_CHECK(pos >= 0, file, ": no zip end-of-central-directory record (truncated, or not a zip archive)");
  const uint8_t* e = &tail[pos];
  const uint64_t eocd_offset = size - tail_len + static_cast<uint64_t>(pos);
  uint64_t count = u16(e + 10);
  uint64_t cd_size = u32(e + 12);
  uint64_t cd_offset = u32(e + 16);
  LINGBOT_CHECK(u16(e + 4) == 0 && u16(e + 6) == 0, file, ": multi-disk zip archives are not supported");
  if (count == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu) {
    LINGBOT_CHECK(eocd_offset >= 20, file, ": ZIP64 locator missing");
    uint8_t loc[20];
    source.read_at(eocd_offset - 20, loc, 20);
    LINGBOT_CHECK(u32(loc) == kZip64LocatorSig, file, ": ZIP64 end-of-directory locator missing or corrupt");
    const uint64_t z64 = u64(loc + 8);
    LINGBOT_CHECK(z64 <= eocd_offset && eocd_offset - z64 >= 56, file, ": ZIP64 end-of-directory offset ", z64, " is out of range");
    uint8_t r[56];
    source.read_at(z64, r, 56);
    LINGBOT_CHECK(u32(r) == kZip64EocdSig, file, ": ZIP64 end-of-directory record corrupt");
    count = u64(r + 32);
    cd_size = u64(r + 40);
    cd_offset = u64(r + 48);
  }
  LINGBOT_CHECK(cd_offset <= eocd_offset && cd_size <= eocd_offset - cd_offset, file, ": central directory [", cd_offset, ", +",
                cd_size, ") lies outside the archive (truncated or corrupt)");
  LINGBOT_CHECK(cd_size <= kMaxCentralDirBytes, file, ": central directory of ", cd_size, " bytes is implausibly large");
  LINGBOT_CHECK(count <= cd_size / 46, file, ": zip directory claims ", count, " entries in ", cd_size, " bytes (corrupt)");
  std::vector<uint8_t> cd(cd_size);
  source.read_at(cd_offset, cd.data(), cd_size);
  size_t p = 0;
  entries_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    LINGBOT_CHECK(cd_size - p >= 46 && u32(&cd[p]) == kCentralSig, file, ": central directory entry ", i, " is corrupt");
    const uint8_t* h = &cd[p];
    Entry en;
    en.method = u16(h + 10);
    en.crc32 = u32(h + 16);
    en.compressed_size = u32(h + 20);
    en.size = u32(h + 24);
    const size_t name_len = u16(h + 28), extra_len = u16(h + 30), comment_len = u16(h + 32);
    en.local_header_offset = u32(h + 42);
    LINGBOT_CHECK(cd_size - p - 46 >= name_len + extra_len + comment_len, file, ": central directory entry ", i, " is truncated");
    en.name.assign(reinterpret_cast<const char*>(h + 46), name_len);
    // ZIP64 extended information: only the fields whose 32-bit value is saturated are present.
    const uint8_t* x = h + 46 + name_len;
    for (size_t q = 0; q + 4 <= extra_len;) {
      const uint16_t id = u16(x + q), len = u16(x + q + 2);
      LINGBOT_CHECK(q + 4 + len <= extra_len, file, ": zip entry '", en.name, "' has a corrupt extra field");
      if (id == 0x0001) {
        size_t f = q + 4;
        auto take = [&](uint64_t& v) {
          if (v != 0xffffffffu) return;
          LINGBOT_CHECK(f + 8 <= q + 4 + len, file, ": zip entry '", en.name, "' has a truncated ZIP64 field");
          v = u64(x + f);
          f += 8;
        };
        take(en.size);
        take(en.compressed_size);
        take(en.local_header_offset);
      }
      q += 4 + len;
    }
    LINGBOT_CHECK(index_.emplace(en.name, entries_.size()).second, file, ": zip entry '", en.name, "' appears twice");
    entries_.push_back(std::move(en));
    p += 46 + name_len + extra_len + comment_len;
  }
}

const ZipDirectory::Entry* ZipDirectory::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

uint64_t ZipDirectory::data_offset(const Entry& e) const {
  const std::string& file = src_.label();
  LINGBOT_CHECK(e.method == 0, file, ": zip entry '", e.name, "' is compressed (method ", e.method,
                "); torch.save writes stored entries, re-save the checkpoint");
  LINGBOT_CHECK(e.compressed_size == e.size, file, ": zip entry '", e.name, "' is stored but its sizes differ (corrupt)");
  LINGBOT_CHECK(e.local_header_offset <= src_.size() && src_.size() - e.local_header_offset >= 30, file, ": zip entry '", e.name,
                "' local header offset ", e.local_header_offset, " is outside the archive");
  uint8_t h[30];
  src_.read_at(e.local_header_offset, h, 30);
  LINGBOT_CHECK(u32(h) == kLocalSig, file, ": zip entry '", e.name, "' has a corrupt local header");
  const uint64_t start = e.local_header_offset + 30 + u16(h + 26) + u16(h + 28);
  LINGBOT_CHECK(start <= src_.size() && e.size <= src_.size() - start, file, ": zip entry '", e.name, "' (", e.size,
                " bytes at offset ", start, ") runs past the end of the archive (truncated)");
  return start;
}

}  // namespace lingbot::io
