#pragma once
// Tensor: an owning, contiguous, row-major (C order: the last dimension varies fastest) host array
// with an explicit shape and dtype; the value type of every image, feature and result the API passes.
// Move-only (copies are explicit through clone()); storage is 64-byte aligned, except for tensors
// made by borrow(), which share memory someone else owns (a memory-mapped checkpoint file).
// Ownership: a Tensor owns (or, borrowed, co-owns through a shared_ptr) its storage; raw()/f32()
// pointers stay valid until the tensor is destroyed, moved from or reassigned. Errors (a wrong
// dtype, a shape mismatch, a negative dimension) throw lingbot::Error.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lingbot/dtype.h"
#include "lingbot/error.h"

namespace lingbot {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);     // "[2, 3, 4]"
int64_t shape_numel(const Shape& s);       // throws on negative dims and on a count past int64

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape, DType dtype = DType::F32);   // zero-initialised; throws on an unknown dtype
  static Tensor from_f32(Shape shape, std::span<const float> values);
  // A tensor over `data` (numel · dtype_size bytes, aligned to the element size), kept alive by
  // `data`'s owner for as long as the tensor lives. Writing through it writes that memory.
  static Tensor borrow(Shape shape, DType dtype, std::shared_ptr<void> data);

  // A moved-from tensor is empty (shape [], no data), never a shape without data.
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor clone() const;

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;                 // negative i counts from the back
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  bool empty() const { return numel_ == 0; }
  bool borrowed() const { return borrowed_; }  // made by borrow()

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  // Typed f32 access; throws if the dtype is not F32.
  float* f32();
  const float* f32() const;

  // Same data, new shape with the same element count (-1 infers one dim).
  Tensor& reshape(Shape shape);
  // Converted copy (f32 <-> f16/bf16).
  Tensor to(DType dtype) const;

  // Throws Error("<what>: expected shape [..], got [..]") when the shape differs.
  void check_shape(const Shape& expected, const std::string& what) const;

 private:
  static Tensor empty_of(DType dtype);  // no data, shape []
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
  bool borrowed_ = false;
  std::shared_ptr<void> data_;
};

}  // namespace lingbot
