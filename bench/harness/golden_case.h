#pragma once
// The golden-case reader: case.json of a reference case (scenario, model hyperparameters, weights
// file) as the engine uses it. Kept apart from the verification run so it can be tested and fuzzed
// on its own (it needs only the model configuration, never the model).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "lingbot/model.h"

namespace lingbot {

// What case.json says (the reader on its own, so it can be tested and fuzzed without a case folder).
struct GoldenCase {
  std::string case_name;       // "case" field; empty when absent
  std::string weights_file;    // relative to the case directory
  int scale_frames = 0;        // scenario.num_scale_frames (= kv_cache_scale_frames)
  int sliding_window = 0;      // scenario.kv_cache_sliding_window
  int keyframe_interval = 1;
  int camera_iterations = 0;   // 0 = model default
  bool cross_frame_special = true, include_scale_frames = true, camera_only = false;
  ConfigOverrides overrides;   // model hyperparameters the weight shapes do not reveal
  // Frames and their size (needed when reference.safetensors has no `images`: decode frames/*.png).
  std::optional<int64_t> num_frames;      // scenario.num_frames
  std::optional<int64_t> height, width;   // scenario.image_hw
  // Flow keyframes (scenario.flow_threshold > 0) and windowed inference (scenario.inference).
  double flow_threshold = 0.0;             // 0 = fixed-interval keyframes
  std::optional<int> max_non_keyframe_gap;
  bool windowed = false;                   // scenario.inference == "windowed"
  std::optional<int> window_size, overlap_size, overlap_keyframes;
  // reference.check_windowed.flow_rows[].well_conditioned by (frame, window); rows not listed are
  // well conditioned (a flow value with a sample near the keyframe camera's plane is not compared).
  std::map<std::pair<int64_t, int64_t>, bool> flow_well_conditioned;
};
// Parses and checks case.json text; throws lingbot::Error naming `label` for malformed JSON, a
// missing or mistyped field, or a scenario option the engine does not support.
GoldenCase parse_case_json(std::string_view text, const std::string& label);

}  // namespace lingbot
