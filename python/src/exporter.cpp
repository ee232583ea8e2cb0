// lingbot_map.Exporter: `lingbot-map run`'s export files written from Python results; export_kinds()
// and default_exports(); their bindings.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "checks.h"
#include "interrupts.h"
#include "core/busy_guard.h"
#include "core/error.h"
#include "io/export.h"
#include "io/file_util.h"
#include "io/writers.h"
#include "result.h"
#include "self_ref.h"
#include "strict_args.h"

namespace lingbot::python {

using namespace py::literals;
namespace fs = std::filesystem;

namespace {

// `meta` as JSON. NumPy scalars and arrays become numbers and lists (their tolist()); anything else
// json.dumps cannot write, and NaN / Infinity (not JSON: allow_nan=False), is refused naming `meta`.
nlohmann::json json_from_python(const py::handle& obj) {
  if (obj.is_none()) return nullptr;
  const py::cpp_function numpy_values([](const py::handle& v) -> py::object {
    if (py::isinstance(v, py::module_::import("numpy").attr("generic")) || py::isinstance<py::array>(v))
      return v.attr("tolist")();
    throw py::type_error("Object of type " + py::str(py::type::of(v).attr("__name__")).cast<std::string>() +
                         " is not JSON serializable");
  });
  py::str text;
  try {
    text = py::module_::import("json").attr("dumps")(obj, "allow_nan"_a = false, "default"_a = numpy_values,
                                                       "ensure_ascii"_a = false);
  } catch (py::error_already_set& e) {
    const std::string what = "meta: " + py::str(e.value()).cast<std::string>();
    if (e.matches(PyExc_TypeError)) throw py::type_error(what);
    if (e.matches(PyExc_ValueError)) throw py::value_error(what);
    throw;
  }
  // A str from os.fsdecode (a model path that is not UTF-8) holds its undecodable bytes as lone
  // surrogates, which JSON cannot carry: back to those bytes, then each invalid sequence as U+FFFD, as
  // `run` writes the same path. First a surrogate pair given as two code points is joined into its
  // character, and a lone surrogate that stands for no byte becomes U+FFFD.
  const py::object joined = text.attr("encode")("utf-16", "surrogatepass").attr("decode")("utf-16", "surrogatepass");
  const py::object only_bytes =
      py::module_::import("re").attr("sub")(py::str("[\\ud800-\\udc7f\\udd00-\\udfff]"), py::str("\xEF\xBF\xBD"), joined);  // U+FFFD
  const py::object raw = only_bytes.attr("encode")("utf-8", "surrogateescape");
  return nlohmann::json::parse(raw.attr("decode")("utf-8", "replace").attr("encode")("utf-8").cast<std::string>());
}

RigidTransform<double> rigid_transform_arg(const py::handle& a, const char* what) {
  const auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!arr || arr.ndim() != 2 || arr.shape(0) != 3 || arr.shape(1) != 4)
    throw py::value_error(std::string(what) + " must be a float array [3, 4], got " + describe_array(a));
  RigidTransform<double> m{};
  for (size_t i = 0; i < 12; ++i) m[i] = arr.data()[i];
  return m;
}

io::Mat33 mat33(const py::handle& a, const char* what) {
  const auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!arr || arr.ndim() != 2 || arr.shape(0) != 3 || arr.shape(1) != 3)
    throw py::value_error(std::string(what) + " must be a float array [3, 3], got " + describe_array(a));
  io::Mat33 m{};
  for (size_t i = 0; i < 9; ++i) m[i] = arr.data()[i];
  return m;
}

// The export list as run's --export takes it: None = the default list, a comma string, or a list.
std::vector<std::string> export_names(const py::object& exports) {
  // (the parameter keeps the plural: `export` is a C++ keyword)
  if (exports.is_none()) return io::parse_export_list(io::default_export_list());
  if (py::isinstance<py::str>(exports)) return value_of([&] { return io::parse_export_list(exports.cast<std::string>()); });
  if (py::isinstance<py::list>(exports) || py::isinstance<py::tuple>(exports)) {
    std::string list;
    for (const auto& item : exports) {
      if (!py::isinstance<py::str>(item))
        throw py::type_error("export must be names (str), got " + describe_array(item));
      if (!list.empty()) list += ',';
      list += item.cast<std::string>();
    }
    check_value(!list.empty(), "export is empty: give at least one export name");
    return value_of([&] { return io::parse_export_list(list); });
  }
  throw py::type_error("export must be None, a comma-separated str or a list of names, got " + describe_array(exports));
}

