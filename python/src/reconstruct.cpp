// reconstruct() and the lingbot_map.Reconstruction iterator it returns: a folder, a video or a list of
// arrays through one stream, as `lingbot-map run` reads and preprocesses them; their bindings.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <atomic>
#include <cmath>
#include <deque>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "checks.h"
#include "gc_support.h"
#include "core/busy_guard.h"
#include "core/error.h"
#include "fs_text.h"
#include "interrupts.h"
#include "io/frame_source.h"
#include "io/preprocess.h"
#include "io/video.h"
#include "model.h"
#include "options.h"
#include "result.h"
#include "self_ref.h"
#include "stream.h"
#include "strict_args.h"

namespace lingbot::python {

using namespace py::literals;
namespace fs = std::filesystem;

namespace {

// A second call while one runs: from another thread, or from this call's progress callback.
constexpr std::string_view kOneIteratorCall =
    " (one call at a time: from another thread, or from this call's progress callback; use one iterator per thread)";


struct SourceArgs {
  std::optional<int> image_size;  // None: 518 (uint8 frames, folders, videos); float32 arrays go in as they are
  double fps = 10;
  int64_t first_k = 0;
  int64_t stride = 1;
  bool rotate_cw90 = false;
};

// A size as the engine's messages write one (Session.push: "image size 70x112 (HxW) ..."), the order of
// an array's shape.
std::string hxw(const io::ImageSize& s) {
  return std::to_string(s.height) + "x" + std::to_string(s.width) + " (HxW)";
}

// The frames of a folder, a video or a list of arrays, preprocessed as `run` does.
class FrameFeed {
 public:
  virtual ~FrameFeed() = default;
  // Next model input (needs the GIL for array lists; decoding/preprocessing release it). False at the end.
  virtual bool next(Pending* out) = 0;
  // What the video decoder lost or repaired so far, or the folder's JPEGs decoded with corrupt data;
  // nullptr for arrays.
  virtual const io::StreamDamage* damage() const { return nullptr; }
  // The iteration is over: lets go of the input (the video decoder, the list of frames); damage()
  // still answers. Called with the GIL held.
  virtual void close() = 0;
  std::optional<int64_t> count, estimated;
  io::ImageSize canvas;
  std::vector<std::string> notices;  // run's "notice:" lines (UserWarnings): the source's, and mixed sizes
};

class SourceFeed : public FrameFeed {
 public:
  SourceFeed(io::FrameSource src, const PreprocessOptions& pre) : src_(std::move(src)), pre_(pre) {
    count = src_->count();
    estimated = src_->estimated_count();
    std::string mixed_sizes;
    canvas = src_->canvas(pre_, &mixed_sizes);
    notices = src_->notices();
    if (!mixed_sizes.empty()) notices.push_back(mixed_sizes);
  }
  bool next(Pending* out) override {
    const ReleasedGil nogil;
    io::SourceFrame f;
    if (!src_ || !src_->next(&f)) return false;
    // A folder's frame is given to the model right after it is read: its damage is the run's.
    if (f.corrupt.any()) folder_damage_.add_damaged_image(f.index, f.name, f.corrupt);
    out->index = f.index;
    out->source = std::move(f.name);
    out->timestamp = f.timestamp;
    out->timestamp_unit = f.timestamp_unit;
    out->image = io::preprocess_image(f.image, pre_, canvas);
    const io::FramePlacement placed = io::place_on_frame({f.image.width, f.image.height}, pre_, canvas);
    out->content = placed.content;
    out->placement = placed.source;
    return true;
  }
  const io::StreamDamage* damage() const override {
    if (!src_) return &final_damage_;
    const io::StreamDamage* video = src_->damage();
    return video ? video : &folder_damage_;
  }
  void close() override {
    if (!src_) return;
    final_damage_ = *damage();
    const ReleasedGil nogil;  // closing a stream can wait on the network (an RTSP teardown)
    src_.reset();
  }

