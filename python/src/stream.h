#pragma once
// One sequence through a Session (streaming) or a WindowedSession (windowed mode: overlapping windows
// aligned by Sim(3), as run --mode windowed), behind one interface for lingbot_map.Session and
// reconstruct(). A WindowedSession has no reset of its own: reset() makes a new one with the same options.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lingbot/model.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"

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
  // notebook keeps its iterator). stats(), options(), options_dict(), windows(), frames_pushed() and
  // closed() then answer from a copy taken here; finish_early() returns nothing; the other calls are
  // refused as after finish_early(). Needs no GIL (the callable's holder takes it to drop it).
  void release();

  SessionStats stats() const {
    return released_ ? released_->stats : session_ ? session_->stats() : windowed_->stats();
  }
  const SessionOptions& options() const {
    return released_ ? released_->options : session_ ? session_->options() : windowed_->options();
  }
  int64_t frames_pushed() const {
    return released_ ? released_->frames_pushed : session_ ? session_->frames_pushed() : windowed_->frames_pushed();
  }
  bool closed() const { return ended_ || (session_ ? session_->closed() : windowed_->closed()); }
  int scale_frames() const { return options().scale_frames; }
  bool windowed() const { return windowed_options_.has_value(); }

  // Whether the next push_frame() / finish() runs a scale phase (the step Ctrl-C may stop at once):
  // the first scale_frames frames, and in windowed mode every window's.
  bool push_runs_scale_phase() const {
    return session_ ? session_->frames_pushed() + 1 == scale_frames() : windowed_->next_push_runs_scale_phase();
  }
  bool finish_runs_scale_phase() const {
    return session_ ? session_->frames_pushed() > 0 && session_->frames_pushed() < scale_frames()
                    : windowed_->finish_runs_scale_phase();
  }

  // The options in effect as Session.options shows them (summary.json's names). Needs the GIL.
  py::dict options_dict() const;
  // Windowed: every window begun so far (summary.json's "windows"); streaming: None. Needs the GIL.
  py::object windows() const;

 private:
  void make();
  void check_open(const char* call) const;

  std::shared_ptr<const Model> model_;
  SessionOptions options_;
  std::optional<WindowedOptions> windowed_options_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<WindowedSession> windowed_;
  bool ended_ = false;  // the caller ended the sequence: finish_early(), or finish() in windowed mode
  struct Released {     // what release() kept
    SessionStats stats;
    SessionOptions options;
    std::vector<WindowInfo> windows;
    int64_t overlap = 0;  // windowed: overlap_frames
    int64_t frames_pushed = 0;
  };
  std::optional<Released> released_;
};

}  // namespace lingbot::python
