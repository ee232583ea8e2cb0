#include "io/image_orientation.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace lingbot::io {
namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string_view as_text(std::span<const uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// The Orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block as Pillow 9.4's
// ImageFileDirectory_v2 reads it: nullopt when absent (no entry, count 0, a type Pillow does not
// know, a malformed header); else its first value when that is a number equal to an integer (any
// numeric type: Pillow's dict lookup finds 6 for a SHORT 6, a RATIONAL 6/1 or a FLOAT 6.0), else 0
// (present, not an orientation: BYTE, which Pillow reads as bytes, text). A present tag keeps XMP's
// from being read. Of duplicate entries the last counts; an entry whose data lies past the block
// ends the directory there (Pillow stops reading at the failed read), as does a truncated one.
std::optional<uint32_t> tiff_orientation_tag(std::span<const uint8_t> tiff) {
  if (tiff.size() < 8) return std::nullopt;
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little = false;
  } else {
    return std::nullopt;
  }
  auto u16 = [&](size_t off) -> uint32_t {
    return little ? (tiff[off] | (tiff[off + 1] << 8)) : ((tiff[off] << 8) | tiff[off + 1]);
  };
  auto u32 = [&](size_t off) -> uint32_t {
    return little ? (u16(off) | (u16(off + 2) << 16)) : ((u16(off) << 16) | u16(off + 2));
  };
  auto u64 = [&](size_t off) -> uint64_t {
    return little ? (uint64_t{u32(off + 4)} << 32 | u32(off)) : (uint64_t{u32(off)} << 32 | u32(off + 4));
  };
  if (u16(2) != 42) return std::nullopt;
  const size_t ifd = u32(4);
  if (ifd > tiff.size() - 2) return std::nullopt;
  // Bytes per value of the TIFF types Pillow loads (0: unknown to it): 1 BYTE, 2 ASCII, 3 SHORT,
  // 4 LONG, 5 RATIONAL, 6 SBYTE, 7 UNDEFINED, 8 SSHORT, 9 SLONG, 10 SRATIONAL, 11 FLOAT, 12 DOUBLE,
  // 13 IFD, 16 LONG8, 17 SLONG8, 18 IFD8.
  constexpr size_t kTypeSize[19] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8, 4, 0, 0, 8, 8, 8};
  std::optional<uint32_t> found;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + i * 12;
    if (e + 12 > tiff.size()) break;
    const uint32_t type = u16(e + 2), n = u32(e + 4);
    if (type > 18 || kTypeSize[type] == 0) continue;  // Pillow skips a type it does not know
    const uint64_t bytes = uint64_t{kTypeSize[type]} * n;
    size_t at = e + 8;
    if (bytes > 4) {
      at = u32(e + 8);
      if (at > tiff.size() || bytes > tiff.size() - at) break;  // Pillow's read fails: the directory ends
    }
    if (u16(e) != 0x0112 || n == 0) continue;  // no value: absent
    double v = -1;  // not a number
    switch (type) {
      case 3: v = u16(at); break;
      case 4: case 13: v = u32(at); break;
      case 6: v = static_cast<int8_t>(tiff[at]); break;
      case 8: v = static_cast<int16_t>(u16(at)); break;
      case 9: v = static_cast<int32_t>(u32(at)); break;
      case 16: case 18: v = static_cast<double>(u64(at)); break;
      case 17: v = static_cast<double>(static_cast<int64_t>(u64(at))); break;
      case 5: v = u32(at + 4) ? static_cast<double>(u32(at)) / u32(at + 4) : -1; break;
      case 10: {
        const auto den = static_cast<int32_t>(u32(at + 4));
        v = den ? static_cast<double>(static_cast<int32_t>(u32(at))) / den : -1;
        break;
      }
      case 11: {
        const uint32_t raw = u32(at);
        float f;
        std::memcpy(&f, &raw, 4);
        v = f;
        break;
      }
      case 12: {
        const uint64_t raw = u64(at);
        std::memcpy(&v, &raw, 8);
        break;
      }
      default: break;  // BYTE (bytes to Pillow), ASCII, UNDEFINED: not a number
    }
    found = v >= 1 && v <= 8 && v == static_cast<double>(static_cast<uint32_t>(v)) ? static_cast<uint32_t>(v) : 0;
  }
  return found;
}

// Pillow's re.search(r'tiff:Orientation(="|>)([0-9])', xmp): the first such digit.
std::optional<uint32_t> xmp_orientation(std::string_view xmp) {
  constexpr std::string_view kKey = "tiff:Orientation";
  for (size_t at = xmp.find(kKey); at != std::string_view::npos; at = xmp.find(kKey, at + 1)) {
    std::string_view rest = xmp.substr(at + kKey.size());
    if (rest.starts_with("=\"")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with(">")) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    if (!rest.empty() && rest[0] >= '0' && rest[0] <= '9') return static_cast<uint32_t>(rest[0] - '0');
  }
  return std::nullopt;
}

