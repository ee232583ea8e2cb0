#include "lingbot/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace lingbot {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    LINGBOT_CHECK(d >= 0, "negative dimension in shape ", shape_str(s));
    LINGBOT_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, "shape ", shape_str(s),
                  " has more elements than an int64 counts");
    n *= d;
  }
  return n;
}

namespace {
void check_dtype(DType t) { LINGBOT_CHECK(dtype_known(t), "unknown dtype ", static_cast<int>(t)); }
}  // namespace

// Default-constructed or moved-from tensors copy and convert to empty ones: their shape [] has no
// element (it is not a scalar's).
Tensor Tensor::empty_of(DType dtype) {
  Tensor t;
  t.dtype_ = dtype;
  return t;
}

Tensor::Tensor(Tensor&& other) noexcept
    : shape_(std::exchange(other.shape_, {})),
      numel_(std::exchange(other.numel_, 0)),
      dtype_(other.dtype_),
      borrowed_(std::exchange(other.borrowed_, false)),
      data_(std::move(other.data_)) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    shape_ = std::exchange(other.shape_, {});
    numel_ = std::exchange(other.numel_, 0);
    dtype_ = other.dtype_;
    borrowed_ = std::exchange(other.borrowed_, false);
    data_ = std::move(other.data_);
  }
  return *this;
}


Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), numel_(shape_numel(shape_)), dtype_(dtype) {
  check_dtype(dtype);
  LINGBOT_CHECK(numel_ <= (int64_t{1} << 60), "tensor ", shape_str(shape_), " is too large to allocate");
  const size_t bytes = (nbytes() + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) throw Error(detail::concat("allocation of tensor ", shape_str(shape_), " failed"));
  std::memset(p, 0, bytes ? bytes : 64);
  data_.reset(p, [](void* q) { std::free(q); });
}

Tensor Tensor::borrow(Shape shape, DType dtype, std::shared_ptr<void> data) {
  LINGBOT_CHECK(data != nullptr, "Tensor::borrow: null data");
  check_dtype(dtype);
  LINGBOT_CHECK(reinterpret_cast<uintptr_t>(data.get()) % dtype_size(dtype) == 0, "Tensor::borrow: data of ",
                dtype_name(dtype), " tensor ", shape_str(shape), " is not aligned to its element size");
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.borrowed_ = true;
  t.data_ = std::move(data);
  return t;
}

Tensor Tensor::from_f32(Shape shape, std::span<const float> values) {
  Tensor t(std::move(shape));
  LINGBOT_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "Tensor::from_f32: ", values.size(),
                " values for shape ", shape_str(t.shape()));
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

Tensor Tensor::clone() const {
  if (!data_) return empty_of(dtype_);
  Tensor t(shape_, dtype_);
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  LINGBOT_CHECK(j >= 0 && j < n, "dimension index ", i, " out of range for shape ", shape_str(shape_));
  return shape_[j];
}

float* Tensor::f32() {
  LINGBOT_CHECK(dtype_ == DType::F32, "tensor ", shape_str(shape_), " is ", dtype_name(dtype_), ", expected f32");
  return static_cast<float*>(raw());
}
const float* Tensor::f32() const {
  LINGBOT_CHECK(dtype_ == DType::F32, "tensor ", shape_str(shape_), " is ", dtype_name(dtype_), ", expected f32");
  return static_cast<const float*>(raw());
}

Tensor& Tensor::reshape(Shape shape) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      LINGBOT_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    LINGBOT_CHECK(known > 0 && numel_ % known == 0, "reshape: cannot infer ", shape_str(shape), " from ", shape_str(shape_));
    shape[infer] = numel_ / known;
  }
  LINGBOT_CHECK(shape_numel(shape) == numel_, "reshape: ", shape_str(shape_), " -> ", shape_str(shape), " changes element count");
  shape_ = std::move(shape);
  return *this;
}

Tensor Tensor::to(DType dtype) const {
  check_dtype(dtype);
  if (!data_) return empty_of(dtype);
  Tensor t(shape_, dtype);
  if (dtype == dtype_) {
    std::memcpy(t.raw(), raw(), nbytes());
  } else if (dtype_ == DType::F32) {
    convert_from_f32(f32(), t.raw(), dtype, numel_);
  } else if (dtype == DType::F32) {
    convert_to_f32(raw(), dtype_, t.f32(), numel_);
  } else {
    Tensor tmp = to(DType::F32);
    return tmp.to(dtype);
  }
  return t;
}

void Tensor::check_shape(const Shape& expected, const std::string& what) const {
  LINGBOT_CHECK(shape_ == expected, what, ": expected shape ", shape_str(expected), ", got ", shape_str(shape_));
}

}  // namespace lingbot
