#pragma once
// Parts of `lingbot-map run` around the streaming loop, kept apart from cmd_run.cpp:
//   * limits of run's own size options;
//   * the per-frame output check (non-finite values, io/output_validity.h's rule);
//   * the warnings list of summary.json (input damage, non-finite outputs), also logged to stderr.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/stream_damage.h"
#include "pipeline/memory_estimate.h"
#include "lingbot/session.h"

namespace lingbot::cli {

// Upper bounds of run's size options besides SessionOptions' (lingbot/session.h: kMaxScaleFrames,
// kMaxKvWindow, kMaxCameraIterations, kMaxThreads) and kMaxImageSize (lingbot/preprocess.h).
inline constexpr int kMaxDownsample = 1 << 20;

// check_memory_feasible's advice in run's flags.
MemoryAdvice run_memory_advice();

// Non-finite values of one frame's result, per field (pose_enc, extrinsic, intrinsic, depth,
// depth_conf, world_points), and whether it has geometry (has_valid_geometry).
struct FrameCheck {
  bool geometry_valid = true;
  std::vector<std::pair<std::string, int64_t>> non_finite;  // (field, number of non-finite values)
};
FrameCheck check_frame_result(const FrameResult& r);

// summary.json "warnings": one object per event, each also printed as one "warning: ..." line on
// stderr (the first kMaxLogged; the list in summary.json is complete up to kMaxListed).
class RunWarnings {
 public:
  static constexpr int kMaxLogged = 20;
  static constexpr size_t kMaxListed = 1000;
  void add(nlohmann::json entry, const std::string& line);
  // A frame with non-finite values: {"kind": "non_finite", "frame", "fields": {name: count}, "geometry"}.
  void add_frame(int64_t frame, const FrameCheck& c);
  // The video's damage: {"kind": "input_damaged", "decode_errors", "lost_frames", "lost_positions", ...}.
  void add_damage(const io::StreamDamage& d);
  // Windowed windows past window 0 that no overlap aligned: {"kind": "windows_not_aligned", "windows":
  // [index, ...], "reason": "no overlap" | "no finite pose in the overlap"}; nothing for an empty list.
  void add_unaligned_windows(const std::vector<int64_t>& windows, int64_t overlap_frames);
  const nlohmann::json& list() const { return list_; }
  int64_t count() const { return count_; }

 private:
  nlohmann::json list_ = nlohmann::json::array();
  int64_t count_ = 0;
};

}  // namespace lingbot::cli
