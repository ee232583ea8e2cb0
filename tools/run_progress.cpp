#include "run_progress.h"

#include <algorithm>
#include <cstdio>

#include "cli_util.h"
#include "core/format_bytes.h"

namespace lingbot::cli {

void RecentRate::restart(Clock::time_point start) {
  samples_.clear();
  samples_.push_back({start, 0});
}

double RecentRate::add(Clock::time_point now, int64_t count) {
  samples_.push_back({now, count});
  // Keep one sample at least `window` old as the reference, none older than that one.
  while (samples_.size() > 2 && now - samples_[1].at >= window_) samples_.pop_front();
  const Sample& ref = samples_.front();
  const double secs = std::chrono::duration<double>(now - ref.at).count();
  return secs > 0 ? static_cast<double>(count - ref.count) / secs : 0;
}

Progress::Progress(bool bar, std::optional<int64_t> total) : bar_(bar), total_(total) { rate_.restart(Clock::now()); }

void Progress::restart_clock() { rate_.restart(Clock::now()); }

void Progress::update(int64_t done, int64_t computed, const FrameResult& r, int64_t kv_bytes) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const double fps = rate_.add(Clock::now(), computed);
  std::string eta;
  if (total_ && fps > 0 && *total_ >= computed)
    eta = "  ETA " + format_clock(static_cast<double>(*total_ - computed) / fps);
  const std::string of = total_ ? "/" + std::to_string(*total_) : "";
  if (bar_) {
    std::string line;
    if (total_ && *total_ > 0) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(std::min<int64_t>(kWidth, done * kWidth / *total_));
      line += "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] ";
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "%lld%s frames  %.2f fps%s  KV %s   ", static_cast<long long>(done), of.c_str(), fps,
                  eta.c_str(), format_bytes(kv_bytes).c_str());
    line += buf;
    draw(line);
  } else {
    // The frame's index as its files and every other output name it (from 0), then the count done.
    std::printf("frame %lld (%lld%s%s)  %.2f fps%s  KV %s\n", static_cast<long long>(r.frame_index),
                static_cast<long long>(done), of.c_str(),
                r.frame_type == FrameType::Scale      ? ", scale frame"
                : r.frame_type == FrameType::Keyframe ? ", keyframe"
                                                      : "",
                fps, eta.c_str(), format_bytes(kv_bytes).c_str());
    std::fflush(stdout);
  }
}

void Progress::begin_scale_phase() {
  const std::lock_guard<std::mutex> lock(mutex_);
  step_start_ = step_line_ = Clock::now();
  scale_phase_begun_ = true;
}

void Progress::scale_frame_encoded(int64_t done, int64_t total) {
  const std::lock_guard<std::mutex> lock(mutex_);
  show_step("scale phase: frame " + std::to_string(done) + "/" + std::to_string(total) + " encoded");
}

void Progress::step(const StepProgress& p) {
  if (p.frames < 2) return;  // a one-frame step ends in a fraction of what a scale phase takes
  const std::lock_guard<std::mutex> lock(mutex_);
  if (p.stage == StepProgress::Stage::Aggregator && p.done == 0) {
    if (!scale_phase_begun_) step_start_ = step_line_ = Clock::now();  // a window's or a short stream's
    scale_phase_begun_ = false;
  }
  show_step(std::string(p.stage == StepProgress::Stage::Aggregator ? "scale phase: aggregator block "
                                                                   : "scale phase: heads, frame ") +
            std::to_string(p.done) + "/" + std::to_string(p.total));
}

void Progress::end() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (drawn_width_ > 0) std::fputc('\n', stderr);
  drawn_width_ = 0;
}

// Where a scale phase is, with its time so far (mutex held). Bar: redrawn each time. Lines: one line
// after every 10 s.
void Progress::show_step(const std::string& what) {
  const Clock::time_point now = Clock::now();
  const std::string line = what + ", " + format_clock(std::chrono::duration<double>(now - step_start_).count());
  if (bar_) {
    draw(line);
  } else if (std::chrono::duration<double>(now - step_line_).count() >= 10.0) {
    step_line_ = now;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
}

// Redraws the bar's line (mutex held): spaces over what is left of a longer line before it.
void Progress::draw(std::string line) {
  const size_t width = line.size();
  if (line.size() < drawn_width_) line.resize(drawn_width_, ' ');
  std::fputs(("\r" + line).c_str(), stderr);
  std::fflush(stderr);
  drawn_width_ = width;
}

}  // namespace lingbot::cli
