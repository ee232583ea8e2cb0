// lingbot_map.Result (result.h): conversion from the engine's FrameResult, pickling, the binding.
#include "result.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "checks.h"
#include "fs_text.h"
#include "core/error.h"
#include "lingbot/preprocess.h"
#include "made_by_engine.h"

namespace lingbot::python {

using namespace py::literals;

namespace {

py::str result_repr(const PyResult& r) {
  std::string s = "<lingbot_map.Result frame " + std::to_string(r.frame_index) + " " + frame_type_name(r.frame_type);
  if (py::isinstance<py::array>(r.depth) && py::reinterpret_borrow<py::array>(r.depth).ndim() == 2) {
    const auto d = py::reinterpret_borrow<py::array>(r.depth);
    s += " " + std::to_string(d.shape(1)) + "x" + std::to_string(d.shape(0));
  }
  if (!r.source.empty()) s += " source='" + r.source + "'";
  return fs_decode(s + ">");
}

// Upstream's names for a Result's fields (its predictions dict, VGGT's): an AttributeError that says
// where they went, rather than a bare "has no attribute".
py::object upstream_name(const PyResult&, const std::string& name) {
  static const std::pair<const char*, const char*> kMoved[] = {
      {"extrinsic", "w2c ([3, 4] world -> camera; c2w is its inverse)"},
      {"intrinsic", "K ([3, 3], in the model input's pixels; source_K in the picture's)"},
      {"depth_conf", "conf ([H, W])"},
      {"world_points_conf", "conf ([H, W]: the depth head's confidence)"},
      {"images", "image ([3, H, W], one frame)"},
      {"pose_enc_list", "pose_enc_iters ([camera_iterations, 9])"}};
  for (const auto& [old_name, now] : kMoved)
    if (name == old_name)
      throw py::attribute_error("'Result' object has no attribute '" + name + "': upstream's " + name + " is Result." + now);
  throw py::attribute_error("'Result' object has no attribute '" + name + "'");
}

py::object content_tuple(const std::optional<io::PixelRect>& c) {
  return c ? py::object(py::make_tuple(c->x, c->y, c->width, c->height)) : py::object(py::none());
}

// A Result is a value: its arrays are read-only (an in-place edit of r.depth would change what an
// Exporter writes and break c2w/w2c), whether made by the engine or unpickled.
py::object read_only(py::object a) {
  if (py::isinstance<py::array>(a)) a.attr("setflags")("write"_a = false);
  return a;
}

py::object placement_tuple(const std::optional<io::SourcePlacement>& p) {
  if (!p) return py::none();
  return py::make_tuple(p->source.width, p->source.height, p->resized.width, p->resized.height, p->left, p->top);
}

// K in the source picture's pixels (io::source_intrinsics, as poses.json's source_intrinsics): float64 [3, 3].
py::object source_k(const PyResult& r) {
  if (!r.placement || r.K.is_none()) return py::none();
  const auto k = f32_exact(r.K, {3, 3}, "K");
  std::array<double, 9> K{};
  for (size_t i = 0; i < 9; ++i) K[i] = k.data()[i];
  const std::array<double, 9> k0 = io::source_intrinsics(K, *r.placement);
  py::array_t<double> out({3, 3});
  std::copy(k0.begin(), k0.end(), out.mutable_data());
  return read_only(std::move(out));  // as every array of a Result
}

}  // namespace

py::tuple PyResult::getstate() const {
  return py::make_tuple(4, frame_index, is_keyframe, static_cast<int>(frame_type), flow, rope_time_index, window_index,
                        fs_decode(source), timestamp, scale_frames,
                        py::make_tuple(pose_enc, pose_enc_iters, c2w, w2c, K, depth, conf, world_points, image,
                                       patch_tokens),
                        features, timestamp_unit == io::TimestampUnit::Seconds, content_tuple(content),
                        placement_tuple(placement));
}

PyResult PyResult::setstate(const py::tuple& t) {
  try {
    return setstate_checked(t);
  } catch (const py::cast_error& e) {  // a field of the wrong type (a pickle can hold anything)
    throw py::value_error(std::string("not a pickled lingbot_map.Result: ") + e.what());
  }
}

PyResult PyResult::setstate_checked(const py::tuple& t) {
  // Version 3 added content_rect, version 4 the source placement (source_size, source_K), each as the
  // last field; an older pickle has None for what it lacks.
  const auto version_is = [&](int v) { return PyObject_RichCompareBool(t[0].ptr(), py::int_(v).ptr(), Py_EQ) == 1; };
  if (t.size() < 1 || !py::isinstance<py::int_>(t[0]) || py::isinstance<py::bool_>(t[0]) ||
      !((version_is(2) && t.size() == 13) || (version_is(3) && t.size() == 14) || (version_is(4) && t.size() == 15)))
    throw py::value_error("not a pickled lingbot_map.Result of this version");
  // A pickle can hold anything: every field must have the type getstate() writes.
  const auto refuse = [](const std::string& what) { throw py::value_error("not a pickled lingbot_map.Result: " + what); };
  const auto type_name = [](const py::handle& v) { return py::str(py::type::of(v).attr("__name__")).cast<std::string>(); };
  const auto is_int = [](const py::handle& v) { return py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v); };
  const auto int_field = [&](size_t i, const char* name) -> int64_t {
    const py::object v = t[i];
    if (!is_int(v)) refuse(std::string(name) + " is " + type_name(v) + ", not int");
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0) refuse(std::string(name) + " " + std::string(py::str(v)) + " is out of range");
    return n;
  };
  const auto float_field = [&](size_t i, const char* name) {
    const py::object v = t[i];
    if (!py::isinstance<py::float_>(v) && !is_int(v)) refuse(std::string(name) + " is " + type_name(v) + ", not float");
    return v.cast<double>();
  };
  const auto bool_field = [&](size_t i, const char* name) {
    const py::object v = t[i];
    if (!py::isinstance<py::bool_>(v)) refuse(std::string(name) + " is " + type_name(v) + ", not bool");
    return v.cast<bool>();
  };
  PyResult r;
  r.frame_index = int_field(1, "frame_index");
  r.is_keyframe = bool_field(2, "is_keyframe");
  const int64_t type = int_field(3, "frame_type");
  if (type < static_cast<int>(FrameType::Scale) || type > static_cast<int>(FrameType::NonKeyframe))
    throw py::value_error("not a pickled lingbot_map.Result: frame type " + std::to_string(type));
  r.frame_type = static_cast<FrameType>(type);
  r.flow = float_field(4, "flow");
  r.rope_time_index = int_field(5, "rope_time_index");
  r.window_index = int_field(6, "window_index");
  if (!py::isinstance<py::str>(t[7])) refuse("source is " + type_name(t[7]) + ", not str");
  r.source = fs_encode(t[7].cast<py::str>());
  r.timestamp = float_field(8, "timestamp");
  r.scale_frames = int_field(9, "scale_frames");
  if (!py::isinstance<py::tuple>(t[10])) refuse("the arrays are " + type_name(t[10]) + ", not a tuple");
  if (!py::isinstance<py::list>(t[11])) refuse("features is " + type_name(t[11]) + ", not a list");
  const bool seconds = bool_field(12, "the timestamp unit");
  const auto a = t[10].cast<py::tuple>();
  if (a.size() != 10) throw py::value_error("not a pickled lingbot_map.Result of this version");
  // A pickle can hold anything: every array field must be None or a float32 array of its rank.
  auto array = [&](int i, int ndim, const char* name) {
    const py::object v = a[static_cast<size_t>(i)];
    if (v.is_none()) return v;
    const auto f32_of_rank = [&] {
      const auto arr = py::reinterpret_borrow<py::array>(v);
      return arr.ndim() == ndim && arr.dtype().kind() == 'f' && arr.dtype().itemsize() == 4;
    };
    if (!py::isinstance<py::array>(v) || !f32_of_rank())
      throw py::value_error(std::string("not a pickled lingbot_map.Result: ") + name + " is not a " +
                            std::to_string(ndim) + "-d float32 array");
    return v;
  };
  r.pose_enc = read_only(array(0, 1, "pose_enc"));
  r.pose_enc_iters = read_only(array(1, 2, "pose_enc_iters"));
  r.c2w = read_only(array(2, 2, "c2w"));
  r.w2c = read_only(array(3, 2, "w2c"));
  r.K = read_only(array(4, 2, "K"));
  if (!r.K.is_none() && (py::reinterpret_borrow<py::array>(r.K).shape(0) != 3 || py::reinterpret_borrow<py::array>(r.K).shape(1) != 3))
    refuse("K is not [3, 3]");  // source_K and the Exporter read it as one
  r.depth = read_only(array(5, 2, "depth"));
  r.conf = read_only(array(6, 2, "conf"));
  r.world_points = read_only(array(7, 3, "world_points"));
  r.image = read_only(array(8, 3, "image"));
  r.patch_tokens = read_only(array(9, 2, "patch_tokens"));
  for (const auto& f : t[11].cast<py::list>()) {
    if (!py::isinstance<py::array>(f) || py::reinterpret_borrow<py::array>(f).dtype().kind() != 'f')
      throw py::value_error("not a pickled lingbot_map.Result: features holds something other than float arrays");
    r.features.append(read_only(py::reinterpret_borrow<py::object>(f)));
  }
  r.timestamp_unit = seconds ? io::TimestampUnit::Seconds : io::TimestampUnit::FrameIndex;
  // A tuple of n ints at field i, each within range(k) = {lo, hi}; `name` in the messages.
  const auto int_tuple = [&](size_t i, size_t n, const std::string& name, auto range) {
    const py::object c = t[i];
    if (!py::isinstance<py::tuple>(c) || py::len(c) != n)
      refuse(name + " is not None or a tuple of " + std::to_string(n) + " ints");
    const auto v = c.cast<py::tuple>();
    std::vector<int> out(n);
    for (size_t k = 0; k < n; ++k) {
      const py::object e = v[k];
      if (!is_int(e)) refuse(name + " holds " + type_name(e) + ", not int");
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(e.ptr(), &overflow);
      if (overflow != 0) refuse(name + " value " + std::string(py::str(e)) + " is out of range");
      const auto [lo, hi] = range(k);
      if (x < lo || x > hi) refuse(name + " value " + std::to_string(x) + " is out of range");
      out[k] = static_cast<int>(x);
    }
    return out;
  };
  if (t.size() >= 14 && !t[13].is_none()) {
    const auto v = int_tuple(13, 4, "content_rect", [](size_t) { return std::pair<long long, long long>{0, kMaxImageSize}; });
    r.content = io::PixelRect{v[0], v[1], v[2], v[3]};
  }
  if (t.size() == 15 && !t[14].is_none()) {
    // Sizes positive, offsets either way; no side or offset beyond a picture's pixel limit.
    const auto v = int_tuple(14, 6, "the source placement", [](size_t k) {
      return std::pair<long long, long long>{k < 4 ? 1 : -io::kMaxImagePixels, io::kMaxImagePixels};
    });
    r.placement = io::SourcePlacement{{v[0], v[1]}, {v[2], v[3]}, v[4], v[5]};
  }
  return r;
}