 private:
  std::optional<io::FrameSource> src_;
  io::StreamDamage folder_damage_;  // an image folder's frames read so far whose JPEG lost data
  io::StreamDamage final_damage_;   // after close()
  PreprocessOptions pre_;
};

class ArrayFeed : public FrameFeed {
 public:
  // The list is taken as it is now (a tuple of its items): frames appended or replaced later are not read.
  // preprocessing_asked: image_size= or preprocess= was given, which float32 frames cannot take.
  ArrayFeed(py::sequence frames, const PreprocessOptions& pre, bool preprocessing_asked)
      : frames_(py::tuple(frames)), pre_(pre) {
    const int64_t n = static_cast<int64_t>(py::len(frames_));
    check_value(n > 0, "images is an empty list: give at least one frame");
    count = estimated = n;
    // Validate every frame now (dtype, shape, float values, sizes: a bad one fails before any work) and
    // find upstream's batch canvas. Each frame is copied once for the checks and dropped.
    std::vector<io::ImageSize> sizes;
    int kinds = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::string what = "images[" + std::to_string(i) + "]";
      const py::handle item = frames_[static_cast<size_t>(i)];
      if (py::isinstance<py::str>(item) || py::hasattr(item, "__fspath__"))
        throw py::type_error(what + " is a path: images= takes a folder, or a list of arrays (such as "
                             "[lingbot_map.load_image(p) for p in paths])");
      if (py::isinstance<py::bytes>(item))
        throw py::type_error(what + " is bytes: images= takes a folder, or a list of decoded frames (uint8 arrays "
                             "[H, W, 3]; lingbot_map.load_image(path) decodes a file)");
      const InputFrame f = frame_from_python(item, what);
      kinds |= f.rgb8 ? 1 : 2;
      if (kinds == 3)
        throw py::type_error("images mixes uint8 frames (preprocessed here) and float32 frames (model inputs): use one kind");
      if (!f.rgb8 && preprocessing_asked)
        throw py::value_error("image_size= and preprocess= preprocess uint8 frames; float32 frames are model inputs "
                              "already (give uint8 [H, W, 3] frames, or leave both unset)");
      model_inputs = !f.rgb8;
      if (f.rgb8) {
        sizes.push_back(io::preprocessed_size({f.rgb8->width, f.rgb8->height}, pre_));
        continue;
      }
      // float32 frames are model inputs as they are: one size, whole patches (a frame size the model
      // cannot take: lingbot_map.Error, as Session.push raises it).
      const io::ImageSize s{static_cast<int>(f.chw.shape()[2]), static_cast<int>(f.chw.shape()[1])};
      if (s.width % pre_.patch_size != 0 || s.height % pre_.patch_size != 0)
        throw Error(what + ": a float32 model input must be a multiple of the patch size " +
                    std::to_string(pre_.patch_size) + " on both sides, got " + hxw(s));
      if (!sizes.empty() && !(sizes.front() == s))
        throw Error("float32 model inputs must all have one size: images[0] is " + hxw(sizes.front()) + ", " + what +
                    " is " + hxw(s));
      sizes.push_back(s);
    }
    canvas = io::batch_canvas_size(sizes);
    if (const std::string mixed = io::mixed_sizes_notice(sizes); !mixed.empty()) notices.push_back(mixed);
  }
  bool model_inputs = false;  // the frames are float32 model inputs (no preprocessing)

  bool next(Pending* out) override {
    if (next_ >= static_cast<int64_t>(py::len(frames_))) return false;
    InputFrame in = frame_from_python(frames_[static_cast<size_t>(next_)], "images[" + std::to_string(next_) + "]");
    out->index = next_;
    out->source = "array_" + std::to_string(next_);
    out->timestamp = static_cast<double>(next_);
    {
      const ReleasedGil nogil;
      out->image = in.rgb8 ? io::preprocess_image(*in.rgb8, pre_, canvas) : std::move(in.chw);
    }
    if (in.rgb8) {
      const io::FramePlacement placed = io::place_on_frame({in.rgb8->width, in.rgb8->height}, pre_, canvas);
      out->content = placed.content;
      out->placement = placed.source;
    }
    ++next_;
    return true;
  }
  void close() override { frames_ = py::tuple(); }  // (needs the GIL: it drops references)

