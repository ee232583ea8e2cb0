#pragma once
// safetensors reader and writer (https://github.com/huggingface/safetensors format):
//   u64 little-endian header length N | N bytes of JSON | raw little-endian data block
// JSON: {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}
// with offsets relative to the data block. Every header field is validated before any data is read:
// header length, JSON syntax, duplicate names, dtype names, shapes, offsets in range, byte size ==
// numel x element size, and no two tensors overlapping. Tensor data is read straight into the
// result tensor's buffer (no second copy of the file is held).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/byte_source.h"
#include "io/tensor_map.h"

namespace lingbot::io {

// The largest JSON header a safetensors file may declare: the reference implementation refuses more
// (a state dict's header is a few hundred KB).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    StorageDType dtype;
    Shape shape;
    uint64_t offset = 0;  // absolute byte offset in the file
    uint64_t nbytes = 0;
  };

  // Parses and validates the header; throws Error naming the file and the problem.
  explicit SafetensorsReader(std::unique_ptr<ByteSource> source);
  static SafetensorsReader open(const std::string& path);

  const std::vector<Entry>& entries() const { return entries_; }  // sorted by name
  const Entry* find(std::string_view name) const;
  const Entry& entry(std::string_view name) const;                 // throws when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& label() const { return source_->label(); }

  // A float tensor in its stored dtype (F64 -> F32), or converted to `as`. Throws for integer tensors.
  Tensor read(std::string_view name, std::optional<DType> as = std::nullopt) const;
  // An integer/bool tensor widened to int64. Throws for float tensors.
  IntTensor read_int(std::string_view name) const;
  // Every tensor: floats into the result, integers into *ints (an error if ints is null).
  TensorMap read_all(std::optional<DType> as = std::nullopt, IntTensorMap* ints = nullptr) const;

 private:
  std::unique_ptr<ByteSource> source_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `data` points at shape_numel(shape) * storage_dtype_size(dtype) bytes.
struct SafetensorsEntry {
  std::string name;
  StorageDType dtype = StorageDType::F32;
  Shape shape;
  const void* data = nullptr;
};

// Writes entries in the given order (names must be unique), header padded with spaces to a multiple
// of 8. Writes `path`.tmp and renames it over `path` on success.
void write_safetensors(const std::string& path, std::span<const SafetensorsEntry> entries,
                       const std::map<std::string, std::string>& metadata = {});
// Writes every tensor of `tensors` (by name), converted to `as` when given.
void write_safetensors(const std::string& path, const TensorMap& tensors, std::optional<DType> as = std::nullopt,
                       const std::map<std::string, std::string>& metadata = {});

// Serialises a header for `entries` (used by the writer; exposed for tests that craft files).
std::string safetensors_header(std::span<const SafetensorsEntry> entries, const std::map<std::string, std::string>& metadata);

}  // namespace lingbot::io
