#include "io/zip_writer.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/zip_archive.h"

namespace lingbot::io {

namespace {

constexpr uint16_t kVersion = 20;     // 2.0: the version every reader supports
constexpr uint16_t kDosDate = 0x21;   // 1980-01-01
constexpr uint16_t kDosTime = 0;

void le16(std::string& s, uint16_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>(v >> 8);
}
void le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

ZipWriter::ZipWriter(const std::filesystem::path& path) : path_(path), file_(open_for_writing(path)) {}

void ZipWriter::put(const void* data, size_t n) {
  if (n == 0) return;
  LINGBOT_CHECK(std::fwrite(data, 1, n, file_.get()) == n, "cannot write ", path_.string(), ": ", std::strerror(errno));
  pos_ += n;
}

void ZipWriter::begin_entry(const std::string& name) {
  LINGBOT_CHECK(file_ != nullptr && !in_entry_, "zip ", path_.string(), ": begin_entry out of order");
  LINGBOT_CHECK(!name.empty() && name.size() < 0xFFFF, "zip ", path_.string(), ": bad entry name '", name, "'");
  LINGBOT_CHECK(entries_.size() < 0xFFFF, "zip ", path_.string(), ": more than 65534 entries");
  entries_.push_back({name, 0, 0, pos_});
  std::string h;
  le32(h, 0x04034b50);
  le16(h, kVersion);
  le16(h, 0);  // flags
  le16(h, 0);  // stored
  le16(h, kDosTime);
  le16(h, kDosDate);
  le32(h, 0);  // crc, patched in end_entry
  le32(h, 0);  // compressed size
  le32(h, 0);  // size
  le16(h, static_cast<uint16_t>(name.size()));
  le16(h, 0);  // extra
  h += name;
  put(h.data(), h.size());
  in_entry_ = true;
}

void ZipWriter::write(const void* data, size_t n) {
  LINGBOT_CHECK(in_entry_, "zip ", path_.string(), ": write outside an entry");
  Entry& e = entries_.back();
  LINGBOT_CHECK(e.size + n <= kMaxBytes && pos_ + n <= kMaxBytes, "cannot write ", path_.string(),
                ": the archive would exceed 4 GiB (ZIP64 is not written)");
  e.crc = crc32(data, n, e.crc);
  e.size += n;
  put(data, n);
}

void ZipWriter::end_entry() {
  LINGBOT_CHECK(in_entry_, "zip ", path_.string(), ": end_entry without begin_entry");
  const Entry& e = entries_.back();
  std::string fields;
  le32(fields, e.crc);
  le32(fields, static_cast<uint32_t>(e.size));
  le32(fields, static_cast<uint32_t>(e.size));
  LINGBOT_CHECK(std::fseek(file_.get(), static_cast<long>(e.offset + 14), SEEK_SET) == 0 &&
                    std::fwrite(fields.data(), 1, fields.size(), file_.get()) == fields.size() &&
                    std::fseek(file_.get(), 0, SEEK_END) == 0,
                "cannot write ", path_.string(), ": ", std::strerror(errno));
  in_entry_ = false;
}

void ZipWriter::add_entry(const std::string& name, std::span<const uint8_t> bytes) {
  begin_entry(name);
  write(bytes.data(), bytes.size());
  end_entry();
}

void ZipWriter::close() {
  LINGBOT_CHECK(file_ != nullptr && !in_entry_, "zip ", path_.string(), ": close out of order");
  const uint64_t cd_offset = pos_;
  std::string cd;
  for (const Entry& e : entries_) {
    le32(cd, 0x02014b50);
    le16(cd, kVersion);  // made by
    le16(cd, kVersion);  // needed
    le16(cd, 0);
    le16(cd, 0);
    le16(cd, kDosTime);
    le16(cd, kDosDate);
    le32(cd, e.crc);
    le32(cd, static_cast<uint32_t>(e.size));
    le32(cd, static_cast<uint32_t>(e.size));
    le16(cd, static_cast<uint16_t>(e.name.size()));
    le16(cd, 0);  // extra
    le16(cd, 0);  // comment
    le16(cd, 0);  // disk
    le16(cd, 0);  // internal attributes
    le32(cd, 0);  // external attributes
    le32(cd, static_cast<uint32_t>(e.offset));
    cd += e.name;
  }
  LINGBOT_CHECK(cd_offset + cd.size() + 22 <= kMaxBytes, "cannot write ", path_.string(),
                ": the archive would exceed 4 GiB (ZIP64 is not written)");
  const uint32_t cd_size = static_cast<uint32_t>(cd.size());
  le32(cd, 0x06054b50);
  le16(cd, 0);
  le16(cd, 0);
  le16(cd, static_cast<uint16_t>(entries_.size()));
  le16(cd, static_cast<uint16_t>(entries_.size()));
  le32(cd, cd_size);
  le32(cd, static_cast<uint32_t>(cd_offset));
  le16(cd, 0);  // comment
  put(cd.data(), cd.size());
  const int rc = std::fclose(file_.release());
  LINGBOT_CHECK(rc == 0, "cannot write ", path_.string(), ": ", std::strerror(errno));
}

}  // namespace lingbot::io
