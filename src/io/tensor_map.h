#pragma once
// Types and helpers shared by the checkpoint readers: the on-disk element types, integer tensors,
// and the state_dict maps of lingbot/tensor_map.h (TensorMap, TensorInfoMap) every reader produces.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lingbot/tensor.h"
#include "lingbot/tensor_map.h"  // TensorMap, StorageDType, TensorInfo, TensorInfoMap

namespace lingbot::io {

// StorageDType (lingbot/tensor_map.h): integer and bool types are read as IntTensor.
size_t storage_dtype_size(StorageDType t);
std::string_view safetensors_dtype_name(StorageDType t);            // "F32", "I64", "BOOL", ...
std::optional<StorageDType> parse_safetensors_dtype(std::string_view name);
bool is_floating(StorageDType t);
// The compute-side dtype a float storage type is kept in (F64 -> F32); nullopt for integers.
std::optional<DType> float_dtype_of(StorageDType t);
StorageDType storage_dtype_of(DType t);

// An integer or bool tensor, values widened to int64 (exact for every stored integer type).
struct IntTensor {
  Shape shape;
  StorageDType dtype = StorageDType::I64;  // the type it was stored as
  std::vector<int64_t> values;             // row-major, shape_numel(shape) entries
};

using IntTensorMap = std::map<std::string, IntTensor, std::less<>>;

class ByteSource;

// Element count of `shape`, throwing Error naming `what` for negative dimensions or a product that
// overflows (declared sizes in files are untrusted).
int64_t checked_numel(const Shape& shape, std::string_view what);

// Reads a C-contiguous array of shape_numel(shape) elements of type `stored` at `offset` of `src`.
// Float: kept in its own dtype (F64 narrowed to F32) unless `as` asks for another float dtype; the data
// is read straight into the result's buffer when no conversion is needed, else converted chunk-wise
// (bounded scratch). Throws Error naming `what` for integer data, or out-of-range reads.
Tensor read_float_tensor(const ByteSource& src, uint64_t offset, StorageDType stored, Shape shape,
                         std::optional<DType> as, std::string_view what);
// Integer/bool data widened to int64; throws Error naming `what` for float data.
IntTensor read_int_tensor(const ByteSource& src, uint64_t offset, StorageDType stored, Shape shape, std::string_view what);

// The index (dtype and shape per name) of an in-memory map.
TensorInfoMap index_of(const TensorMap& m);

// Sum of element counts / bytes over all tensors.
int64_t total_numel(const TensorMap& m);
size_t total_bytes(const TensorMap& m);

}  // namespace lingbot::io
