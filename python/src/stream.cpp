// Stream (stream.h): Session or WindowedSession behind one interface.
#include "stream.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <string>
#include <utility>

#include "checks.h"
#include "core/error.h"
#include "interrupts.h"
#include "lingbot/keyframe_policy.h"

namespace lingbot::python {

using namespace py::literals;

Stream::Stream(std::shared_ptr<const Model> model, const SessionOptions& options, std::optional<WindowedOptions> windowed)
    : windowed_options_(std::move(windowed)),
      runner_(std::make_unique<SequenceRunner>(std::move(model), options, windowed_options_)) {
  if (windowed_options_)  // up front, as run
    value_of([&] { check_windowed_options(*windowed_options_, runner_->options()); });
}

std::vector<FrameResult> Stream::push_frame(const Tensor& image) {
  check_open("push");
  check_threads_after_fork(options().threads);
  return runner_->push_frame(image);
}

std::vector<FrameResult> Stream::finish() {
  check_open("finish()");
  check_threads_after_fork(options().threads);
  if (!runner_->windowed()) return runner_->finish();  // the Session closes itself (its own messages afterwards)
  std::vector<FrameResult> r = runner_->finish();
  ended_ = true;
  return r;
}

std::vector<FrameResult> Stream::finish_early() {
  if (ended_) return {};
  ended_ = true;  // streaming: the frames waiting for a scale phase give no result
  return runner_->finish_early();
}

Stream::Readings Stream::now() const {
  if (released_) return *released_;
  Readings r{stats(), options(), runner_->windows(), runner_->overlap(), frames_pushed(), closed()};
  r.options.step_progress = nullptr;
  return r;
}

Stream::Readings Stream::readings() const { return at_call_start_ ? *at_call_start_ : now(); }

Stream::Call::Call(std::atomic<bool>& busy, Stream* stream, std::string_view what, std::string_view detail)
    : busy_(busy, what, detail), stream_(stream) {
  if (stream_) stream_->at_call_start_ = stream_->now();
}

Stream::Call::~Call() {
  if (stream_) stream_->at_call_start_.reset();
}

void Stream::release() {
  if (released_) return;
  released_ = now();  // `closed` as it was: Session.finished keeps answering after close()
  runner_.reset();
  ended_ = true;
}

void Stream::reset() {
  LINGBOT_CHECK(!released_, "internal: reset() of a released stream");
  runner_->reset();  // windowed: a new WindowedSession (it has no reset of its own)
  ended_ = false;
}

py::dict Stream::options_dict(const Readings& r) const {
  const SessionOptions& o = r.options;
  const bool windowed = this->windowed();
  py::dict d("mode"_a = windowed ? "windowed" : "streaming", "scale_frames"_a = o.scale_frames,
             // None for dense-full (as summary.json): it has no window
             "kv_window"_a = o.kv_backend == KVBackend::DenseFull ? py::object(py::none()) : py::object(py::int_(o.kv_window)),
             // None for flow keyframes (as summary.json): keyframe_policy says how frames are chosen
             "keyframe_interval"_a = o.keyframe_policy->decides_before() ? py::object(py::int_(o.keyframe_interval))
                                                                         : py::object(py::none()),
             "keyframe_policy"_a = o.keyframe_policy->describe(), "camera_iterations"_a = o.camera_iterations,
             "max_special_frames"_a = o.max_special_frames, "device"_a = std::string(device_name(o.device)),
             "kv_backend"_a = kv_backend_name(o.kv_backend), "kv_dtype"_a = std::string(dtype_name(o.kv_dtype)),
             "threads"_a = o.threads, "features"_a = o.keep_features, "patch_tokens"_a = o.keep_patch_tokens);
  d["keyframes"] = d["keyframe_policy"];  // the old key (docs/naming.md): removed in the next release
  if (windowed) {  // as summary.json's options
    const WindowedOptions& w = *windowed_options_;
    d["window_size"] = w.window_size;
    d["overlap_size"] = w.overlap_size ? py::object(py::int_(*w.overlap_size)) : py::none();
    d["overlap_keyframes"] = w.overlap_keyframes ? py::object(py::int_(*w.overlap_keyframes)) : py::none();
    d["overlap_frames"] = r.overlap;  // either option resolved
  }
  return d;
}

py::object Stream::windows(const Readings& r) const {
  if (!windowed_options_) return py::none();
  py::list out;
  for (const WindowInfo& w : r.windows) {
    py::array_t<float> t({4, 4});
    std::copy(w.transform.begin(), w.transform.end(), t.mutable_data());
    py::dict cache("frames_stored"_a = w.cache.frames_stored, "bytes_used"_a = w.cache.bytes_used,
                   "bytes_reserved"_a = w.cache.bytes_reserved);
    out.append(py::dict("index"_a = w.index, "start"_a = w.start, "end"_a = w.end < 0 ? py::object(py::none()) : py::int_(w.end),
                        "aligned"_a = w.aligned, "scale"_a = w.scale, "transform"_a = t, "cache"_a = cache));
  }
  return out;
}

void Stream::check_open(const char* call) const {
  if (ended_)
    throw Error(std::string(call) + " after the end of the sequence (finish() or finish_early()): call reset() to "
                                    "start a new sequence");
  if (runner_->windowed() && runner_->closed())  // a WindowedSession has no reset of its own
    throw Error(std::string(call) + " after a step that failed or was stopped: call reset() to start a new sequence");
}

}  // namespace lingbot::python
