#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/file_util.h"

namespace lingbot::io {

namespace {

using nlohmann::json;

uint64_t get_u64(const json& v, const std::string& what) {
  LINGBOT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what,
                " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::unique_ptr<ByteSource> source) : source_(std::move(source)) {
  const std::string& file = source_->label();
  const uint64_t size = source_->size();
  LINGBOT_CHECK(size >= 8, file, ": not a safetensors file (", size, " bytes, shorter than the 8-byte header length)");
  uint64_t n = 0;
  source_->read_at(0, &n, 8);
  LINGBOT_CHECK(n <= kSafetensorsMaxHeaderBytes, file, ": safetensors header length ", n, " exceeds the limit of ", kSafetensorsMaxHeaderBytes,
                " bytes (not a safetensors file, or corrupt)");
  LINGBOT_CHECK(n <= size - 8, file, ": safetensors header length ", n, " exceeds the file size ", size,
                " (truncated or not a safetensors file)");
  LINGBOT_CHECK(n >= 2, file, ": safetensors header length ", n, " is too small for a JSON object");
  std::string text(n, '\0');
  source_->read_at(8, text.data(), n);
  LINGBOT_CHECK(text[0] == '{', file, ": safetensors header does not start with '{' (not a safetensors file): ",
                "it begins '", printable_excerpt(text), "'");

  // nlohmann::json keeps the last of duplicate keys silently; a parser callback sees every key.
  std::set<std::string> seen;
  std::vector<std::string> duplicates;
  json header;
  try {
    header = json::parse(text, [&](int depth, json::parse_event_t ev, json& parsed) {
      if (depth == 1 && ev == json::parse_event_t::key) {
        std::string key = parsed.get<std::string>();
        if (!seen.insert(key).second) duplicates.push_back(std::move(key));
      }
      return true;
    });
  } catch (const json::exception& e) {
    // The parser's message quotes the bytes it read: escape them, bounded, like every echo of the file.
    throw Error(detail::concat(file, ": safetensors header is not valid JSON: ", printable_excerpt(e.what(), 240)));
  }
  LINGBOT_CHECK(duplicates.empty(), file, ": safetensors header names tensor '",
                printable_excerpt(duplicates.empty() ? "" : duplicates[0]),
                "' more than once");
  LINGBOT_CHECK(header.is_object(), file, ": safetensors header is not a JSON object");

  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      LINGBOT_CHECK(v.is_object(), file, ": __metadata__ must be an object of strings");
      for (const auto& [k, s] : v.items()) {
        LINGBOT_CHECK(s.is_string(), file, ": __metadata__ entry '", printable_excerpt(k), "' is not a string");
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string what = detail::concat(file, ": tensor '", printable_excerpt(name), "'");
    LINGBOT_CHECK(v.is_object(), what, ": header entry is not an object");
    LINGBOT_CHECK(v.contains("dtype") && v["dtype"].is_string(), what, ": missing or non-string \"dtype\"");
    LINGBOT_CHECK(v.contains("shape") && v["shape"].is_array(), what, ": missing or non-array \"shape\"");
    LINGBOT_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2, what,
                  ": \"data_offsets\" must be an array [begin, end]");
    const std::string dtype_name = v["dtype"].get<std::string>();
    const auto dtype = parse_safetensors_dtype(dtype_name);
    LINGBOT_CHECK(dtype.has_value(), what, ": unsupported dtype '", printable_excerpt(dtype_name),
                  "' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
    Entry e;
    e.name = name;
    e.dtype = *dtype;
    for (const json& d : v["shape"]) {
      const uint64_t dim = get_u64(d, what + " shape dimension");
      LINGBOT_CHECK(dim <= (uint64_t{1} << 62), what, ": shape dimension ", dim, " is absurd");
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const int64_t numel = checked_numel(e.shape, what);
    const uint64_t begin = get_u64(v["data_offsets"][0], what + " data_offsets[0]");
    const uint64_t end = get_u64(v["data_offsets"][1], what + " data_offsets[1]");
    LINGBOT_CHECK(begin <= end && end <= data_size, what, ": data_offsets [", begin, ", ", end,
                  "] are outside the data block of ", data_size, " bytes (truncated or corrupt file)");
    const uint64_t esize = storage_dtype_size(e.dtype);
    LINGBOT_CHECK(static_cast<uint64_t>(numel) <= (~uint64_t{0}) / esize && end - begin == static_cast<uint64_t>(numel) * esize,
                  what, ": ", end - begin, " data bytes do not match shape ", shape_str(e.shape), " of ", dtype_name,
                  " (", numel, " x ", esize, " bytes)");
    e.offset = data_start + begin;
    e.nbytes = end - begin;
    entries_.push_back(std::move(e));
  }
  // Names are sorted (json object order); check overlap in data order.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& a = *by_offset[i - 1];
    const Entry& b = *by_offset[i];
    LINGBOT_CHECK(b.offset >= a.offset + a.nbytes || a.nbytes == 0 || b.nbytes == 0, file, ": tensors '",
                  printable_excerpt(a.name), "' and '", printable_excerpt(b.name), "' overlap in the data block");
  }
}

SafetensorsReader SafetensorsReader::open(const std::string& path) { return SafetensorsReader(ByteSource::open_file(path)); }

const SafetensorsReader::Entry* SafetensorsReader::find(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const Entry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsReader::Entry& SafetensorsReader::entry(std::string_view name) const {
  const Entry* e = find(name);
  LINGBOT_CHECK(e != nullptr, label(), ": no tensor named '", name, "'");
  return *e;
}

Tensor SafetensorsReader::read(std::string_view name, std::optional<DType> as) const {
  const Entry& e = entry(name);
  return read_float_tensor(*source_, e.offset, e.dtype, e.shape, as, detail::concat(label(), ": tensor '", name, "'"));
}

IntTensor SafetensorsReader::read_int(std::string_view name) const {
  const Entry& e = entry(name);
  return read_int_tensor(*source_, e.offset, e.dtype, e.shape, detail::concat(label(), ": tensor '", name, "'"));
}

TensorMap SafetensorsReader::read_all(std::optional<DType> as, IntTensorMap* ints) const {
  TensorMap out;
  for (const Entry& e : entries_) {
    if (is_floating(e.dtype)) {
      out.emplace(e.name, read(e.name, as));
    } else {
      LINGBOT_CHECK(ints != nullptr, label(), ": tensor '", e.name, "' has integer dtype ",
                    safetensors_dtype_name(e.dtype), " where float weights are expected");
      ints->emplace(e.name, read_int(e.name));
    }
  }
  return out;
}

std::string safetensors_header(std::span<const SafetensorsEntry> entries, const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps insertion order so the header lists tensors in data order.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    LINGBOT_CHECK(e.name != "__metadata__" && !e.name.empty(), "safetensors writer: invalid tensor name '", e.name, "'");
    LINGBOT_CHECK(names.insert(e.name).second, "safetensors writer: duplicate tensor name '", e.name, "'");
    const uint64_t bytes = static_cast<uint64_t>(checked_numel(e.shape, e.name)) * storage_dtype_size(e.dtype);
    h[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

namespace {

// Writes the header for `entries`, then asks `data_of(i)` for each entry's bytes in turn, so a caller
// can convert one tensor at a time instead of holding converted copies of all of them.
template <typename DataOf>
void write_streaming(const std::string& path, std::span<const SafetensorsEntry> entries,
                     const std::map<std::string, std::string>& metadata, DataOf&& data_of) {
  const std::string header = safetensors_header(entries, metadata);
  const std::filesystem::path target = output_file_target(path);  // a link's file; never a device
  const std::string tmp = temp_path(target).string();
  UniqueFile f(std::fopen(tmp.c_str(), "wb"));
  LINGBOT_CHECK(f != nullptr, "cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = true;
  try {
    const uint64_t n = header.size();
    ok = ok && std::fwrite(&n, 8, 1, f.get()) == 1;
    ok = ok && std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
    for (size_t i = 0; i < entries.size() && ok; ++i) {
      const size_t bytes = static_cast<size_t>(shape_numel(entries[i].shape)) * storage_dtype_size(entries[i].dtype);
      if (bytes) ok = std::fwrite(data_of(i), 1, bytes, f.get()) == bytes;
    }
  } catch (...) {
    f.reset();
    discard_temp_file(target);
    throw;
  }
  const int write_err = errno;  // a failed fwrite's reason
  const bool closed = std::fclose(f.release()) == 0;
  if (!ok || !closed) {
    const int err = ok ? errno : write_err;
    discard_temp_file(target);
    throw Error(detail::concat("cannot write '", path, "': ", std::strerror(err)));
  }
  commit_temp_file(target);
}

}  // namespace

void write_safetensors(const std::string& path, std::span<const SafetensorsEntry> entries,
                       const std::map<std::string, std::string>& metadata) {
  write_streaming(path, entries, metadata, [&](size_t i) { return entries[i].data; });
}

void write_safetensors(const std::string& path, const TensorMap& tensors, std::optional<DType> as,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> entries;
  std::vector<const Tensor*> sources;
  for (const auto& [name, t] : tensors) {
    entries.push_back({name, storage_dtype_of(as.value_or(t.dtype())), t.shape(), nullptr});
    sources.push_back(&t);
  }
  Tensor converted;  // one converted tensor at a time
  write_streaming(path, entries, metadata, [&](size_t i) -> const void* {
    const Tensor& t = *sources[i];
    if (!as || *as == t.dtype()) return t.raw();
    converted = t.to(*as);
    return converted.raw();
  });
}

}  // namespace lingbot::io