std::vector<PyResult> to_python(std::vector<FrameResult>&& results, std::deque<Pending>* pending, int scale_frames) {
  std::vector<PyResult> out;
  out.reserve(results.size());
  for (FrameResult& r : results) {
    LINGBOT_CHECK(!pending->empty() && pending->front().index == r.frame_index, "internal: result for frame ",
                  r.frame_index, " does not match the frames pushed");
    Pending p = std::move(pending->front());
    pending->pop_front();
    PyResult o;
    o.frame_index = r.frame_index;
    o.is_keyframe = r.is_keyframe;
    o.frame_type = r.frame_type;
    o.flow = r.flow;
    o.rope_time_index = r.rope_time_index;
    o.window_index = r.window_index;
    o.scale_frames = scale_frames;
    o.source = std::move(p.source);
    o.timestamp = p.timestamp;
    o.timestamp_unit = p.timestamp_unit;
    o.pose_enc = read_only(tensor_to_array(std::move(r.pose_enc)));
    // Engine layout [iterations, 9]; also the reference's per-frame slice of pose_enc_iters.
    o.pose_enc_iters = read_only(tensor_to_array(std::move(r.pose_enc_iters)));
    o.c2w = read_only(tensor_to_array(std::move(r.extrinsic_c2w)));
    o.w2c = read_only(tensor_to_array(std::move(r.extrinsic)));
    o.K = read_only(tensor_to_array(std::move(r.intrinsic)));
    o.depth = read_only(tensor_to_array(std::move(r.depth)));
    o.conf = read_only(tensor_to_array(std::move(r.depth_conf)));
    o.world_points = read_only(tensor_to_array(std::move(r.world_points)));
    o.image = read_only(tensor_to_array(std::move(p.image)));
    o.content = p.content;
    o.placement = p.placement;
    o.patch_tokens = read_only(tensor_to_array(std::move(r.patch_tokens)));
    for (Tensor& f : r.features) o.features.append(read_only(tensor_to_array(std::move(f))));
    out.push_back(std::move(o));
  }
  return out;
}