 private:
  py::tuple frames_;
  PreprocessOptions pre_;
  int64_t next_ = 0;
};

class PyReconstruction {
 public:
  PyReconstruction(const py::object& images, const py::object& video, const py::object& model, const SourceArgs& src,
                   const SessionArgs& args_in, const ModeArgs& mode)
      : model_(model_from_python(model, args_in.device)) {
    const SessionArgs args = with_model_defaults(args_in, model_.model->config());
    const bool has_images = !images.is_none(), has_video = !video.is_none();
    if (has_images == has_video)
      throw py::value_error(has_images ? "give either images= or video=, not both"
                                       : "no input: give images= (a folder or a list of arrays) or video= (a file)");
    // Before any decoding: bad options fail first.
    int interval = parse_keyframe_interval(args.keyframe_interval);
    const std::optional<WindowedOptions> windowed = windowed_options(mode, *args.scale_frames);
    const PreprocessOptions pre =
        preprocess_options(src.image_size.value_or(kDefaultImageSize), mode.preprocess, model_.model->patch_size());
    pre_ = pre;
    // A path as os.fspath takes it (str, bytes, os.PathLike), as Model.load and load_image do.
    const bool folder = has_images && (py::isinstance<py::str>(images) || py::isinstance<py::bytes>(images) ||
                                       py::hasattr(images, "__fspath__"));
    if (has_images && !folder) {
      if (!py::isinstance<py::sequence>(images) || py::isinstance<py::bytearray>(images))
        throw py::type_error("images must be a folder path (str, bytes or os.PathLike) or a list of arrays, got " +
                             describe_array(images));
      // One frame given as images=: its rows would be taken for frames ("images[0] must be ... got (112, 3)").
      if (py::isinstance<py::array>(images) && py::reinterpret_borrow<py::array>(images).ndim() == 3)
        throw py::value_error("images is one frame (" + describe_array(images) + "): images= takes a folder or a "
                              "sequence of frames, so pass [frame] (a stack [N, H, W, 3] is a sequence too)");
      if (src.first_k != 0 || src.stride != 1 || src.rotate_cw90)
        throw py::value_error("first_k, stride and rotate_cw90 select frames of a folder or video; slice the list instead");
      auto feed = std::make_unique<ArrayFeed>(images.cast<py::sequence>(), pre,
                                              src.image_size.has_value() || mode.preprocess_given);
      if (feed->model_inputs) pre_.reset();  // options: image_size / preprocess None, as a Session without them
      for (const std::string& notice : feed->notices) warn_user(notice);
      feed_ = std::move(feed);
      kind_ = "arrays";
    } else {
      io::FrameSelection sel;
      sel.first_k = src.first_k;
      sel.stride = src.stride;
      sel.video_fps = src.fps;
      sel.rotate_clockwise_90 = src.rotate_cw90;
      const fs::path path = [&] {
        try {
          return (has_images ? images : video).cast<fs::path>();
        } catch (const py::cast_error&) {  // a NUL byte (the only thing a str, bytes or PathLike path cannot hold)
          throw py::type_error(std::string(has_images ? "images" : "video") +
                               " is not a path: it holds a NUL byte (encoded image or video data? give a path, or "
                               "decoded frames as a list of arrays)");
        }
      }();
      path_ = path.string();
      if (has_video) io::quiet_libav_logging();  // FFmpeg would print a second copy of every error
      std::unique_ptr<SourceFeed> feed;
      {
        const ReleasedGil nogil;
        feed = std::make_unique<SourceFeed>(has_images ? io::FrameSource::from_folder(path, sel)
                                                       : io::FrameSource::from_video(path, sel),
                                            pre);
      }
      for (const std::string& notice : feed->notices) warn_user(notice);  // run's "notice:" lines
      feed_ = std::move(feed);
      kind_ = has_images ? "images" : "video";
    }
    const int patch = pre.patch_size;
    check_value(feed_->canvas.width >= patch && feed_->canvas.height >= patch, "preprocessed frames would be ",
                  hxw(feed_->canvas), " pixels, smaller than one ", patch,
                  "-pixel patch: use a larger image_size");
    if (interval == 0) {  // auto, as run: windowed 1 (demo.py), else upstream's rule from the frame count
      const std::optional<int64_t> n = feed_->count ? feed_->count : feed_->estimated;
      interval = n && !windowed ? auto_keyframe_interval(*n) : 1;
    }
    SessionOptions so = session_options(args, interval, &progress_);
    so.stop = stop_.get();
    // As run: a request that cannot fit fails here, before any frame, naming the keyword to lower.
    const Model& loaded = *model_.model;
    check_memory(loaded,
                 memory_inputs(loaded.config(), so, loaded.weights_dtype(), windowed,
                               feed_->count ? feed_->count : feed_->estimated),
                 feed_->canvas.width, feed_->canvas.height);
    const ReleasedGil nogil;
    stream_ = std::make_unique<Stream>(model_.model, so, windowed);
  }