// run's exporters (io::ExportSet) fed with Python results. Opened at the first write, when the frame
// size is known; that removes earlier outputs of this Exporter's exports in `out` (not of the others:
// another Exporter may be writing them into the same folder).
class PyExporter {
 public:
  // export_list: export= (run's --export); old_exports: its old spelling exports= (docs/naming.md).
  PyExporter(const fs::path& out, const py::object& export_list, double conf_threshold, Int downsample, const py::object& meta,
             const py::object& old_exports)
      : meta_(json_from_python(meta)) {
    py::object exports = export_list;
    if (!old_exports.is_none()) {
      if (!export_list.is_none()) throw py::value_error("give export or its old spelling exports, not both");
      warn_deprecated("exports= is deprecated, use export= (run's --export)");
      exports = old_exports;
    }
    check_value(downsample >= 1, "downsample must be >= 1, got ", downsample);
    check_value(std::isfinite(conf_threshold), "conf_threshold must be a finite number, got ", conf_threshold);
    if (!meta_.is_null() && !meta_.is_object()) throw py::type_error("meta must be a dict, got " + meta_.dump());
    std::vector<std::unique_ptr<io::Exporter>> exporters;
    const std::vector<std::string> names = export_names(exports);
    if (std::find(names.begin(), names.end(), "poses") != names.end()) {  // meta goes into poses.json only
      value_of([&] { io::check_poses_metadata(meta_); });  // refused now, not at the first write after the computation
      for (const char* own : {"image_width", "image_height"})
        check_value(meta_.is_null() || !meta_.contains(own), "meta must not contain the key '", own,
                      "' (the Exporter sets it from the frames)");
    }
    for (const std::string& name : names) {
      consecutive_ = consecutive_ || name == "viewer";  // viewer/NNNNNN.bin: frames 0, 1, 2, ... (the page loads them so)
      exporters.push_back(io::make_exporter(name));
    }
    io::check_output_folder_path(out, "Exporter folder");  // now, not at the first write after the computation
    set_ = std::make_unique<io::ExportSet>(std::move(exporters));
    run_.out_dir = out;
    run_.points = {static_cast<float>(conf_threshold), downsample};
    const ReleasedGil nogil;
    io::ensure_writable_dir(out);  // a bad folder fails here, before any frame
  }

  void write(const PyResult& r, const py::object& mask) {
    BusyGuard busy(busy_, "this Exporter");
    LINGBOT_CHECK(!closed_, "the Exporter is closed: create a new one");
    // Order first, before any file is touched: a refused frame leaves every export as it was.
    if (consecutive_)
      LINGBOT_CHECK(r.frame_index == frames_, "frames must be written in order 0, 1, 2, ... with the viewer export: got frame ",
                    r.frame_index, ", expected ", frames_);
    else
      LINGBOT_CHECK(r.frame_index > last_index_, "frames must be written in increasing order: got frame ", r.frame_index,
                    " after frame ", last_index_);
    for (const auto& [field, v] :
         {std::pair<const char*, const py::object*>{"pose_enc", &r.pose_enc}, {"c2w", &r.c2w}, {"w2c", &r.w2c},
          {"K", &r.K}, {"depth", &r.depth}, {"world_points", &r.world_points}, {"image", &r.image}})
      LINGBOT_CHECK(!v->is_none(), "result of frame ", r.frame_index, " has no ", field, " (camera and depth heads are needed)");
    const auto depth = py::reinterpret_borrow<py::array>(r.depth);
    check_value(depth.ndim() == 2, "depth must be [H, W], got ", describe_array(r.depth));
    const int H = static_cast<int>(depth.shape(0)), W = static_cast<int>(depth.shape(1));
    const size_t hw = static_cast<size_t>(H) * static_cast<size_t>(W);
    if (begun_)
      LINGBOT_CHECK(W == run_.width && H == run_.height, "frame ", r.frame_index, " is ", H, "x", W,
                    " (HxW), earlier frames of this Exporter are ", run_.height, "x", run_.width);
    const auto pose_enc = f32_exact(r.pose_enc, {9}, "pose_enc");
    const auto d = f32_exact(r.depth, {H, W}, "depth");
    const auto pts = f32_exact(r.world_points, {H, W, 3}, "world_points");
    const auto img = f32_exact(r.image, {3, H, W}, "image");
    std::optional<CArray<float>> conf;  // (a default array_t is not "none")
    if (!r.conf.is_none()) conf = f32_exact(r.conf, {H, W}, "conf");
    std::optional<CArray<uint8_t>> keep;
    if (!mask.is_none()) keep = mask_exact(mask, H, W, "mask");
    io::ExportFrame x;
    x.index = r.frame_index;
    x.timestamp = r.timestamp;
    x.timestamp_unit = r.timestamp_unit;
    x.source = r.source;
    x.keyframe = r.is_keyframe;
    x.scale_frame = r.frame_type == FrameType::Scale;
    x.image = std::span<const float>(img.data(), 3 * hw);
    x.pose_enc = std::span<const float>(pose_enc.data(), 9);
    x.c2w = rigid_transform_arg(r.c2w, "c2w");
    x.w2c = rigid_transform_arg(r.w2c, "w2c");
    x.intrinsics = mat33(r.K, "K");
    x.depth = std::span<const float>(d.data(), hw);
    if (conf) x.depth_conf = std::span<const float>(conf->data(), hw);
    x.world_points = std::span<const float>(pts.data(), 3 * hw);
    x.content = r.content;
    x.placement = r.placement;
    if (keep) x.point_mask = std::span<const uint8_t>(keep->data(), hw);

    const ReleasedGil nogil;
    if (!begun_) {
      run_.width = W;
      run_.height = H;
      run_.scale_frames = static_cast<int>(r.scale_frames);
      run_.meta = meta_.is_null() ? nlohmann::json::object() : meta_;
      run_.meta["image_width"] = W;
      run_.meta["image_height"] = H;
      set_->begin(run_, io::StaleOutputs::SelectedExports);  // also removes an earlier run's summary.json
      begun_ = true;
    }
    set_->frame(x);
    ++frames_;
    last_index_ = r.frame_index;
  }