void bind_result(py::module_& m) {
  py::class_<PyResult> result(m, "Result",
                       "One frame's outputs, a value: its arrays are read-only NumPy arrays (float32; source_K float64)\n"
                       "that own their memory (they stay valid after the Session is gone; r.depth.copy() to edit one). Camera convention: OpenCV axes (x right, y down, z forward);\n"
                       "c2w maps camera to world, w2c is its inverse; K is in pixels of the model input.");
  result.def_readonly("frame_index", &PyResult::frame_index, "Position in the sequence, from 0.")
      .def_readonly("is_keyframe", &PyResult::is_keyframe, "Stored in the KV cache (scale frames and keyframes).")
      .def_readonly("rope_time_index", &PyResult::rope_time_index, "3D-RoPE time position (advances only for stored frames).")
      .def_readonly("window_index", &PyResult::window_index,
                    "mode='windowed': the window the result comes from (its pose is aligned to window 0); else 0.")
      .def_property_readonly(
          "window",
          [](const PyResult& r) {
            warn_deprecated("Result.window is deprecated, use Result.window_index");
            return r.window_index;
          },
          "Deprecated spelling of window_index (a DeprecationWarning).")
      .def_property_readonly("is_scale_frame", [](const PyResult& r) { return r.frame_type == FrameType::Scale; },
                             "One of the first scale_frames frames (processed together) of the session, or in\n"
                             "mode='windowed' of its window.")
      .def_property_readonly("frame_type", [](const PyResult& r) { return frame_type_name(r.frame_type); },
                             "'scale', 'keyframe' or 'non-keyframe'.")
      .def_readonly("flow", &PyResult::flow,
                    "keyframe_interval='flow': the mean flow in pixels against the last stored frame that decided; -1 otherwise.")
      .def_property_readonly("source", [](const PyResult& r) { return fs_decode(r.source); },
                             "File name, 'frame_<n>' for video, 'array_<i>', or what push() was given\n"
                             "(a name that is not UTF-8 as os.fsdecode() gives it).")
      .def_readonly("timestamp", &PyResult::timestamp,
                    "Seconds for video and live streams and where push(timestamp=) gave one; the frame index otherwise.")
      .def_readonly("pose_enc", &PyResult::pose_enc, "[9]: t_xyz, quaternion xyzw (scalar last), fov_h, fov_w.")
      .def_readonly("pose_enc_iters", &PyResult::pose_enc_iters, "[camera_iterations, 9]: pose_enc after each refinement.")
      .def_readonly("c2w", &PyResult::c2w, "[3, 4] camera -> world [R | t] (t = camera centre).")
      .def_readonly("w2c", &PyResult::w2c, "[3, 4] world -> camera, the inverse of c2w.")
      .def_readonly("K", &PyResult::K, "[3, 3] intrinsics in pixels (cx = W/2, cy = H/2).")
      .def_readonly("depth", &PyResult::depth, "[H, W] depth along the camera z axis, positive.")
      .def_readonly("conf", &PyResult::conf, "[H, W] depth confidence, > 1.")
      .def_readonly("world_points", &PyResult::world_points, "[H, W, 3] world coordinates of every pixel.")
      .def_readonly("image", &PyResult::image, "[3, H, W] the model input (RGB in [0, 1]) the outputs belong to.")
      .def_property_readonly("content_rect", [](const PyResult& r) { return content_tuple(r.content); },
                             "(x, y, width, height): the pixels of `image` that came from the picture, when the engine\n"
                             "preprocessed it (image_size=, reconstruct() of files); outside is white padding\n"
                             "(preprocess='pad', mixed sizes), whose depth and points show no scene: Exporter and\n"
                             "select_points(content_rect=) leave it out. None for a model input given as it is.")
      .def_property_readonly("source_size",
                             [](const PyResult& r) {
                               return r.placement ? py::object(py::make_tuple(r.placement->source.width, r.placement->source.height))
                                                  : py::object(py::none());
                             },
                             "(width, height) of the picture this frame was preprocessed from (EXIF orientation, a\n"
                             "video's rotation metadata and rotate_cw90 applied), as poses.json's source_size. None for\n"
                             "a float32 [3, H, W] model input.")
      .def_property_readonly("source_K", &source_k,
                             "[3, 3] float64: K in pixels of that picture instead of the model input's (the same rays:\n"
                             "poses.json's source_intrinsics), for using the camera with the original image. None\n"
                             "for a float32 [3, H, W] model input.")
      .def_property_readonly("features",  // a new list each time: the Result stays as it is
                             [](const PyResult& r) {
                               PyObject* copy = PySequence_List(r.features.ptr());
                               if (!copy) throw py::error_already_set();
                               return py::reinterpret_steal<py::list>(copy);
                             },
                    "Session(features=True): per selected aggregator layer, [P, 2C] tokens (P: patches + the special\n"
                    "tokens, 6 as released); else [].")
      .def_readonly("patch_tokens", &PyResult::patch_tokens,
                    "Session(patch_tokens=True): encoder patch tokens [(H/p)(W/p), C]; else None.")
      .def("__repr__", &result_repr)
      .def("__getattr__", &upstream_name, "name"_a);  // only for names the class does not have
  bind_made_by_engine(result, m, "_result_from_state", "Session.push(), finish() and reconstruct()",
                      &PyResult::getstate, &PyResult::setstate);
}

}  // namespace lingbot::python