int orientation_of(std::optional<uint32_t> exif_tag, std::string_view xmp) {
  const std::optional<uint32_t> v = exif_tag ? exif_tag : xmp_orientation(xmp);
  return v && *v >= 1 && *v <= 8 ? static_cast<int>(*v) : 1;
}

// Pillow's Exif.load: an "Exif\0\0" prefix is skipped.
std::span<const uint8_t> without_exif_prefix(std::span<const uint8_t> b) {
  return b.size() >= 6 && std::memcmp(b.data(), "Exif\0\0", 6) == 0 ? b.subspan(6) : b;
}

// A zTXt / compressed iTXt text, inflated up to Pillow's MAX_TEXT_CHUNK (1 MiB; past it Pillow
// refuses the file, here the text is ignored) and within `budget`, the bytes a file's texts may still
// take (a file of many small deflate bombs cost 1 MiB each, a review finding). The work is what the
// stream inflates to: nothing is allocated ahead. nullopt for a damaged stream, one past the limits,
// or a spent budget; a stream cut short gives what it inflated to, as Pillow keeps it.
std::optional<std::string> inflate_text(std::span<const uint8_t> deflated, size_t* budget) {
  constexpr size_t kMaxText = 1 << 20;
  const size_t cap = std::min(kMaxText, *budget);
  if (cap == 0) return std::nullopt;
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return std::nullopt;
  z.next_in = const_cast<Bytef*>(deflated.data());
  z.avail_in = static_cast<uInt>(deflated.size());
  std::string out;
  std::array<char, 16384> piece;
  int rc = Z_OK;
  bool too_long = false;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(piece.data());
    z.avail_out = static_cast<uInt>(piece.size());
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t got = piece.size() - z.avail_out;
    if (got > cap - out.size()) {
      too_long = true;
      break;
    }
    out.append(piece.data(), got);
  }
  inflateEnd(&z);
  *budget -= out.size();
  // Z_BUF_ERROR: no progress possible, the input ended before the stream did (cut short).
  if (!too_long && (rc == Z_STREAM_END || rc == Z_BUF_ERROR)) return out;
  return std::nullopt;
}

// Decodes hex digits, skipping whitespace (bytes.fromhex); nullopt on anything else.
std::optional<std::vector<uint8_t>> from_hex(std::string_view text) {
  std::vector<uint8_t> out;
  int high = -1;
  for (const char c : text) {
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f') {
      if (high >= 0) return std::nullopt;  // whitespace only between bytes
      continue;
    } else {
      return std::nullopt;
    }
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<uint8_t>(high << 4 | v));
      high = -1;
    }
  }
  if (high >= 0) return std::nullopt;
  return out;
}

// The EXIF of ImageMagick's "Raw profile type exif" text: "\nexif\n<length>\n<hex lines>", of which
// Pillow joins the lines after the third (a byte may straddle two) and reads them as hex.
std::optional<std::vector<uint8_t>> raw_profile_exif(std::string_view text) {
  for (int line = 0; line < 3; ++line) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return std::vector<uint8_t>{};
    text.remove_prefix(nl + 1);
  }
  std::string joined;
  for (const char c : text)
    if (c != '\n') joined += c;
  return from_hex(joined);
}

constexpr std::string_view kRawProfileKey = "Raw profile type exif";
constexpr std::string_view kXmpKey = "XML:com.adobe.xmp";
constexpr std::string_view kExifKey = "exif";  // a tEXt "exif" is Pillow's info["exif"], as raw bytes

// A PNG text chunk (tEXt, zTXt, iTXt) of one of the three keys read here: its keyword and text; nullopt
// for other keys and for a chunk Pillow would not store.
struct PngText {
  std::string key;
  std::string text;
};
std::optional<PngText> png_text(std::string_view type, std::span<const uint8_t> data, size_t* budget) {
  const std::string_view all = as_text(data);
  const size_t nul = all.find('\0');
  const std::string key(all.substr(0, nul));
  if (key != kRawProfileKey && key != kXmpKey && key != kExifKey) return std::nullopt;  // not inflated for nothing
  if (type == "tEXt") return PngText{key, nul == std::string_view::npos ? "" : std::string(all.substr(nul + 1))};
  if (nul == std::string_view::npos) return std::nullopt;
  std::span<const uint8_t> rest = data.subspan(nul + 1);
  if (type == "zTXt") {
    if (rest.empty() || rest[0] != 0) return std::nullopt;  // compression method 0 only
    std::optional<std::string> text = inflate_text(rest.subspan(1), budget);
    return PngText{key, text.value_or("")};
  }
  // iTXt: compression flag, method, language tag \0, translated keyword \0, text.
  if (rest.size() < 2) return std::nullopt;
  const bool compressed = rest[0] != 0;
  if (compressed && rest[1] != 0) return std::nullopt;
  const std::string_view tail = as_text(rest.subspan(2));
  const size_t lang_end = tail.find('\0');
  if (lang_end == std::string_view::npos) return std::nullopt;
  const size_t tk_end = tail.find('\0', lang_end + 1);
  if (tk_end == std::string_view::npos) return std::nullopt;
  const std::span<const uint8_t> body = rest.subspan(2 + tk_end + 1);
  if (!compressed) return PngText{key, std::string(as_text(body))};
  std::optional<std::string> text = inflate_text(body, budget);
  if (!text) return std::nullopt;
  return PngText{key, std::move(*text)};
}

}  // namespace

