#include "io/tensor_map.h"

#include <bit>
#include <cstring>

#include "core/error.h"
#include "io/byte_source.h"

namespace lingbot::io {

size_t storage_dtype_size(StorageDType t) {
  switch (t) {
    case StorageDType::F64: case StorageDType::I64: return 8;
    case StorageDType::F32: case StorageDType::I32: return 4;
    case StorageDType::F16: case StorageDType::BF16: case StorageDType::I16: return 2;
    case StorageDType::I8: case StorageDType::U8: case StorageDType::Bool: return 1;
  }
  return 1;
}

std::string_view safetensors_dtype_name(StorageDType t) {
  switch (t) {
    case StorageDType::F64: return "F64";
    case StorageDType::F32: return "F32";
    case StorageDType::F16: return "F16";
    case StorageDType::BF16: return "BF16";
    case StorageDType::I64: return "I64";
    case StorageDType::I32: return "I32";
    case StorageDType::I16: return "I16";
    case StorageDType::I8: return "I8";
    case StorageDType::U8: return "U8";
    case StorageDType::Bool: return "BOOL";
  }
  return "?";
}

std::optional<StorageDType> parse_safetensors_dtype(std::string_view name) {
  for (StorageDType t : {StorageDType::F64, StorageDType::F32, StorageDType::F16, StorageDType::BF16, StorageDType::I64,
                         StorageDType::I32, StorageDType::I16, StorageDType::I8, StorageDType::U8, StorageDType::Bool})
    if (safetensors_dtype_name(t) == name) return t;
  return std::nullopt;
}

bool is_floating(StorageDType t) {
  return t == StorageDType::F64 || t == StorageDType::F32 || t == StorageDType::F16 || t == StorageDType::BF16;
}

std::optional<DType> float_dtype_of(StorageDType t) {
  switch (t) {
    case StorageDType::F64: case StorageDType::F32: return DType::F32;
    case StorageDType::F16: return DType::F16;
    case StorageDType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

StorageDType storage_dtype_of(DType t) {
  switch (t) {
    case DType::F32: return StorageDType::F32;
    case DType::F16: return StorageDType::F16;
    case DType::BF16: return StorageDType::BF16;
  }
  return StorageDType::F32;
}

static_assert(std::endian::native == std::endian::little, "checkpoint readers assume a little-endian host");

namespace {
constexpr size_t kChunkElems = size_t{1} << 20;  // conversion scratch: at most 8 MiB

template <typename T>
void widen(const uint8_t* p, int64_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    dst[i] = static_cast<int64_t>(v);
  }
}
}  // namespace

int64_t checked_numel(const Shape& shape, std::string_view what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    LINGBOT_CHECK(d >= 0, what, ": negative dimension in shape ", shape_str(shape));
    LINGBOT_CHECK(d == 0 || n <= (int64_t{1} << 62) / d, what, ": shape ", shape_str(shape), " has too many elements");
    n *= d;
  }
  return n;
}

namespace {
void check_fits(const ByteSource& src, uint64_t offset, int64_t n, size_t esize, std::string_view what) {
  const uint64_t avail = offset <= src.size() ? src.size() - offset : 0;
  LINGBOT_CHECK(static_cast<uint64_t>(n) <= avail / esize, what, ": ", n, " elements of ", esize,
                " bytes at offset ", offset, " run past the end of ", src.label(), " (", src.size(), " bytes)");
}
}  // namespace

Tensor read_float_tensor(const ByteSource& src, uint64_t offset, StorageDType stored, Shape shape,
                         std::optional<DType> as, std::string_view what) {
  const std::optional<DType> native = float_dtype_of(stored);
  LINGBOT_CHECK(native.has_value(), what, ": stored as ", safetensors_dtype_name(stored),
                ", expected a floating-point tensor (F32, F16, BF16 or F64)");
  const DType out_dtype = as.value_or(*native);
  check_fits(src, offset, checked_numel(shape, what), storage_dtype_size(stored), what);
  if (stored != StorageDType::F64 && out_dtype == *native && offset % storage_dtype_size(stored) == 0) {
    if (std::shared_ptr<uint8_t> map = src.mapping()) {
      // No conversion: borrow the mapped bytes (no copy; pages are read when first used).
      return Tensor::borrow(std::move(shape), out_dtype, std::shared_ptr<void>(map, map.get() + offset));
    }
  }
  Tensor t(std::move(shape), out_dtype);
  const size_t n = static_cast<size_t>(t.numel());
  const size_t esize = storage_dtype_size(stored);
  if (stored != StorageDType::F64 && out_dtype == *native) {
    src.read_at(offset, t.raw(), t.nbytes());
    return t;
  }
  std::vector<uint8_t> raw(std::min(n, kChunkElems) * esize);
  std::vector<float> f32(stored == StorageDType::F64 || out_dtype != DType::F32 ? std::min(n, kChunkElems) : 0);
  auto* out = static_cast<uint8_t*>(t.raw());
  for (size_t done = 0; done < n; done += kChunkElems) {
    const size_t m = std::min(kChunkElems, n - done);
    src.read_at(offset + done * esize, raw.data(), m * esize);
    float* dst = out_dtype == DType::F32 ? reinterpret_cast<float*>(out) + done : f32.data();
    if (stored == StorageDType::F64) {
      for (size_t i = 0; i < m; ++i) {
        double d;
        std::memcpy(&d, raw.data() + i * 8, 8);
        dst[i] = static_cast<float>(d);
      }
    } else {
      convert_to_f32(raw.data(), *native, dst, m);
    }
    if (out_dtype != DType::F32) convert_from_f32(dst, out + done * dtype_size(out_dtype), out_dtype, m);
  }
  return t;
}

IntTensor read_int_tensor(const ByteSource& src, uint64_t offset, StorageDType stored, Shape shape, std::string_view what) {
  LINGBOT_CHECK(!is_floating(stored), what, ": stored as ", safetensors_dtype_name(stored),
                ", expected an integer or bool tensor");
  IntTensor r;
  const size_t esize = storage_dtype_size(stored);
  const int64_t numel = checked_numel(shape, what);
  check_fits(src, offset, numel, esize, what);
  const size_t n = static_cast<size_t>(numel);
  r.shape = std::move(shape);
  r.dtype = stored;
  r.values.resize(n);
  std::vector<uint8_t> raw(std::min(n, kChunkElems) * esize);
  for (size_t done = 0; done < n; done += kChunkElems) {
    const size_t m = std::min(kChunkElems, n - done);
    src.read_at(offset + done * esize, raw.data(), m * esize);
    int64_t* dst = r.values.data() + done;
    switch (stored) {
      case StorageDType::I64: widen<int64_t>(raw.data(), dst, m); break;
      case StorageDType::I32: widen<int32_t>(raw.data(), dst, m); break;
      case StorageDType::I16: widen<int16_t>(raw.data(), dst, m); break;
      case StorageDType::I8: widen<int8_t>(raw.data(), dst, m); break;
      case StorageDType::U8: widen<uint8_t>(raw.data(), dst, m); break;
      case StorageDType::Bool:
        for (size_t i = 0; i < m; ++i) {
          LINGBOT_CHECK(raw[i] <= 1, what, ": bool element ", done + i, " has byte value ", int(raw[i]), " (expected 0 or 1)");
          dst[i] = raw[i];
        }
        break;
      default: break;
    }
  }
  return r;
}

TensorInfoMap index_of(const TensorMap& m) {
  TensorInfoMap out;
  for (const auto& [name, t] : m) out.emplace(name, TensorInfo{storage_dtype_of(t.dtype()), t.shape()});
  return out;
}

int64_t total_numel(const TensorMap& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m) n += t.numel();
  return n;
}

size_t total_bytes(const TensorMap& m) {
  size_t n = 0;
  for (const auto& [name, t] : m) n += t.nbytes();
  return n;
}

}  // namespace lingbot::io
