// lingbot_map.Session: one stream of frames pushed by the caller (streaming or windowed), its binding.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "fs_text.h"
#include "checks.h"
#include "gc_support.h"
#include "core/error.h"
#include "interrupts.h"
#include "io/preprocess.h"
#include "model.h"
#include "options.h"
#include "result.h"
#include "self_ref.h"
#include "stream.h"
#include "strict_args.h"

namespace lingbot::python {

using namespace py::literals;

namespace {

// Any call after close() but the readers (stats(), options, windows, frames_pushed, closed), __enter__ included.
constexpr const char* kSessionClosed = "the Session is closed (close() or the end of its with-block): create a new Session";
// A second call while one runs: from another thread (the GIL is released during a step), or from this
// call's progress callback calling back into the Session.
constexpr std::string_view kOneSessionCall =
    " (one call at a time: from another thread, or from this call's progress callback; use one Session per thread)";

class PySession {
 public:
  PySession(const PyModel& model, const SessionArgs& args_in, std::optional<int> image_size, const ModeArgs& mode)
      : model_(model) {
    const SessionArgs args = with_model_defaults(args_in, model.model->config());
    int interval = parse_keyframe_interval(args.keyframe_interval);
    if (interval == 0) interval = 1;  // "auto" needs the stream length; an open stream stores every frame
    SessionOptions so = session_options(args, interval, &progress_);
    so.stop = stop_.get();
    const std::optional<WindowedOptions> windowed = windowed_options(mode, *args.scale_frames);
    if (image_size) {
      pre_ = preprocess_options(*image_size, mode.preprocess, model.model->patch_size());
    } else {
      preprocess_arg(mode.preprocess);
      if (mode.preprocess_given)  // an option that would do nothing
        throw py::value_error("preprocess= applies to run's preprocessing, which image_size= asks for: give image_size "
                              "too (frames without it go in as they are)");
    }
    memory_ = memory_inputs(model.model->config(), so, model.model->weights_dtype(), windowed, std::nullopt);
    const ReleasedGil nogil;
    stream_ = std::make_unique<Stream>(model.model, so, windowed);
  }

  std::vector<PyResult> push(const py::handle& frame, const py::object& source, std::optional<double> timestamp) {
    const Stream::Call call(busy_, stream_.get(), "this Session", kOneSessionCall);
    // The exports write it as it is (TUM, poses.json): NaN or inf would make them unreadable.
    if (timestamp && !std::isfinite(*timestamp))
      throw py::value_error("timestamp must be a finite number of seconds, got " + std::string(py::str(py::float_(*timestamp))));
    std::string name = fs_name(source, "source");  // before the step: a refused source leaves no frame pushed
    Stream& s = open();
    InputFrame in = frame_from_python(frame, "frame");
    if (!in.rgb8 && pre_)
      throw py::value_error("image_size= preprocesses uint8 frames; a float32 frame is a model input already "
                            "(push uint8 [H, W, 3] frames, or make the Session without image_size)");
    const int64_t index = s.frames_pushed();
    const int64_t patch = model_.model->patch_size();
    if (!pre_ && in.rgb8 && (in.rgb8->height % patch != 0 || in.rgb8->width % patch != 0))
      throw Error("image size " + std::to_string(in.rgb8->height) + "x" + std::to_string(in.rgb8->width) +
                  " (HxW) is not a multiple of the patch size " + std::to_string(patch) +
                  ": a Session takes pictures as they are unless image_size= asks for run's preprocessing "
                  "(Session(model, image_size=518) resizes and crops them as run and upstream do)");
    if (pre_) {  // the engine would compare preprocessed sizes, which the caller never saw
      const io::ImageSize p = io::preprocessed_size({in.rgb8->width, in.rgb8->height}, *pre_);
      if (index == 0) {
        sequence_size_ = p;
      } else if (!(p == sequence_size_)) {
        // Sizes HxW, as the engine's messages (and the arrays' shapes) give them.
        throw Error(
            "frame " + std::to_string(index) + " (" + std::to_string(in.rgb8->height) + "x" + std::to_string(in.rgb8->width) +
            ", HxW) preprocesses to " + std::to_string(p.height) + "x" + std::to_string(p.width) + " at image_size=" +
            std::to_string(pre_->image_size) + ", but this sequence's frames preprocess to " +
            std::to_string(sequence_size_.height) + "x" + std::to_string(sequence_size_.width) +
            ": a Session takes pictures of one size and orientation per sequence (reset() starts a new one; "
            "reconstruct() pads mixed sizes as upstream does)");
      }
    }
    if (index == 0) {  // the frame size is known now: as run, a request that cannot fit fails before any step
      const io::ImageSize size = pre_ ? sequence_size_
                                      : in.rgb8 ? io::ImageSize{in.rgb8->width, in.rgb8->height}
                                                : io::ImageSize{static_cast<int>(in.chw.shape()[2]), static_cast<int>(in.chw.shape()[1])};
      check_memory(*model_.model, memory_, size.width, size.height);
    }
    std::vector<FrameResult> results;
    Tensor image;
    try {
      CtrlCStopsTheStep ctrl_c(stop_.get(), s.push_runs_scale_phase());
      const ReleasedGil nogil(stop_.get());
      if (in.rgb8) image = pre_ ? io::preprocess_image(*in.rgb8, *pre_) : rgb8_to_chw(*in.rgb8);
      else image = std::move(in.chw);
      results = s.push_frame(image);
    } catch (const Stopped&) {
      rethrow_stopped();
    }
    std::optional<io::PixelRect> content;
    std::optional<io::SourcePlacement> placement;
    if (in.rgb8) {
      const io::ImageSize size{in.rgb8->width, in.rgb8->height};
      // A picture taken as it is (/255) is the model input itself: its camera is the frame's.
      placement = io::SourcePlacement{size, size, 0, 0};
      if (pre_) {
        const io::FramePlacement placed = io::place_on_frame(size, *pre_);
        content = placed.content;
        placement = placed.source;
      }
    }
    pending_.push_back({index, std::move(name), timestamp.value_or(static_cast<double>(index)),
                        timestamp ? io::TimestampUnit::Seconds : io::TimestampUnit::FrameIndex, std::move(image), content,
                        placement});
    return deliver(to_python(std::move(results), &pending_, s.scale_frames()));
  }

