// The module's free functions: load_image, preprocess, demo_frame, select_points, load_safetensors,
// verify and blas (the CLI's helpers, as `run` and `verify` use them).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "interrupts.h"
#include "kernels/cpu/ops.h"
#include "pipeline/demo_model.h"
#include "bench/harness/verify.h"
#include "bindings.h"
#include "checks.h"
#include "core/error.h"
#include "io/image.h"
#include "io/preprocess.h"
#include "io/safetensors.h"
#include "io/writers.h"
#include "lingbot/preprocess.h"
#include "model.h"
#include "options.h"
#include "strict_args.h"

namespace lingbot::python {

using namespace py::literals;
namespace fs = std::filesystem;

void bind_functions(py::module_& m) {
  m.def(
      "load_image",
      [](const fs::path& path) {
        io::ImageU8 img;
        CorruptData corrupt;
        {
          const ReleasedGil nogil;
          img = io::load_image(path, &corrupt);
        }
        if (corrupt.any())  // Pillow decodes such a file without a word; run counts it as a damaged frame
          warn_quoting_files(PyExc_RuntimeWarning, path.string() + ": decoded with corrupt data (libjpeg: " +
                                                       corrupt.first_warning + "; " + std::to_string(corrupt.warnings) +
                                                       (corrupt.warnings == 1 ? " warning)" : " warnings)"));
        return image_to_array(std::move(img));
      },
      "path"_a,
      "Decodes an image file as `run` does (PIL-compatible: EXIF orientation, alpha on white) -> uint8 [H, W, 3].\n"
      "A JPEG that libjpeg decodes with corrupt data (as Pillow does, silently) gives a RuntimeWarning.");

  m.def(
      "preprocess",
      [](const py::handle& image, Int image_size, const std::optional<std::string>& preprocess, Int patch_size,
         const std::optional<std::string>& mode) {
        // mode= is the old spelling of preprocess= here too.
        if (mode && preprocess) throw py::value_error("give preprocess or its old spelling mode, not both");
        if (mode) warn_deprecated("mode= is deprecated, use preprocess=");
        InputFrame in = frame_from_python(image, "image", FrameKinds::Picture);
        const PreprocessOptions pre =
            preprocess_options(image_size, preprocess.value_or(mode.value_or("crop")), patch_size);
        Tensor t;
        {
          const ReleasedGil nogil;
          t = io::preprocess_image(*in.rgb8, pre);
        }
        return tensor_to_array(std::move(t));
      },
      "image"_a, "image_size"_a = kDefaultImageSize, "preprocess"_a = py::none(), "patch_size"_a = 14, py::kw_only(),
      "mode"_a = py::none(),
      "`run`'s preprocessing (upstream's load_and_preprocess_images, bit-exact): PIL bicubic resize, then\n"
      "centre crop (preprocess='crop', the default: width := image_size) or white padding\n"
      "(preprocess='pad': longer side := image_size) -> float32 [3, H, W] = uint8 / 255.");

  m.def(
      "demo_frame",
      [](Int64 index, Int width, Int height) {
        check_value(index >= 0, "index must be >= 0, got ", index);
        check_value(width > 0 && height > 0, "width and height must be positive, got ", width, "x", height);
        // Before allocating: the limit push() and load_image() apply (no frame may be larger).
        check_value(static_cast<int64_t>(width) * height <= io::kMaxImagePixels, "demo_frame of ", height, "x", width,
                    " pixels (HxW) would be more than the ", io::kMaxImagePixels, " a frame may have");
        io::ImageU8 img;
        {
          const ReleasedGil nogil;
          img = render_demo_frame(index, width, height);
        }
        return image_to_array(std::move(img));
      },
      "index"_a, "width"_a = kDemoFrameWidth, "height"_a = kDemoFrameHeight,
      "Frame `index` of the generated demo sequence (a camera moving through a textured room) as uint8 [H, W, 3].");

  m.def(
      "select_points",
      [](const py::handle& world_points, const py::handle& image, const py::object& conf, const py::object& depth,
         double conf_threshold, Int downsample, const py::object& content_rect, const py::object& mask) {
        if (!py::isinstance<py::array>(world_points))
          throw py::type_error("world_points must be a float32 array [H, W, 3], got " + describe_array(world_points));
        const auto wp = py::reinterpret_borrow<py::array>(world_points);
        if (wp.ndim() != 3 || wp.shape(2) != 3)
          throw py::value_error("world_points must be a float32 array [H, W, 3], got " + describe_array(world_points));
        check_value(downsample >= 1, "downsample must be >= 1, got ", downsample);
        check_value(std::isfinite(conf_threshold), "conf_threshold must be a finite number, got ", conf_threshold);
        const py::ssize_t H = wp.shape(0), W = wp.shape(1);
        const size_t hw = static_cast<size_t>(H * W);
        const auto pts = f32_exact(world_points, {H, W, 3}, "world_points");
        const auto img = f32_exact(image, {3, H, W}, "image");
        std::optional<CArray<float>> c;
        if (!conf.is_none()) c = f32_exact(conf, {H, W}, "conf");
        std::optional<CArray<float>> d;
        if (!depth.is_none()) d = f32_exact(depth, {H, W}, "depth");
        io::PointArea area;  // every pixel
        if (!content_rect.is_none()) {
          const auto bad = [&] {
            return py::value_error("content_rect must be None or (x, y, width, height) ints (Result.content_rect), got " +
                                   std::string(py::repr(content_rect)));
          };
          if (!py::isinstance<py::tuple>(content_rect) && !py::isinstance<py::list>(content_rect)) throw bad();
          const auto seq = content_rect.cast<py::sequence>();
          if (py::len(seq) != 4) throw bad();
          std::array<long long, 4> v{};
          for (size_t i = 0; i < 4; ++i) {
            const py::object e = seq[i];
            if (!py::isinstance<py::int_>(e) || py::isinstance<py::bool_>(e)) throw bad();
            v[i] = e.cast<long long>();
          }
          check_value(v[0] >= 0 && v[1] >= 0 && v[2] >= 0 && v[3] >= 0 && v[0] + v[2] <= W && v[1] + v[3] <= H,
                      "content_rect (", v[0], ", ", v[1], ", ", v[2], ", ", v[3], ") is not inside the ", H, "x", W,
                      " (HxW) frame");
          area.frame_width = static_cast<int>(W);
          area.rect = io::PixelRect{static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]),
                                    static_cast<int>(v[3])};
        }
        std::optional<CArray<uint8_t>> keep;
        if (!mask.is_none()) {
          keep = mask_exact(mask, H, W, "mask");
          area.mask = std::span<const uint8_t>(keep->data(), hw);
        }
        io::PointBatch b;
        {
          const ReleasedGil nogil;
          b = io::select_points(std::span<const float>(pts.data(), 3 * hw), std::span<const float>(img.data(), 3 * hw),
                                c ? std::span<const float>(c->data(), hw) : std::span<const float>(),
                                static_cast<float>(conf_threshold), downsample,
                                d ? std::span<const float>(d->data(), hw) : std::span<const float>(), area);
        }
        const py::ssize_t n = static_cast<py::ssize_t>(b.size());
        py::array_t<float> xyz({n, py::ssize_t{3}});
        py::array_t<uint8_t> rgb({n, py::ssize_t{3}});
        std::copy(b.xyz.begin(), b.xyz.end(), xyz.mutable_data());
        std::copy(b.rgb.begin(), b.rgb.end(), rgb.mutable_data());
        return py::make_tuple(xyz, rgb);
      },
      "world_points"_a, "image"_a, "conf"_a = py::none(), "depth"_a = py::none(), "conf_threshold"_a = 1.5,
      "downsample"_a = 10, "content_rect"_a = py::none(), "mask"_a = py::none(),
      "The points `run` puts into points.ply for a frame with finite pose: finite points whose depth and\n"
      "conf (when given) are valid (finite, > 0), conf > conf_threshold, inside content_rect (when given:\n"
      "Result.content_rect, the picture's part of a padded frame) and where mask (bool or uint8 [H, W], as\n"
      "Exporter.write's) is nonzero, then every downsample-th\n"
      "-> (xyz float32 [N, 3], rgb uint8 [N, 3]) coloured from the model input `image`.");

  m.def(
      "load_safetensors",
      [](const fs::path& path) {
        struct Item {
          std::string name;
          Tensor floats;                      // float dtypes, as f32
          std::optional<io::IntTensor> ints;  // integer dtypes, as int64
        };
        std::vector<Item> items;
        {
          const ReleasedGil nogil;  // reading and converting need no Python objects
          io::check_path_exists(path, "safetensors file");  // FileNotFound, as Model.load's missing file
          const io::SafetensorsReader r = io::SafetensorsReader::open(path.string());
          for (const auto& e : r.entries()) {
            Item it{e.name, {}, std::nullopt};
            if (e.dtype == io::StorageDType::F64 || e.dtype == io::StorageDType::F32 || e.dtype == io::StorageDType::F16 ||
                e.dtype == io::StorageDType::BF16)
              it.floats = r.read(e.name, DType::F32);
            else
              it.ints = r.read_int(e.name);
            items.push_back(std::move(it));
          }
        }
        py::dict out;
        for (Item& it : items) {
          if (it.ints) {
            py::array_t<int64_t> a(std::vector<py::ssize_t>(it.ints->shape.begin(), it.ints->shape.end()));
            std::copy(it.ints->values.begin(), it.ints->values.end(), a.mutable_data());
            out[py::str(it.name)] = a;
          } else if (it.floats.empty()) {  // a [0, 3] tensor is an empty array, not None (tensor_to_array's "absent")
            out[py::str(it.name)] =
                py::array_t<float>(std::vector<py::ssize_t>(it.floats.shape().begin(), it.floats.shape().end()));
          } else {
            out[py::str(it.name)] = tensor_to_array(std::move(it.floats));
          }
        }
        return out;
      },
      "path"_a,
      "Reads a .safetensors file with the engine's reader -> {name: array} (floats as float32, integers as int64).");

  m.def(
      "verify",
      [](const std::optional<fs::path>& golden, const std::optional<std::string>& kv_backend, const std::string& kv_dtype,
         Int threads, const std::optional<std::string>& backend, const std::string& device, const std::string& weights_dtype,
         const std::optional<std::vector<std::string>>& only, const std::optional<fs::path>& case_dir) {
        // golden: verify --golden's folder; case_dir= is its old spelling (docs/naming.md).
        if (case_dir) {
          if (golden) throw py::value_error("give golden or its old spelling case_dir, not both");
          warn_deprecated("case_dir= is deprecated, use golden= (verify --golden)");
        } else if (!golden) {
          throw py::type_error("verify() missing 1 required positional argument: 'golden'");
        }
        VerifyOptions o;
        o.case_dir = (golden ? *golden : *case_dir).string();
        o.kv_backend = value_of([&] { return parse_kv_backend(kv_backend_arg(kv_backend, backend)); });
        o.kv_dtype = value_of([&] { return parse_dtype(kv_dtype); });
        check_value(threads >= 0, "threads must be >= 0 (0 = all cores), got ", threads);
        o.threads = threads;
        o.device = resolve_device(value_of([&] { return parse_device(device); }));
        o.weights_dtype = PyModel::load_options(weights_dtype, device).weights_dtype;  // as verify --weights-dtype
        o.only = only.value_or(std::vector<std::string>{});
        VerifyReport rep;
        {
          const ReleasedGil nogil;
          rep = run_verify(o);
        }
        py::list rows;
        for (const VerifyRow& row : rep.rows)
          rows.append(py::dict("tensor"_a = row.tensor, "frames"_a = row.frames, "max_abs"_a = row.max_abs,
                               "max_rel"_a = row.max_rel, "tolerance"_a = row.tolerance, "status"_a = row.status,
                               "note"_a = row.note));
        return py::dict("case"_a = rep.case_name, "passed"_a = rep.passed(), "rows"_a = rows,
                        "report"_a = format_verify_report(rep));
      },
      "golden"_a = py::none(), py::kw_only(), "kv_backend"_a = py::none(), "kv_dtype"_a = "f32", "threads"_a = 0,
      "backend"_a = py::none(), "device"_a = "cpu", "weights_dtype"_a = "f32", "only"_a = py::none(),
      "case_dir"_a = py::none(),
      "`lingbot-map verify --golden`: runs a golden case directory and compares with its reference ->\n"
      "{'case', 'passed', 'rows': [{'tensor', 'max_abs', 'status', ...}], 'report': the CLI's table}.\n"
      "weights_dtype ('f32' the reference's precision; 'bf16' ... with tolerances scaled as the CLI's) and\n"
      "only (glob patterns of tensor names; the others are reported SKIP) as verify --weights-dtype / --only.");

  m.def("blas", &kernels::blas_description, "The BLAS library and kernels in use (as `run` prints them).");
}

}  // namespace lingbot::python
