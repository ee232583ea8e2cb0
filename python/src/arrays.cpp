#include "arrays.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "pipeline/frame_values.h"

namespace lingbot::python {

namespace {

std::vector<py::ssize_t> c_strides(const std::vector<py::ssize_t>& shape, py::ssize_t item) {
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t s = item;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

}  // namespace

std::string describe_array(const py::handle& obj) {
  if (!py::isinstance<py::array>(obj)) return std::string(py::str(py::type::of(obj).attr("__name__")));
  const auto arr = py::reinterpret_borrow<py::array>(obj);
  std::string shape = "(";
  for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
    if (i) shape += ", ";
    shape += std::to_string(arr.shape(i));
  }
  if (arr.ndim() == 1) shape += ",";
  shape += ")";
  return std::string(py::str(arr.dtype())) + " array of shape " + shape;
}

py::object tensor_to_array(Tensor&& t) {
  if (t.empty()) return py::none();
  auto owner = std::make_unique<Tensor>(std::move(t));
  float* data = owner->f32();  // throws for a non-f32 tensor before ownership moves
  std::vector<py::ssize_t> shape(owner->shape().begin(), owner->shape().end());
  py::capsule base(owner.get(), [](void* p) { delete static_cast<Tensor*>(p); });
  owner.release();  // the capsule owns it now
  return py::array_t<float>(shape, c_strides(shape, sizeof(float)), data, base);
}

py::array image_to_array(io::ImageU8&& img) {
  auto owner = std::make_unique<std::vector<uint8_t>>(std::move(img.rgb));
  const std::vector<py::ssize_t> shape{img.height, img.width, 3};
  uint8_t* data = owner->data();
  py::capsule base(owner.get(), [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
  owner.release();
  return py::array_t<uint8_t>(shape, c_strides(shape, 1), data, base);
}

Tensor rgb8_to_chw(const io::ImageU8& img) {
  const int64_t h = img.height, w = img.width;
  Tensor t({3, h, w});
  float* out = t.f32();
  const size_t plane = static_cast<size_t>(h * w);
  for (size_t i = 0; i < plane; ++i)
    for (size_t c = 0; c < 3; ++c) out[c * plane + i] = static_cast<float>(img.rgb[i * 3 + c]) / 255.0f;
  return t;
}

namespace {

// What to do about the usual wrong frames: a PIL image, or an array in the other channel order.
std::string frame_fix_hint(const py::handle& obj, FrameKinds kinds) {
  if (!py::isinstance<py::array>(obj)) {
    const std::string module = py::str(py::type::of(obj).attr("__module__"));
    if (module.starts_with("PIL."))
      return " (np.asarray(image.convert(\"RGB\")) gives the uint8 array; lingbot_map.load_image(path) reads a file "
             "as Pillow and upstream do)";
    return "";
  }
  const auto arr = py::reinterpret_borrow<py::array>(obj);
  if (arr.ndim() != 3) return "";
  if (holds<uint8_t>(arr) && arr.shape(0) == 3 && arr.shape(2) != 3)
    return " (channels first: frame.transpose(1, 2, 0) gives [H, W, 3])";
  if (holds<float>(arr) && arr.shape(2) == 3 && arr.shape(0) != 3)
    return kinds == FrameKinds::Picture ? " (a float picture: convert it to uint8, values 0..255)"
                                        : " (channels last: frame.transpose(2, 0, 1) gives [3, H, W])";
  return "";
}

}  // namespace

InputFrame frame_from_python(const py::handle& obj, const std::string& what, FrameKinds kinds) {
  const std::string expected = what + (kinds == FrameKinds::Picture
                                           ? " must be a uint8 array [H, W, 3] (RGB: preprocessing works on 8-bit pictures)"
                                           : " must be a uint8 array [H, W, 3] (RGB) or a float32 array [3, H, W] (RGB in [0, 1])");
  const auto refused = [&] { return expected + ", got " + describe_array(obj) + frame_fix_hint(obj, kinds); };
  if (!py::isinstance<py::array>(obj)) throw py::type_error(refused());
  const auto arr = py::reinterpret_borrow<py::array>(obj);
  // Before any copy: no frame may be larger than a decoded image file (io::kMaxImagePixels).
  const auto check_pixels = [&](py::ssize_t h, py::ssize_t w) {
    if (h > io::kMaxImagePixels / w)
      throw py::value_error(what + " has " + std::to_string(h) + "x" + std::to_string(w) + " pixels (HxW), more than the " +
                            std::to_string(io::kMaxImagePixels) + " a frame may have");
  };
  InputFrame f;
  if (holds<uint8_t>(arr)) {
    if (arr.ndim() != 3 || arr.shape(2) != 3 || arr.shape(0) < 1 || arr.shape(1) < 1)
      throw py::value_error(refused());
    check_pixels(arr.shape(0), arr.shape(1));
    const auto c = c_array<uint8_t>(arr);  // copies only if strided or misaligned
    io::ImageU8 img(static_cast<int>(c.shape(1)), static_cast<int>(c.shape(0)));
    std::memcpy(img.rgb.data(), c.data(), img.rgb.size());
    f.rgb8 = std::move(img);
    return f;
  }
  if (holds<float>(arr) && kinds == FrameKinds::PictureOrModelInput) {
    if (arr.ndim() != 3 || arr.shape(0) != 3 || arr.shape(1) < 1 || arr.shape(2) < 1)
      throw py::value_error(refused());
    check_pixels(arr.shape(1), arr.shape(2));
    const auto c = c_array<float>(arr);
    f.chw = Tensor({3, c.shape(1), c.shape(2)});
    std::memcpy(f.chw.f32(), c.data(), f.chw.nbytes());
    const float* v = f.chw.f32();
    for (int64_t i = 0; i < f.chw.numel(); ++i) {
      // A frame scaled to 0..255 (or normalised with a mean/std) is the usual mistake: say so.
      if (!(v[i] >= pipeline::kFrameValueLow && v[i] <= pipeline::kFrameValueHigh))  // the engine's range
        throw py::value_error(what + ": float32 values must be RGB in [0, 1] (uint8 / 255), got " +
                              std::string(py::str(py::float_(v[i]))) + " at flat index " + std::to_string(i));
    }
    return f;
  }
  throw py::type_error(refused());
}

namespace {

// ValueError naming `what` unless `arr` has exactly `shape`.
void check_shape(const py::array& arr, const std::vector<py::ssize_t>& shape, const std::string& what) {
  bool same = arr.ndim() == static_cast<py::ssize_t>(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = arr.shape(static_cast<py::ssize_t>(i)) == shape[i];
  if (same) return;
  std::string want = "(";
  for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
  throw py::value_error(what + " must have shape " + want + (shape.size() == 1 ? ",)" : ")") + ", got " +
                        describe_array(arr));
}

}  // namespace

CArray<float> f32_exact(const py::handle& a, const std::vector<py::ssize_t>& shape, const std::string& what) {
  if (!py::isinstance<py::array>(a) || !holds<float>(py::reinterpret_borrow<py::array>(a)))
    throw py::type_error(what + " must be a float32 array, got " + describe_array(a));
  const auto arr = c_array<float>(a);
  check_shape(arr, shape, what);
  return arr;
}

CArray<uint8_t> mask_exact(const py::handle& a, py::ssize_t height, py::ssize_t width, const std::string& what) {
  const bool is_array = py::isinstance<py::array>(a);
  const auto arr = is_array ? py::reinterpret_borrow<py::array>(a) : py::array();
  if (!is_array || !(holds<bool>(arr) || holds<uint8_t>(arr)))
    throw py::type_error(what + " must be a bool or uint8 array (nonzero: the pixel may give a point), got " +
                         describe_array(a));
  check_shape(arr, {height, width}, what);
  // A bool is one byte, 0 or 1: the same bytes read as uint8 (copied only where not C-contiguous).
  return c_array<uint8_t>(holds<bool>(arr) ? py::module_::import("numpy").attr("ascontiguousarray")(arr).attr("view")("uint8")
                                           : py::object(arr));
}

}  // namespace lingbot::python