  PyResult next() {
    const Stream::Call call(busy_, stream_.get(), "this reconstruct() iterator", kOneIteratorCall);
    while (ready_.empty()) {
      if (done_) {
        // After the last result: a warning raised as an error then loses no frame.
        if (!warned_) {
          warned_ = true;
          warn_if_damaged();
        }
        if (!failed_) release_engine();  // after a failure finish_early() still needs it
        throw py::stop_iteration();
      }
      Pending p;
      std::vector<FrameResult> results;
      try {
        if (feed_->next(&p)) {
          {
            CtrlCStopsTheStep ctrl_c(stop_.get(), stream_->push_runs_scale_phase());
            const ReleasedGil nogil(stop_.get());
            results = stream_->push_frame(p.image);
          }
          pending_.push_back(std::move(p));
        } else {
          {
            CtrlCStopsTheStep ctrl_c(stop_.get(), stream_->finish_runs_scale_phase());
            const ReleasedGil nogil(stop_.get());
            results = stream_->finish();
          }
          done_ = true;
        }
      } catch (...) {
        // A frame that failed to decode or run ends the iteration, as an exception ends a generator
        // (the frames after it would no longer line up with the session's frame indices); a step
        // Ctrl-C stopped ends it with KeyboardInterrupt.
        // pending_ stays: finish_early() pairs the rows already computed with their inputs.
        done_ = true;
        failed_ = true;
        try {
          throw;
        } catch (const Stopped&) {
          rethrow_stopped();
        }
      }
      for (PyResult& r : to_python(std::move(results), &pending_, stream_->scale_frames())) ready_.push_back(std::move(r));
      check_signals();  // Ctrl-C: KeyboardInterrupt here, between frames (results stay queued)
    }
    PyResult r = std::move(ready_.front());
    ready_.pop_front();
    ++returned_;
    return r;
  }
  // "<lingbot_map.Reconstruction images '/data/seq', 12 frames of 112x70 (WxH), 3 returned>" (a video's
  // count "about N" or unknown; ", finished" at the end).
  py::str repr() const {
    const auto frames = [](int64_t n) { return std::to_string(n) + (n == 1 ? " frame" : " frames"); };
    std::string s = "<lingbot_map.Reconstruction " + kind_ + (path_.empty() ? "" : " '" + path_ + "'") + ", ";
    s += feed_->count ? frames(*feed_->count) : feed_->estimated ? "about " + frames(*feed_->estimated) : "frames";
    s += " of " + std::to_string(feed_->canvas.width) + "x" + std::to_string(feed_->canvas.height) + " (WxH), " +
         std::to_string(returned_) + " returned" + (done_ && ready_.empty() ? ", finished>" : ">");
    return fs_decode(s);  // a path that is not UTF-8 as os.fsdecode gives it
  }