  std::vector<PyResult> finish() {
    const Stream::Call call(busy_, stream_.get(), "this Session", kOneSessionCall);
    Stream& s = open();
    std::vector<FrameResult> results;
    try {
      CtrlCStopsTheStep ctrl_c(stop_.get(), s.finish_runs_scale_phase());
      const ReleasedGil nogil(stop_.get());
      results = s.finish();
    } catch (const Stopped&) {
      rethrow_stopped();
    }
    return deliver(to_python(std::move(results), &pending_, s.scale_frames()));
  }

  std::vector<PyResult> finish_early() {
    const Stream::Call call(busy_, stream_.get(), "this Session", kOneSessionCall);
    Stream& s = open();
    return after_undelivered(to_python(s.finish_early(), &pending_, s.scale_frames()));
  }

  void reset() {
    const Stream::Call call(busy_, stream_.get(), "this Session", kOneSessionCall);
    Stream& s = open();
    std::optional<py::error_already_set> raised;  // as close(): the sequence is forgotten all the same
    if (!warn_if_results_lost("reset")) raised.emplace();
    {
      const ReleasedGil nogil;
      s.reset();
    }
    pending_.clear();
    undelivered_.clear();
    if (raised) throw *raised;
  }

  // `warn`: close() itself and a with-block left without an exception warn when pushed frames have
  // had no result (warn_if_results_lost); the warning raised as an error (-W error) still closes first.
  void close(bool warn = true) {
    const Stream::Call call(busy_, stream_.get(), "this Session", kOneSessionCall);
    // Fetched (the error indicator cleared) before the clean-up below runs Python code (freeing the
    // progress callable), then raised.
    std::optional<py::error_already_set> raised;
    if (warn && !warn_if_results_lost("closed")) raised.emplace();
    if (stream_ && !closed_) {
      const ReleasedGil nogil;
      stream_->release();  // the cache freed; stats(), options, windows keep their last figures
    }
    closed_ = true;
    pending_.clear();
    undelivered_.clear();
    progress_.reset();
    if (raised) throw *raised;
  }
  // Garbage-collected while open: as close(), the warning printed (a destructor cannot raise it).
  ~PySession() { warn_at_collection(); }
  PySession(const PySession&) = delete;
  PySession& operator=(const PySession&) = delete;
  // gc_support.h: the progress callable, and what the collector clears when it breaks a cycle.
  const ProgressHolder& progress_holder() const { return progress_; }
  void clear_for_gc() {
    warn_at_collection();  // the cycle collector frees the engine before the destructor runs
    stream_.reset();
    progress_.reset();
  }

