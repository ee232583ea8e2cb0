#pragma once
// Parts of `lingbot-map run` around the streaming loop, kept apart from cmd_run.cpp:
//   * limits and the memory feasibility estimate, checked before anything is written;
//   * the per-frame output check (non-finite values, io/output_validity.h's rule);
//   * the warnings list of summary.json (input damage, non-finite outputs), also logged to stderr.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/stream_damage.h"
#include "kvcache/kv_cache.h"
#include "lingbot/dtype.h"
#include "lingbot/model_config.h"
#include "lingbot/preprocess.h"
#include "lingbot/session.h"

namespace lingbot::cli {

// Upper bounds of run's size options besides SessionOptions' (lingbot/session.h: kMaxScaleFrames,
// kMaxKvWindow, kMaxCameraIterations, kMaxThreads) and kMaxImageSize (lingbot/preprocess.h).
inline constexpr int kMaxDownsample = 1 << 20;

// A lower bound of the memory a run needs, in bytes, from the model configuration and options.
struct MemoryEstimate {
  int64_t weights = 0;       // the parameters, each at least the weights dtype's size
  int64_t kv_cache = 0;      // aggregator K/V: the paged pool (scale frames + window) or the frames kept
  int64_t camera_cache = 0;  // camera head K/V: every stored frame, never evicted
  int64_t activations = 0;   // one scale-phase pass: tokens x MLP width, plus the DPT head's maps
  bool kv_f32 = false;       // the K/V dtype is f32 (bf16 / f16 would halve kv_cache)
  int64_t total() const { return weights + kv_cache + camera_cache + activations; }
};
struct MemoryInputs {
  int width = 0, height = 0;                  // preprocessed frame
  std::optional<int64_t> frames;              // frames of the run, when known or estimated
  int scale_frames = 8, kv_window = 64, keyframe_interval = 1;
  KVBackend backend = KVBackend::Paged;
  DType kv_dtype = DType::F32;
  DType weights_dtype = DType::F32;
};
MemoryEstimate estimate_run_memory(const ModelConfig& cfg, const MemoryInputs& in);
// Throws Error("the run needs at least X GiB ... but Y GiB are available: lower <option>") when the
// estimate exceeds `available_bytes` (0 = unknown: no check).
void check_memory_feasible(const MemoryEstimate& e, int64_t available_bytes);

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
