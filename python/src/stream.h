#pragma once
// One sequence for lingbot_map.Session and reconstruct(): a SequenceRunner (pipeline/sequence_runner.h:
// a Session, or in windowed mode a WindowedSession, as run drives them) with what the Python objects
// add: the end of a sequence the caller declared, readings that answer while a call runs, release().
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/busy_guard.h"
#include "lingbot/model.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"
#include "pipeline/sequence_runner.h"

namespace lingbot::python {

namespace py = pybind11;

class Stream {
 public:
  // Raises ValueError for windowed options the WindowedSession refuses (checked up front, as run).
  Stream(std::shared_ptr<const Model> model, const SessionOptions& options, std::optional<WindowedOptions> windowed);

  // One frame [3, H, W] in; the results it completed. Raises lingbot::Error after the end of the sequence.
  std::vector<FrameResult> push_frame(const Tensor& image);
  // Ends the sequence; the results still pending.
  std::vector<FrameResult> finish();
  // Ends the sequence without running the model: the results computed and not yet returned (windowed:
  // the tail held back for the overlap, WindowedSession::finish_early); none in streaming mode.
  std::vector<FrameResult> finish_early();
  void reset();

  // The end of a sequence that will not resume (reconstruct()'s iteration is over): frees the engine's
  // state (the KV cache: up to gigabytes) and the progress callable while the owner lives on (a
  // notebook keeps its iterator). stats(), options(), frames_pushed(), closed() and readings() then
  // answer from a copy taken here; finish_early() returns nothing; the other calls are refused as after
  // finish_early(). Needs no GIL (the callable's holder takes it to drop it).
  void release();

  // What the Python objects' readers show (stats(), options, windows, frames_pushed, finished): a copy,
  // so they answer while a call runs, from the readings of its start (the engine changes under the
  // call, which releases the GIL), and after release().
  struct Readings {
    SessionStats stats;
    SessionOptions options;  // step_progress cleared: the Python callable stays with the engine
    std::vector<WindowInfo> windows;
    int64_t overlap = 0;  // windowed: overlap_frames
    int64_t frames_pushed = 0;
    bool closed = false;
  };
  // Those of the running Call's start, else the stream's own now. Needs no GIL.
  Readings readings() const;

  // A call on the stream from Python: one at a time on its object (`busy`: a second one, from another
  // thread or from this call's progress callback, is refused with "<what> is already running a
  // call<detail>"); while it runs, readings() gives those of its start. Made and ended with the GIL
  // held; `stream` null (an object the garbage collector cleared) guards the call only.
  class Call {
   public:
    Call(std::atomic<bool>& busy, Stream* stream, std::string_view what, std::string_view detail);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    BusyGuard busy_;
    Stream* stream_;
  };

  SessionStats stats() const {
    return released_ ? released_->stats : runner_->stats();
  }
  const SessionOptions& options() const {
    return released_ ? released_->options : runner_->options();
  }
  int64_t frames_pushed() const {
    return released_ ? released_->frames_pushed : runner_->frames_pushed();
  }
  bool closed() const { return ended_ || runner_->closed(); }
  int scale_frames() const { return options().scale_frames; }
  bool windowed() const { return windowed_options_.has_value(); }

  // Whether the next push_frame() / finish() runs a scale phase (the step Ctrl-C may stop at once):
  // the first scale_frames frames, and in windowed mode every window's.
  bool push_runs_scale_phase() const { return runner_->push_runs_scale_phase(); }
  bool finish_runs_scale_phase() const { return runner_->finish_runs_scale_phase(); }

  // The options in effect as Session.options shows them (summary.json's names). Needs the GIL.
  py::dict options_dict(const Readings& r) const;
  // Windowed: every window begun so far (summary.json's "windows"); streaming: None. Needs the GIL.
  py::object windows(const Readings& r) const;

 private:
  void check_open(const char* call) const;

  std::optional<WindowedOptions> windowed_options_;
  std::unique_ptr<SequenceRunner> runner_;  // null after release()
  bool ended_ = false;  // the caller ended the sequence: finish_early(), or finish() in windowed mode
  Readings now() const;
  std::optional<Readings> released_;       // what release() kept
  std::optional<Readings> at_call_start_;  // while a Call runs
};

}  // namespace lingbot::python
