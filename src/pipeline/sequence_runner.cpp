#include "pipeline/sequence_runner.h"

#include <utility>

namespace lingbot {

SequenceRunner::SequenceRunner(std::shared_ptr<const Model> model, const SessionOptions& options,
                               const std::optional<WindowedOptions>& window) {
  if (window) {
    windowed_ = std::make_unique<WindowedSession>(model, options, *window);
    model_ = std::move(model);
    options_ = options;
    window_ = window;
  } else {
    session_ = std::make_unique<Session>(std::move(model), options);
  }
}

void SequenceRunner::reset() {
  if (session_) return session_->reset();
  windowed_ = std::make_unique<WindowedSession>(model_, options_, *window_);
}

std::vector<FrameResult> SequenceRunner::push_frame(const Tensor& image) {
  return windowed_ ? windowed_->push_frame(image) : session_->push_frame(image);
}

std::vector<FrameResult> SequenceRunner::finish() { return windowed_ ? windowed_->finish() : session_->finish(); }

std::vector<FrameResult> SequenceRunner::finish_early() {
  return windowed_ ? windowed_->finish_early() : std::vector<FrameResult>{};
}

SessionStats SequenceRunner::stats() const { return windowed_ ? windowed_->stats() : session_->stats(); }

const SessionOptions& SequenceRunner::options() const { return windowed_ ? windowed_->options() : session_->options(); }

std::string SequenceRunner::device_description() const {
  return windowed_ ? windowed_->device_description() : session_->device_description();
}

int64_t SequenceRunner::frames_pushed() const { return windowed_ ? windowed_->frames_pushed() : session_->frames_pushed(); }

bool SequenceRunner::closed() const { return windowed_ ? windowed_->closed() : session_->closed(); }

const std::vector<WindowInfo>& SequenceRunner::windows() const { return windowed_ ? windowed_->windows() : no_windows_; }

int64_t SequenceRunner::overlap() const { return windowed_ ? windowed_->overlap() : 0; }

bool SequenceRunner::push_runs_scale_phase() const {
  return windowed_ ? windowed_->next_push_runs_scale_phase() : session_->frames_pushed() + 1 == session_->options().scale_frames;
}

bool SequenceRunner::finish_runs_scale_phase() const {
  if (windowed_) return windowed_->finish_runs_scale_phase();
  return session_->frames_pushed() > 0 && session_->frames_pushed() < session_->options().scale_frames;
}

}  // namespace lingbot
