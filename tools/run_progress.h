#pragma once
// `run`'s progress display: a one-line bar redrawn on a terminal (stderr), or one plain line per
// completed frame (stdout). Steps of several frames (a scale phase) also show where they are, as they
// can take minutes on a CPU. update() runs on the writer thread, step() and the scale-phase calls on
// the model thread, each under the one mutex; restart_clock() runs before either thread starts.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "lingbot/session.h"

namespace lingbot::cli {

// Frames per second over the last `window` of a run (the frames finished since the latest sample at
// least that old), so the rate and the ETA follow a run whose frames get slower (a cache that grows,
// a busy machine) instead of averaging over hours of it. Until the run is that old: since its start.
class RecentRate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RecentRate(Clock::duration window = std::chrono::seconds(20)) : window_(window) {}
  void restart(Clock::time_point start);  // 0 frames at `start`
  // `count` frames done at `now` (non-decreasing in both); returns the rate, 0 before any time passed.
  double add(Clock::time_point now, int64_t count);

 private:
  struct Sample {
    Clock::time_point at;
    int64_t count;
  };
  Clock::duration window_;
  std::deque<Sample> samples_;  // front: the rate's reference
};

class Progress {
 public:
  using Clock = RecentRate::Clock;

  // bar: redraw one line on stderr (a terminal); else a line per frame on stdout. total: the frames
  // the input holds, when known (the bar's length and the ETA).
  Progress(bool bar, std::optional<int64_t> total);
  void restart_clock();  // the rate counts from the first frame's push
  // done: frames written; computed: frames the model has finished (>= done: a scale phase finishes its
  // frames at once), which the rate and the ETA count; kv_bytes: the KV cache's bytes to show.
  void update(int64_t done, int64_t computed, const FrameResult& r, int64_t kv_bytes);
  // The scale phase begins with its first frame's push (each scale frame is encoded as it comes);
  // its clock runs from there, not from the step.
  void begin_scale_phase();
  void scale_frame_encoded(int64_t done, int64_t total);
  void step(const StepProgress& p);  // SessionOptions::step_progress
  void end();                        // ends the bar's line

 private:
  void show_step(const std::string& what);
  void draw(std::string line);

  std::mutex mutex_;
  bool bar_;
  std::optional<int64_t> total_;
  RecentRate rate_;
  Clock::time_point step_start_, step_line_;  // the scale phase in progress: its start, its last log line
  bool scale_phase_begun_ = false;  // begin_scale_phase() set step_start_ for the coming step
  size_t drawn_width_ = 0;  // of the bar's line on screen; 0: none drawn
};

}  // namespace lingbot::cli
