#pragma once
// NumPy <-> engine conversions for the lingbot_map module.
//
// Ownership: an engine Tensor handed to Python is moved into a heap object owned by a capsule that
// is the NumPy array's base, so the array borrows nothing from a Session or Model and stays valid
// after both are gone (zero-copy: the engine's buffer becomes the array's memory).
// Input frames are copied out of the caller's array (the engine keeps its own f32 copy for the
// result's `image`), so a caller may reuse or modify its buffer as soon as push() returns.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "io/image.h"
#include "lingbot/tensor.h"

namespace lingbot::python {

namespace py = pybind11;

// f32 Tensor -> float32 ndarray sharing its memory; an empty tensor -> None.
py::object tensor_to_array(Tensor&& t);
// 8-bit RGB image -> uint8 ndarray [H, W, 3] (the pixel vector moves into the array).
py::array image_to_array(io::ImageU8&& img);

// A frame given by Python: either 8-bit RGB (to be preprocessed or scaled by 1/255) or an already
// preprocessed f32 [3, H, W] model input. Exactly one of the two is set.
struct InputFrame {
  std::optional<io::ImageU8> rgb8;
  Tensor chw;
};

// The frames an argument takes: a picture or a model input (Session.push, reconstruct), or a picture
// only (preprocess()): the messages offer only what is taken.
enum class FrameKinds { PictureOrModelInput, Picture };

// Validates and copies `obj` (needs the GIL). Raises TypeError for a non-array / wrong dtype and
// ValueError for a wrong shape or out-of-range values; `what` names the argument in messages.
InputFrame frame_from_python(const py::handle& obj, const std::string& what,
                             FrameKinds kinds = FrameKinds::PictureOrModelInput);

// uint8 [H, W, 3] -> f32 [3, H, W] with values k / 255 (preprocess_image's arithmetic, no resize).
Tensor rgb8_to_chw(const io::ImageU8& img);

// Whether `arr` holds T values in either byte order. Compared by type number, not dtype identity: an
// unpickled array (multiprocessing queues, process pools) carries a dtype object of its own.
template <typename T>
bool holds(const py::array& arr) {
  return arr.dtype().num() == py::dtype::of<T>().num();
}

// NumPy's NPY_ARRAY_ALIGNED (pybind11 2.10 names no constant for it).
constexpr int kNpyAligned = 0x0100;
// C-contiguous, aligned T values: a span read from data() is well-formed.
template <typename T>
using CArray = py::array_t<T, py::array::c_style | kNpyAligned>;
// `arr` (already known to hold T, see holds<T>) as a CArray, copied when its strides, alignment or
// byte order differ. Raises (MemoryError) where array_t::ensure would return a null array.
template <typename T>
CArray<T> c_array(const py::handle& arr) {
  return CArray<T>(py::reinterpret_borrow<py::object>(arr));
}

// "uint8 array of shape (70, 112, 3)" for messages.
std::string describe_array(const py::handle& obj);

// A float32 C-contiguous view of `a`, which must have exactly `shape`: TypeError for another dtype,
// ValueError for another shape, each naming `what`.
CArray<float> f32_exact(const py::handle& a, const std::vector<py::ssize_t>& shape, const std::string& what);
// A point mask (PointArea::mask): a bool or uint8 array of shape (H, W), nonzero = the pixel may give a
// point, as a C-contiguous uint8 array; TypeError for another dtype, ValueError for another shape.
CArray<uint8_t> mask_exact(const py::handle& a, py::ssize_t height, py::ssize_t width, const std::string& what);

}  // namespace lingbot::python