int jpeg_file_orientation(std::span<const uint8_t> b) {
  constexpr std::string_view kXmpSignature{"http://ns.adobe.com/xap/1.0/\0", 29};
  std::optional<std::span<const uint8_t>> exif;  // the first "Exif" segment's (Pillow appends later ones)
  std::string_view xmp;                           // the last XMP segment's (Pillow keeps the last)
  size_t pos = 2;
  while (pos + 4 <= b.size()) {
    if (b[pos] != 0xff) {  // junk between segments: Pillow skips it byte by byte
      ++pos;
      continue;
    }
    const uint8_t marker = b[pos + 1];
    if (marker == 0xff) { ++pos; continue; }                 // fill byte
    if (marker == 0xd9 || marker == 0xda) break;             // end of image / start of scan
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) { pos += 2; continue; }
    const size_t len = (size_t{b[pos + 2]} << 8) | b[pos + 3];
    if (len < 2 || pos + 2 + len > b.size()) break;
    const std::span<const uint8_t> seg = b.subspan(pos + 4, len - 2);
    if (marker == 0xe1) {
      if (!exif && seg.size() >= 5 && std::memcmp(seg.data(), "Exif\0", 5) == 0) {  // Pillow 9.4's test
        exif = without_exif_prefix(seg);
      } else if (as_text(seg).starts_with(kXmpSignature)) {
        xmp = as_text(seg.subspan(kXmpSignature.size()));
      }
    }
    pos += 2 + len;
  }
  return orientation_of(exif ? tiff_orientation_tag(*exif) : std::nullopt, xmp);
}

PngChunkFacts png_chunk_facts(std::span<const uint8_t> b) {
  PngChunkFacts f;
  // Pillow's info dictionary: later chunks replace earlier ones of the same key. Chunks after the
  // image data count only when no EXIF came before it (getexif loads the image, reading them, only
  // when info has no "exif").
  std::optional<std::span<const uint8_t>> exif;  // info["exif"]: an eXIf chunk, or a tEXt "exif"
  std::optional<std::string> raw_profile, xmp, exif_text;
  bool metadata_done = false, image_data = false;
  size_t text_budget = size_t{4} << 20;  // inflated text bytes, all chunks together
  size_t pos = 8;
  while (pos + 8 <= b.size()) {
    const uint32_t len = be32(b.data() + pos);
    const std::string_view type = as_text(b.subspan(pos + 4, 4));
    if (type == "IEND") break;
    const size_t left = b.size() - pos - 8 >= 4 ? b.size() - pos - 12 : 0;  // after the header and CRC
    if (len > left) {
      // libpng (header probe included) allocates a chunk's declared length before finding the data
      // missing, stb_image grew its buffer to gigabytes for a 100-byte file (fuzz_image): refused here.
      f.chunk_error = detail::concat("PNG chunk '", printable_excerpt(type), "' at byte ", pos, " declares ", len,
                                     " data bytes but the file has only ", left, " left (truncated or corrupt)");
      f.error_in_header = !image_data && type != "IDAT";
      break;
    }
    const std::span<const uint8_t> data = b.subspan(pos + 8, len);
    if (type == "IDAT") {
      image_data = true;
      metadata_done = metadata_done || exif.has_value();
    }
    if (!metadata_done && type == "eXIf") {
      exif = data;  // Pillow prefixes "Exif\0\0" and Exif.load strips it: the chunk is the TIFF block
    } else if (!metadata_done && (type == "tEXt" || type == "zTXt" || type == "iTXt")) {
      if (std::optional<PngText> t = png_text(type, data, &text_budget)) {
        if (t->key == kExifKey) {
          if (type == "tEXt") {  // raw bytes (Pillow decodes the other text chunks)
            exif_text = std::move(t->text);
            exif = without_exif_prefix(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(exif_text->data()),
                                                                exif_text->size()));
          }
        } else {
          (t->key == kRawProfileKey ? raw_profile : xmp) = std::move(t->text);
        }
      }
    }
    pos += 12 + size_t{len};
  }
  std::optional<uint32_t> tag;
  if (exif) {
    tag = tiff_orientation_tag(*exif);
  } else if (raw_profile) {
    if (const std::optional<std::vector<uint8_t>> bytes = raw_profile_exif(*raw_profile))
      tag = tiff_orientation_tag(without_exif_prefix(*bytes));
  }
  f.orientation = orientation_of(tag, xmp.value_or(""));
  return f;
}

}  // namespace lingbot::io
