#pragma once
// One sequence through a Session (streaming) or a WindowedSession (windowed mode), behind one
// interface: what `run` and the Python module's Session / reconstruct() drive the same way.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/model.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"

namespace lingbot {

class SequenceRunner {
 public:
  // `window` set: windowed mode with these window options; else streaming. Throws what the Session or
  // WindowedSession constructor throws.
  SequenceRunner(std::shared_ptr<const Model> model, const SessionOptions& options,
                 const std::optional<WindowedOptions>& window);

  std::vector<FrameResult> push_frame(const Tensor& image);
  std::vector<FrameResult> finish();
  // After a sequence that ends early: the results already computed and not yet returned (windowed:
  // the tail held back for the overlap, WindowedSession::finish_early); none in streaming mode. Runs
  // no model step.
  std::vector<FrameResult> finish_early();
  // A new sequence with the same options: Session::reset(), or (a WindowedSession has no reset of its
  // own) a new WindowedSession, made before the old one goes, so a failure leaves the old one.
  void reset();

  bool windowed() const { return windowed_ != nullptr; }
  SessionStats stats() const;
  const SessionOptions& options() const;  // resolved (model defaults filled in)
  std::string device_description() const;
  int64_t frames_pushed() const;
  bool closed() const;
  const std::vector<WindowInfo>& windows() const;  // every window begun so far; empty in streaming mode
  int64_t overlap() const;                         // windowed: the frames consecutive windows share; else 0
  // Whether the next push_frame() / finish() runs a scale phase (the step a stop may end at once): the
  // first scale_frames frames, and in windowed mode every window's.
  bool push_runs_scale_phase() const;
  bool finish_runs_scale_phase() const;

 private:
  std::shared_ptr<const Model> model_;  // windowed: what reset() makes the new WindowedSession with
  SessionOptions options_;
  std::optional<WindowedOptions> window_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<WindowedSession> windowed_;
  std::vector<WindowInfo> no_windows_;
};

}  // namespace lingbot