  // Readers answer at any time: while a call runs (another thread, or its progress callback) with the
  // figures of its start (Stream::Call), after close() with the last ones.
  py::dict stats() const { return stats_dict(readable().readings().stats); }
  py::dict options() const {
    const Stream& s = readable();
    py::dict d = s.options_dict(s.readings());
    add_preprocess(d, pre_);
    return d;
  }
  py::object windows() const {
    const Stream& s = readable();
    return s.windows(s.readings());
  }
  bool finished() const { return readable().readings().closed; }
  bool is_closed() const { return closed_ || stream_ == nullptr; }
  int64_t frames_pushed() const { return readable().readings().frames_pushed; }
  // A copy (the same engine Model): a reference into this Session would keep the Session, and its
  // cache, alive as long as the caller keeps the Model.
  PyModel model() const { return model_; }
  // "<lingbot_map.Session streaming, 5 frames pushed>" (", finished" / ", a call running" / "closed" as they apply).
  std::string repr() const {
    if (closed_ || !stream_) return "<lingbot_map.Session closed>";
    const Stream::Readings r = stream_->readings();
    const int64_t n = r.frames_pushed;
    return "<lingbot_map.Session " + std::string(stream_->windowed() ? "windowed" : "streaming") + ", " +
           std::to_string(n) + (n == 1 ? " frame" : " frames") + " pushed" + (r.closed ? ", finished" : "") +
           (busy_.load() ? ", a call running>" : ">");
  }

 private:
  // A RuntimeWarning when results would be lost: computed by a call that a Ctrl-C interrupted and not
  // returned yet (deliver), or frames pushed and the sequence left unfinished without their results
  // (most often: finish() not called on a stream shorter than scale_frames, whose frames give their
  // results together). False when the warning was raised as an exception (the Python error is set).
  bool warn_if_results_lost(const char* how) {
    if (closed_ || !stream_) return true;
    const std::string session = std::string("lingbot_map.Session ") + how + " with ";
    if (!undelivered_.empty()) {
      const FrameSpan held{undelivered_.front().frame_index, undelivered_.back().frame_index};
      const std::string message = session + "the results of " + held.frames() + " computed and not returned (a "
                                  "KeyboardInterrupt was raised in their place): call finish_early() first, which "
                                  "returns " + held.them();
      if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) != 0) return false;
    }
    if (stream_->closed() || pending_.empty()) return true;
    const FrameSpan waiting{pending_.front().index, pending_.back().index};
    const char* why = !stream_->windowed()
                          ? " (the first scale_frames frames give their results together, when the last of them is "
                            "pushed or at finish())"
                          : " (mode='windowed' returns frames in bursts, as windows are aligned; the last ones at "
                            "finish())";
    const std::string message = session + waiting.frames() + " pushed and no result for " + waiting.them() +
                                ": call finish() first, which computes " + waiting.them() + why;
    return PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) == 0;
  }
  // Consecutive frame indices, as a warning names them.
  struct FrameSpan {
    int64_t first, last;
    std::string frames() const {
      return first == last ? "frame " + std::to_string(first)
                           : "frames " + std::to_string(first) + " to " + std::to_string(last);
    }
    const char* them() const { return first == last ? "it" : "them"; }
  };

  // At garbage collection (GIL held, no caller to raise to): the warning of lost results printed, or
  // written as unraisable when warnings are errors; nothing while the interpreter finalizes.
  void warn_at_collection() {
    if (python_can_warn() && !warn_if_results_lost("garbage-collected")) PyErr_WriteUnraisable(nullptr);
  }

  Stream& open() {
    if (closed_ || !stream_) throw Error(kSessionClosed);
    return *stream_;
  }
  // For the readers: after close() the released stream's copy of its last figures.
  const Stream& readable() const {
    if (!stream_) throw Error(kSessionClosed);  // only after the garbage collector cleared it
    return *stream_;
  }
  // Results computed by a call go back with it unless a Ctrl-C is pending: CPython would raise
  // KeyboardInterrupt as the call returns and the list would be lost. Then KeyboardInterrupt is
  // raised here and they wait, in order, for the next push / finish / finish_early().
  std::vector<PyResult> deliver(std::vector<PyResult>&& results) {
    std::vector<PyResult> out = after_undelivered(std::move(results));
    if (PyErr_CheckSignals() != 0) {
      undelivered_ = std::move(out);
      throw py::error_already_set();
    }
    return out;
  }
  // The results held back by an interrupted call, then `results`, in frame order.
  std::vector<PyResult> after_undelivered(std::vector<PyResult>&& results) {
    std::vector<PyResult> out = std::move(undelivered_);
    undelivered_.clear();
    for (PyResult& r : results) out.push_back(std::move(r));
    return out;
  }

  PyModel model_;
  std::vector<PyResult> undelivered_;  // computed, not returned: a Ctrl-C came with them (deliver)
  io::ImageSize sequence_size_;        // with image_size=: the preprocessed size of this sequence's frames
  MemoryInputs memory_;                // for the memory check at a sequence's first frame (options.h check_memory)
  std::optional<PreprocessOptions> pre_;
  std::unique_ptr<std::atomic<bool>> stop_ = std::make_unique<std::atomic<bool>>(false);  // SessionOptions::stop
  ProgressHolder progress_;  // the progress callable, shared with the engine's options (gc_support.h)
  std::unique_ptr<Stream> stream_;
  bool closed_ = false;  // close() ran: stream_ is released (its readers' figures kept), every other call refused
  std::deque<Pending> pending_;
  std::atomic<bool> busy_{false};
};

}  // namespace

