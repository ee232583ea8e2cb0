#pragma once
// `lingbot-map run`: the inference mode (--mode streaming | windowed, upstream demo.py's names) and the
// keyframe options (--keyframe-interval N | auto | flow, --flow-threshold, --max-non-keyframe-gap,
// --window-size, --overlap-size, --overlap-keyframes): their checks, with messages naming the options.
// The frame loop drives them through pipeline/sequence_runner.h.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/keyframe_policy.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"

namespace lingbot::cli {

struct ModeArgs {
  std::string mode = "streaming";         // streaming | windowed
  std::string keyframe_interval = "auto";  // N >= 1 | auto (0 is accepted as auto) | flow
  std::optional<double> flow_threshold;
  std::optional<int> max_non_keyframe_gap;
  std::optional<int> window_size;
  std::optional<int> overlap_size;
  std::optional<int> overlap_keyframes;
  bool live = false;  // --live: the length is unknown, so `auto` means flow keyframes
};

// --mode also accepts crop | pad, its meaning before --preprocess existed. Returns the preprocessing
// ("crop" | "pad") and sets `mode` to streaming when such an alias is used (the caller prints the
// deprecation notice when `alias_used`); throws when --preprocess and the alias disagree.
struct PreprocessChoice {
  std::string preprocess;
  bool alias_used = false;
};
PreprocessChoice resolve_preprocess(ModeArgs& m, const std::string& preprocess_option);

// Throws lingbot::Error with one message naming the option for every inconsistent combination.
void check_mode_args(const ModeArgs& m, int scale_frames);

// --flow-threshold and --max-non-keyframe-gap (run and bench soak), bound to `m`'s fields.
void add_flow_keyframe_options(CLI::App* cmd, ModeArgs* m);
// Validator for the words --keyframe-interval takes (N >= 1, auto or 0, flow): anything else is a
// usage error (exit 2).
CLI::Validator keyframe_interval_validator();

struct ModeChoice {
  bool windowed = false;
  std::shared_ptr<const KeyframePolicy> policy;
  int keyframe_interval = 1;     // the interval used (interval policies; 1 for flow)
  std::string keyframe_rule;     // how it was chosen, for the log and summary.json
  WindowedOptions window;        // windowed mode
};
// frames: the sequence length when known (for auto).
ModeChoice choose_mode(const ModeArgs& m, std::optional<int64_t> frames);

}  // namespace lingbot::cli