  // Finalises every export, whatever ended the writing (the files are complete for the frames written).
  void close() {
    BusyGuard busy(busy_, "this Exporter");
    if (closed_) return;
    closed_ = true;
    const ReleasedGil nogil;
    if (begun_) set_->finish();
  }
  // Garbage-collected without close(): the files are finished rather than left without their ends,
  // with a ResourceWarning as an open file gives. The GIL is held here (pybind11 deallocation).
  ~PyExporter() {
    if (closed_ || !begun_ || ::getpid() != owner_pid_) return;  // a forked child leaves the parent's files
    closed_ = true;
    try {
      set_->finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lingbot_map.Exporter: finishing %s at garbage collection failed: %s\n",
                   run_.out_dir.c_str(), e.what());
    }
    if (python_can_warn() &&
        PyErr_WarnFormat(PyExc_ResourceWarning, 1,
                         "lingbot_map.Exporter for %s was not closed: its files were finished at garbage "
                         "collection (call close(), or use a with-block)",
                         run_.out_dir.c_str()) != 0)
      PyErr_WriteUnraisable(nullptr);
  }
  PyExporter(const PyExporter&) = delete;
  PyExporter& operator=(const PyExporter&) = delete;
  // Readers take the guard too: write() changes what they read with the GIL released.
  py::object report() {
    BusyGuard busy(busy_, "this Exporter");
    return py::module_::import("json").attr("loads")(io::json_text(set_->report()));
  }
  int64_t frames() {
    BusyGuard busy(busy_, "this Exporter");
    return frames_;
  }

 private:
  std::unique_ptr<io::ExportSet> set_;
  io::ExportRun run_;
  nlohmann::json meta_;
  bool begun_ = false, closed_ = false;
  pid_t owner_pid_ = ::getpid();  // the process that writes the files
  bool consecutive_ = false;  // the viewer export is on: frame indices 0, 1, 2, ...
  int64_t frames_ = 0;
  int64_t last_index_ = -1;   // frame index of the last frame written
  std::atomic<bool> busy_{false};
};

}  // namespace

void bind_exporter(py::module_& m) {
  py::class_<PyExporter>(m, "Exporter",
                         "Writes results into `out` with the exporters of `lingbot-map run --export` (the same\n"
                         "files, byte for byte, for the same results): `export` is None (run's default list,\n"
                         "default_exports()), a comma string like run's --export ('all' = every kind) or a list\n"
                         "of names (export_kinds()). Points (PLY, GLB, COLMAP, viewer) have conf > conf_threshold,\n"
                         "every downsample-th. `meta` adds top-level fields to poses.json. The files are opened at the\n"
                         "first write(), which removes earlier outputs of this Exporter's exports in `out` (not of\n"
                         "other exports: two Exporters may share a folder) and an earlier run's summary.json;\n"
                         "close() (or the end of a with-block) finalises them. summary.json is run's own and not written.")
      .def(py::init<const fs::path&, const py::object&, double, Int, const py::object&, const py::object&>(),
           "out"_a, py::kw_only(), "export"_a = py::none(),
           "conf_threshold"_a = 1.5, "downsample"_a = 10, "meta"_a = py::none(), "exports"_a = py::none())
      .def("write", constructed(&PyExporter::write), "result"_a, py::kw_only(), "mask"_a = py::none(),
           "Appends one frame's result to every export (frames in order). mask: bool or uint8 [H, W] over the\n"
           "model input (Result.image), False / 0 where the pixel gives no point (sky, moving objects): the point\n"
           "clouds (PLY, GLB, COLMAP, viewer) leave those pixels out; depth maps and poses are unchanged.")
      .def("close", constructed(&PyExporter::close), "Finalises every export (a second close() does nothing).")
      .def("report", constructed(&PyExporter::report), "Per export: the files written and counts (summary.json's 'exports').")
      .def_property_readonly("frames", constructed(&PyExporter::frames), "Frames written so far.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Self<PyExporter> self, const py::args&) { constructed_self<PyExporter>(self.handle).close(); });

  m.def(
      "export_kinds",
      [] {
        py::list out;
        for (const io::ExportKind& k : io::export_kinds())
          out.append(py::dict("name"_a = std::string(k.name), "description"_a = std::string(k.description),
                              "default"_a = k.default_on));
        return out;
      },
      "Every export Exporter (and run --export) knows: [{'name', 'description', 'default'}], in run's order.");
  m.def("default_exports", &io::default_export_list, "run's default --export list as one comma string (poses,tum,depth,ply,depth-preview,viewer).");
}

}  // namespace lingbot::python