  // Readers answer at any time: while next() runs (another thread, or its progress callback) with the
  // figures of its start (Stream::Call), after the iteration with the last ones.
  py::dict stats() const { return stats_dict(stream_->readings().stats); }
  py::dict options() const {
    py::dict d = stream_->options_dict(stream_->readings());
    add_preprocess(d, pre_);
    return d;
  }
  py::object windows() const { return stream_->windows(stream_->readings()); }
  // Ends the iteration early: the results computed and not yet returned (queued ones, and in windowed
  // mode the tail held back for the overlap), without running the model.
  std::vector<PyResult> finish_early() {
    const Stream::Call call(busy_, stream_.get(), "this reconstruct() iterator", kOneIteratorCall);
    std::vector<PyResult> out(std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
    ready_.clear();
    done_ = true;
    if (!early_done_)
      for (PyResult& r : to_python(stream_->finish_early(), &pending_, stream_->scale_frames())) out.push_back(std::move(r));
    early_done_ = true;
    pending_.clear();
    returned_ += static_cast<int64_t>(out.size());
    release_engine();
    return out;
  }
  py::object frame_count() const {
    if (feed_->count) return py::int_(*feed_->count);
    return py::none();
  }
  std::pair<int, int> image_size() const { return {feed_->canvas.width, feed_->canvas.height}; }
  // None for arrays and a clean input; else the damage so far (run's summary.json "warnings").
  py::object damage() {
    BusyGuard busy(busy_, "this reconstruct() iterator", kOneIteratorCall);  // the decoder updates it while next() runs
    const io::StreamDamage* d = feed_->damage();
    if (!d || !d->any()) return py::none();
    return py::dict("decode_errors"_a = d->decode_errors, "lost_frames"_a = d->lost_frames,
                    "damaged_frames"_a = d->damaged_frames, "truncated"_a = d->truncated,
                    "description"_a = d->describe());
  }
  const std::string& kind() const { return kind_; }

 private:
  PyModel model_;
  std::unique_ptr<FrameFeed> feed_;
  std::unique_ptr<std::atomic<bool>> stop_ = std::make_unique<std::atomic<bool>>(false);  // SessionOptions::stop
  std::optional<PreprocessOptions> pre_;
  ProgressHolder progress_;  // the progress callable, shared with the engine's options (gc_support.h)
  std::unique_ptr<Stream> stream_;
  std::deque<Pending> pending_;
  std::deque<PyResult> ready_;
  std::string kind_;
  std::string path_;      // the folder or video (file-system bytes); "" for arrays
  int64_t returned_ = 0;  // results next() returned
  bool done_ = false;
  bool early_done_ = false;  // finish_early() ran
  bool failed_ = false;      // a frame's decoding or step raised: finish_early() has rows to give
  bool warned_ = false;  // warn_if_damaged ran (once, at the first StopIteration)

  // The iteration is over: the cache (up to gigabytes), the input (a video decoder, the list of
  // frames) and the progress callable are freed now, not when the iterator is dropped (a notebook
  // keeps it); stats, options, windows and damage still answer.
  void release_engine() {
    {
      const ReleasedGil nogil;
      stream_->release();
    }
    feed_->close();
    progress_.reset();
  }

 public:
  // gc_support.h: the progress callable, and what the collector clears when it breaks a cycle.
  const ProgressHolder& progress_holder() const { return progress_; }
  void clear_for_gc() {
    if (stream_) stream_->release();
    progress_.reset();
    done_ = early_done_ = true;  // an object a finalizer resurrects ends its iteration
  }

 private:

  // At the end of a damaged video or folder: a RuntimeWarning (run exits 3 there unless
  // --allow-damaged); the frames that decoded were returned. warnings.simplefilter("error") turns it
  // into an exception.
  void warn_if_damaged() const {
    const io::StreamDamage* d = feed_->damage();
    if (!d || !d->any()) return;
    const io::DamagedInput input = kind_ == "images" ? io::DamagedInput::ImageFolder : io::DamagedInput::Video;
    warn_quoting_files(PyExc_RuntimeWarning, io::damaged_input_message(input, *d, "returned") +
                                                 " (Reconstruction.damage has the counts)");
  }
  std::atomic<bool> busy_{false};
};

}  // namespace

void bind_reconstruct(py::module_& m) {
  py::class_<PyReconstruction>(m, "Reconstruction", "The iterator reconstruct() returns: one Result per frame, in order.",
                               collectable<PyReconstruction>())
      // Reconstruction() said pybind11's "No constructor defined!"; __new__ alone made an empty instance.
      .def_static("__new__",
                  [](const py::args&, const py::kwargs&) -> py::object {
                    throw py::type_error(
                        "lingbot_map.Reconstruction objects are made by lingbot_map.reconstruct(), not constructed");
                  })
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", constructed(&PyReconstruction::next))
      .def("__repr__", constructed(&PyReconstruction::repr))
      .def("finish_early", constructed(&PyReconstruction::finish_early),
           "Ends the iteration without running the model (after KeyboardInterrupt or an error): returns\n"
           "the results already computed and not yet returned (mode='windowed': the tail held back for\n"
           "the overlap), as run writes them when it stops early.")
      .def("stats", constructed(&PyReconstruction::stats), "Cache occupancy after the last step (as Session.stats()).")
      .def_property_readonly("options", constructed(&PyReconstruction::options), "Session options in effect (keyframe interval resolved).")
      .def_property_readonly("windows", constructed(&PyReconstruction::windows), "mode='windowed': the windows so far (as Session.windows); else None.")
      .def_property_readonly("frame_count", constructed(&PyReconstruction::frame_count), "Frames in the input (folders, lists; after first_k / stride), fixed while iterating; None for video.")
      .def_property_readonly("image_size", constructed(&PyReconstruction::image_size), "(width, height) of every model input.")
      .def_property_readonly("kind", constructed(&PyReconstruction::kind), "'images', 'video' or 'arrays'.")
      .def_property_readonly("damage", constructed(&PyReconstruction::damage),
                             "None, or for a damaged video or folder (JPEGs with corrupt data) a dict: decode_errors,\n"
                             "lost_frames, damaged_frames, truncated, description. A RuntimeWarning says so at the\n"
                             "end of the iteration.");

  m.def(
      "reconstruct",
      [](const py::object& images, const py::object& video, const py::object& model, std::optional<Int> image_size,
         const std::string& mode, const std::optional<std::string>& preprocess, std::optional<Int> window_size,
         std::optional<Int> overlap_size, std::optional<Int> overlap_keyframes, std::optional<double> fps_arg, Int64 first_k,
         Int64 stride, Bool rotate_cw90, std::optional<Int> scale_frames, std::optional<Int> kv_window,
         const py::object& keyframe_interval, std::optional<Int> camera_iterations, const std::optional<std::string>& kv_backend, const std::string& kv_dtype, Int threads,
         Bool features, Bool patch_tokens, std::optional<double> flow_threshold, std::optional<Int> max_non_keyframe_gap,
         const std::optional<std::string>& backend, const py::object& keyframes, const std::string& device,
         Int64 max_special_frames, const py::object& progress) {
        // As run's --fps (which needs --video): a sampling rate for frames that are not a video would do nothing.
        if (fps_arg && video.is_none()) throw py::value_error("fps= applies to video= only (a folder or list gives every frame)");
        const double fps = fps_arg.value_or(10.0);
        check_value(std::isfinite(fps), "fps must be a finite number (<= 0: every frame), got ", fps);
        check_value(stride >= 1, "stride must be >= 1, got ", stride);  // as io::FrameSource, before any work
        check_value(first_k >= 0, "first_k must be >= 0, got ", first_k);
        SourceArgs s;
        if (image_size) s.image_size = image_size->value;
        s.fps = fps;
        s.first_k = first_k;
        s.stride = stride;
        s.rotate_cw90 = rotate_cw90;
        SessionArgs a{scale_frames, kv_window, keyframe_interval_arg(keyframe_interval, keyframes), camera_iterations,
                      kv_backend_arg(kv_backend, backend), kv_dtype, threads, features, patch_tokens, flow_threshold,
                      max_non_keyframe_gap, device};
        a.max_special_frames = max_special_frames;
        a.progress = progress;
        ModeArgs m = mode_args(mode, preprocess);
        m.window_size = window_size;
        m.overlap_size = overlap_size;
        m.overlap_keyframes = overlap_keyframes;
        return std::make_unique<PyReconstruction>(images, video, model, s, a, m);
      },
      "images"_a = py::none(), "video"_a = py::none(), py::kw_only(), "model"_a, "image_size"_a = py::none(),
      "mode"_a = "streaming", "preprocess"_a = py::none(), "window_size"_a = py::none(), "overlap_size"_a = py::none(),
      "overlap_keyframes"_a = py::none(), "fps"_a = py::none(), "first_k"_a = 0, "stride"_a = 1, "rotate_cw90"_a = false,
      "scale_frames"_a = py::none(), "kv_window"_a = py::none(), "keyframe_interval"_a = py::none(),
      "camera_iterations"_a = py::none(),
      "kv_backend"_a = py::none(), "kv_dtype"_a = "bf16", "threads"_a = 0, "features"_a = false,
      "patch_tokens"_a = false, "flow_threshold"_a = py::none(),
      "max_non_keyframe_gap"_a = py::none(), "backend"_a = py::none(), "keyframes"_a = py::none(),
      "device"_a = "cpu", "max_special_frames"_a = 0, "progress"_a = py::none(),
      "Reconstructs a sequence as `lingbot-map run` does (same options, same defaults, same results):\n"
      "images= a folder (sorted .jpg/.jpeg/.png/.bmp) or a list of arrays (uint8 [H, W, 3], preprocessed\n"
      "like run; or float32 [3, H, W] model inputs), or video= a file (sampled at `fps`). image_size=None\n"
      "is run's 518 (float32 model inputs take no image_size= or preprocess=: they go in as they are).\n"
      "`model` is a Model or a checkpoint path. mode='windowed' runs run's --mode windowed (see Session;\n"
      "auto keyframe interval 1 there). Returns an iterator of Result, one per frame; inputs are checked\n"
      "before it is returned. Ctrl-C raises KeyboardInterrupt at the next frame boundary. A damaged video\n"
      "(decode errors, lost frames, cut short) or folder (JPEGs libjpeg decoded with corrupt data) yields\n"
      "the frames that decoded, then a RuntimeWarning at the end; Reconstruction.damage has the counts. An error while running a frame ends the iteration.");
}

}  // namespace lingbot::python
