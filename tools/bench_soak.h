#pragma once
// `lingbot-map bench soak`: a long stream through a real Session (every head on), to show that cost
// stays bounded forever with SessionOptions::max_special_frames, and exactly how it grows without.
//
// Frames: a loop of pre-rendered demo frames (render_demo_frame, preprocessed once), so input cost
// is constant. Per frame it records the push_frame wall time, RSS (VmRSS, VmHWM) and the cache
// stats. At the end it compares a reference frame (default: min(1,000, frames / 2), with the bound
// at least min_reference_frame, see below) with the last frame:
//   * peak RSS growth (VmHWM at the end / at the reference frame - 1),
//   * per-frame time ratio: median process CPU time of push_frame over the `timing_window` frames
//     ending at the last frame, over that of the window ending at the reference frame (CPU time and
//     medians: robust to other processes sharing the cores; wall time is in the CSV),
//   * KV and camera-head bytes growth against the exact formula: with the bound both are flat
//     (0 bytes); without it the paged special stream grows by one special page per block every
//     special_page_frames stored frames, the KV used bytes by the specials of every stored frame
//     plus the patches of the frames that still fit the window (pinned scale frames + kv_window),
//     and the camera head by one K and V row of dim_in floats per (iteration, trunk block) per
//     stored frame. Exact from any reference frame, also one before the window is full.
// Every formula counts stored frames (CacheStats::frames_stored), so it holds for any keyframe
// policy: a fixed interval, or flow keyframes where rolled-back frames leave no trace.
#include <cstdint>
#include <memory>
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "kvcache/kv_cache.h"
#include "lingbot/keyframe_policy.h"
#include "lingbot/model.h"

namespace lingbot::bench {

// Defaults of SoakOptions::reference_frame and timing_window (0 = derived by validate), with
// F = min_reference_frame (1 without the bound, so then simply min(1000, frames / 2) and
// min(200, reference_frame)):
//   reference_frame = max(min(kDefaultReferenceFrame, frames / 2),
//                         F + min(kDefaultTimingWindow - 1, (frames - 1 - F) / 2)),
//   timing_window = min(kDefaultTimingWindow, reference_frame - F + 1).
// With the bound, defaults that would leave a timing window under kMinDefaultTimingWindow frames are
// refused (a verdict of "flat" from a median of one or two frames says nothing); explicit values
// are taken as given.
inline constexpr int64_t kDefaultReferenceFrame = 1000;
inline constexpr int64_t kDefaultTimingWindow = 200;
inline constexpr int64_t kMinDefaultTimingWindow = 10;

inline constexpr int64_t kMaxSoakFrames = 10000000;  // --frames

struct SoakOptions {
  int64_t frames = 10000;
  int64_t reference_frame = 0;  // compare the last frame with this one (1-based frame count); 0 = default
  int64_t timing_window = 0;    // frames per median; 0 = default
  int64_t max_special_frames = 0;  // SessionOptions::max_special_frames (0 = unbounded, upstream)
  int keyframe_interval = 1;  // used when keyframe_policy is null
  std::shared_ptr<const KeyframePolicy> keyframe_policy;  // e.g. FlowKeyframes; null = interval
  int scale_frames = 8;
  int kv_window = 64;
  KVBackend kv_backend = KVBackend::Paged;
  DType kv_dtype = DType::F32;
  int threads = 1;
  int loop_frames = 64;  // distinct demo frames, cycled
  // Set (by a signal handler) to end the soak early: the push in progress ends within about a block
  // (SessionOptions::stop) and the result holds the frames done (SoakResult::interrupted). Not owned.
  const std::atomic<bool>* stop = nullptr;
};

struct SoakRow {
  int64_t frame = 0;  // 1-based: frames pushed so far
  bool keyframe = false;
  double push_ms = 0;  // wall time of push_frame
  double cpu_ms = 0;   // process CPU time of push_frame (the timing criterion)
  int64_t rss_bytes = 0, peak_rss_bytes = 0;
  CacheStats cache;
  int64_t camera_cache_frames = 0, camera_cache_bytes = 0;
};

struct SoakResult {
  SoakOptions options;
  int image_width = 0, image_height = 0;
  int64_t tokens_per_frame = 0, patch_tokens = 0, num_special_tokens = 0;
  int64_t special_page_frames = 0, special_page_bytes = 0;  // paged special stream geometry (all blocks: x blocks)
  int64_t num_blocks = 0;
  int64_t camera_row_bytes_per_frame = 0;  // camera head: K+V bytes per stored frame, all its caches
  std::vector<SoakRow> rows;
  // Comparison last frame vs reference frame.
  double peak_rss_growth = 0;       // fraction
  // median(last window) / median(reference window); a window holds no scale-phase push (those run
  // the encoder alone, then the whole scale phase), so it may hold fewer frames than timing_window,
  // and none (no median, no ratio: "na") when it ends in the scale phase.
  std::optional<double> time_ratio;
  std::optional<double> ref_median_ms, last_median_ms;
  int64_t kv_reserved_growth = 0;
  std::optional<int64_t> kv_reserved_formula;  // none for dense backends (geometric growth: no exact formula)
  int64_t kv_used_growth = 0, kv_used_formula = 0;
  int64_t camera_growth = 0, camera_formula = 0;
  // First frame (1-based) from which the bounded caches hold their final size: the first with
  // scale_frames + kv_window + max_special_frames + 1 stored frames (frames + 1 if never). The paged
  // special stream may still allocate its last pages within 2 x special_page_frames - 2 more stored
  // frames: kv_reserved_formula counts them.
  int64_t fill_frame = 0;
  int64_t frames_stored = 0;  // keyframes stored over the whole run, the scale frames included
  bool interrupted = false;  // options.stop ended it: rows holds the frames pushed, nothing is compared
  bool pass = false;
  std::string verdict;  // what was checked and why it passed / failed
};

class SoakObserver {
 public:
  virtual ~SoakObserver() = default;
  virtual void on_frame(const SoakRow& row, int64_t total) = 0;
};

// The keyframe rule as one token for the summary line: interval-N | flow-<px>-gap-<N> | custom.
std::string keyframe_rule(const SoakOptions& o);

// The earliest reference frame the soak's checks hold from. Without the bound 1 (the formulas are
// exact from any frame). With max_special_frames > 0, the frame by which the bounded caches have
// filled (scale_frames + kv_window + max_special_frames + 1 stored frames): scale_frames +
// (kv_window + max_special_frames) x spacing + 1, spacing = the keyframe interval (exact) or the
// flow policy's max non-keyframe gap (at least one stored frame per gap, so the caches have filled
// by then); 0 for a custom keyframe policy (unknown); INT64_MAX when it overflows.
int64_t min_reference_frame(const SoakOptions& o);

// Fills reference_frame and timing_window when 0 (the defaults above) and throws Error naming the
// first bad option (exit 1: a value out of range). A default that cannot be derived (--frames too
// short for the bounded caches to fill before the last frame) is a usage error naming the minimum
// reference frame (CLI::ValidationError: exit 2, as options that need each other).
void validate(SoakOptions& o);
// Runs on a copy of `options` (validated and defaults filled: SoakResult::options).
SoakResult run_soak(std::shared_ptr<const Model> model, const SoakOptions& options, SoakObserver* observer);

void write_soak_csv(const std::string& path, const SoakResult& r);
std::string soak_summary_line(const SoakResult& r);
void print_soak_report(std::FILE* f, const SoakResult& r);

}  // namespace lingbot::bench