void bind_session(py::module_& m) {
  const char* session_doc =
      "Inference over one sequence of frames (one Session per stream; Sessions may share a Model).\n\n"
      "Protocol: the first `scale_frames` frames are processed together; push() returns [] for them until\n"
      "the last one, which returns all their results. Every later push returns that frame's result.\n"
      "finish() ends the sequence (runs the scale phase if fewer frames came) and returns what is left;\n"
      "reset() starts a new sequence. Frames: uint8 [H, W, 3] RGB or float32 [3, H, W] in [0, 1], all the\n"
      "same size, multiples of the patch size unless image_size= asks for `run`'s preprocessing of uint8\n"
      "frames (resize + crop/pad, preprocess=). keyframe_interval='auto' stores every frame (the stream\n"
      "length is unknown; reconstruct() applies upstream's rule from the frame count); an int stores every\n"
      "N-th streamed frame; 'flow' stores a frame when its mean flow against the last stored one exceeds\n"
      "flow_threshold pixels or after max_non_keyframe_gap frames (run's --keyframe-interval flow).\n"
      "max_special_frames=N keeps the special tokens of only the newest N frames that left the window\n"
      "(run's --max-special-frames): memory and time per frame stop growing on endless streams; 0 keeps\n"
      "all (upstream). scale_frames, kv_window and camera_iterations default to the model's\n"
      "configuration (kv_cache.scale_frames, kv_cache.sliding_window, camera.num_iterations: 8, 64 and 4\n"
      "as released, run's defaults); a value given here takes precedence over Model.load(config=...).\n"
      "mode='windowed' (run's --mode windowed): overlapping windows of window_size stored frames, each\n"
      "a fresh cache whose first frames are the previous window's last overlap_size frames (or\n"
      "overlap_keyframes keyframes), aligned to window 0 by Sim(3); push() returns frames once their\n"
      "window has been aligned (so results arrive in bursts), `windows` lists the windows. Defaults as\n"
      "run: window_size=64, overlap_size=16. mode='crop' | 'pad' is the old spelling of preprocess=.\n"
      "Used as a context manager, the Session frees its cache on exit.";
  py::class_<PySession>(m, "Session", session_doc, collectable<PySession>())
      .def(py::init([](const PyModel& model, std::optional<Int> scale_frames, std::optional<Int> kv_window,
                       const py::object& keyframe_interval, std::optional<Int> camera_iterations, const std::optional<std::string>& kv_backend, const std::string& kv_dtype,
                       Int threads, std::optional<Int> image_size, const std::string& mode,
                       const std::optional<std::string>& preprocess, std::optional<Int> window_size,
                       std::optional<Int> overlap_size, std::optional<Int> overlap_keyframes, Bool features,
                       Bool patch_tokens, std::optional<double> flow_threshold, std::optional<Int> max_non_keyframe_gap,
                       const std::optional<std::string>& backend, const py::object& keyframes, const std::string& device,
                       Int64 max_special_frames, const py::object& progress) {
             SessionArgs a{scale_frames, kv_window, keyframe_interval_arg(keyframe_interval, keyframes),
                           camera_iterations, kv_backend_arg(kv_backend, backend), kv_dtype, threads, features,
                           patch_tokens, flow_threshold, max_non_keyframe_gap, device};
             a.max_special_frames = max_special_frames;
             a.progress = progress;
             ModeArgs m = mode_args(mode, preprocess);
             m.window_size = window_size;
             m.overlap_size = overlap_size;
             m.overlap_keyframes = overlap_keyframes;
             return std::make_unique<PySession>(model, a, image_size, m);
           }),
           "model"_a, py::kw_only(), "scale_frames"_a = py::none(), "kv_window"_a = py::none(),
           "keyframe_interval"_a = py::none(), "camera_iterations"_a = py::none(), "kv_backend"_a = py::none(), "kv_dtype"_a = "bf16", "threads"_a = 0,
           "image_size"_a = py::none(), "mode"_a = "streaming", "preprocess"_a = py::none(), "window_size"_a = py::none(),
           "overlap_size"_a = py::none(), "overlap_keyframes"_a = py::none(), "features"_a = false,
           "patch_tokens"_a = false, "flow_threshold"_a = py::none(),
           "max_non_keyframe_gap"_a = py::none(), "backend"_a = py::none(), "keyframes"_a = py::none(),
           "device"_a = "cpu", "max_special_frames"_a = 0, "progress"_a = py::none())
      .def("push", constructed(&PySession::push), "frame"_a, py::kw_only(), "source"_a = py::none(), "timestamp"_a = py::none(),
           "Pushes one frame; returns the results it completed (see the class doc). The GIL is released\n"
           "while the engine computes. `source` / `timestamp` are carried into the results (defaults: ''\n"
           "and the frame index).")
      .def("finish", constructed(&PySession::finish), "Ends the sequence; returns the results still pending (short streams).")
      .def("finish_early", constructed(&PySession::finish_early),
           "Ends the sequence without running the model (after KeyboardInterrupt or an error): returns the\n"
           "results already computed and not yet returned: those of a push / finish that a Ctrl-C\n"
           "interrupted as it returned, and (mode='windowed') the tail held back for the overlap, aligned as\n"
           "far as known. Then reset() starts a new sequence.")
      .def("reset", constructed(&PySession::reset),
           "Forgets the sequence (cache emptied, not reallocated); the next frame may differ in size. Pushed\n"
           "frames still without a result (finish() not called) are lost, with a RuntimeWarning.")
      .def("close", [](Self<PySession> self) { constructed_self<PySession>(self.handle).close(); },
           "Frees the session's memory (its KV cache); stats(), options, windows, frames_pushed and finished\n"
           "then keep their last figures, any other call raises lingbot_map.Error. Pushed frames still without a result\n"
           "(finish() not called) are lost, with a RuntimeWarning.")
      .def("stats", constructed(&PySession::stats), "Cache occupancy after the last step: steps, frames_stored, bytes_reserved, ...")
      .def_property_readonly("options", constructed(&PySession::options), "The options in effect, every default resolved.")
      .def_property_readonly("windows", constructed(&PySession::windows),
                             "mode='windowed': every window begun so far, dicts index, start, end (exclusive; None while open),\n"
                             "aligned, scale, transform [4, 4] (window -> window 0: x -> scale * R x + t), cache\n"
                             "(frames_stored, bytes_used, bytes_reserved after the window's last step); else None.")
      .def("__repr__", constructed(&PySession::repr))
      .def_property_readonly("finished", constructed(&PySession::finished), "True after finish(), or after a step that failed or was stopped (Ctrl-C in a scale phase), until\n"
                             "reset(). A push refused before its step (a wrong frame size or dtype) leaves it False.")
      .def_property_readonly("closed", constructed(&PySession::is_closed), "True after close() / the end of a with-block.")
      .def_property_readonly("frames_pushed", constructed(&PySession::frames_pushed), "Frames pushed since the start or the last reset().")
      .def_property_readonly("model", constructed(&PySession::model), "The Model this session runs.")
      .def("__enter__",  // a closed Session entered would fail at its first call, far from the cause
           [](Self<PySession> self) {
             if (constructed_self<PySession>(self.handle).is_closed())
               throw Error(kSessionClosed);
             return py::reinterpret_borrow<py::object>(self.handle);
           })
      .def("__exit__", [](Self<PySession> self, const py::args& exc) {
        // Left by an exception: that exception says what happened, no warning about lost results.
        constructed_self<PySession>(self.handle).close(exc.size() == 0 || exc[0].is_none());
      });
}

}  // namespace lingbot::python
