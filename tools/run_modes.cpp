#include "run_modes.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cli_util.h"
#include "core/error.h"
#include "core/printf_string.h"

namespace lingbot::cli {

namespace {

constexpr const char* kKeyframeIntervalChoices = "a number >= 1, auto (or 0) or flow";
constexpr long long kMaxKeyframeInterval = 1000000;

// N >= 1 (up to kMaxKeyframeInterval), or 0 when `s` is not such a number.
long interval_number(const std::string& s) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end && *end == '\0' && v >= 1 && v <= kMaxKeyframeInterval ? static_cast<long>(v) : 0;
}

// What is wrong with a --keyframe-interval value ("" = nothing): a whole number above the bound
// says so, anything else lists the choices.
std::string interval_problem(const std::string& s) {
  if (s == "auto" || s == "0" || s == "flow" || interval_number(s) >= 1) return "";
  const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);  // ERANGE: beyond long long, larger still
  if (digits && (v > kMaxKeyframeInterval || errno == ERANGE))
    return "must be at most " + std::to_string(kMaxKeyframeInterval) + ", got '" + s + "'";
  return std::string("must be ") + kKeyframeIntervalChoices + ", got '" + s + "'";
}

// --keyframe-interval: 0 or "auto" -> 0, "flow" -> -1, N >= 1 -> N.
int parse_interval(const std::string& s) {
  if (s == "auto" || s == "0") return 0;
  if (s == "flow") return -1;
  const std::string problem = interval_problem(s);
  LINGBOT_CHECK(problem.empty(), "--keyframe-interval ", problem);
  return static_cast<int>(interval_number(s));
}

std::string shortest_str(double v) { return printf_string("%g", v); }

}  // namespace

void add_flow_keyframe_options(CLI::App* cmd, ModeArgs* m) {
  cmd->add_option("--flow-threshold", m->flow_threshold,
                  "--keyframe-interval flow: mean flow in pixels (of the preprocessed image) above which a frame "
                  "is stored (default " + std::to_string(static_cast<int>(kDefaultFlowThreshold)) + ")")
      ->check(finite_number());
  cmd->add_option("--max-non-keyframe-gap", m->max_non_keyframe_gap,
                  "--keyframe-interval flow: a frame this many frames after the last stored one is stored anyway "
                  "(default " + std::to_string(kDefaultMaxNonKeyframeGap) + ")");
}

CLI::Validator keyframe_interval_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string { return interval_problem(s); },
      "");
}

PreprocessChoice resolve_preprocess(ModeArgs& m, const std::string& preprocess_option) {
  PreprocessChoice c;
  if (m.mode == "crop" || m.mode == "pad") {
    LINGBOT_CHECK(preprocess_option.empty() || preprocess_option == m.mode, "--mode ", m.mode,
                  " (the deprecated spelling of --preprocess ", m.mode, ") contradicts --preprocess ", preprocess_option);
    // As every option and its old spelling (docs/naming.md): both given is refused, even alike.
    LINGBOT_CHECK(preprocess_option.empty(), "give --preprocess ", m.mode, " or its old spelling --mode ", m.mode,
                  ", not both");
    c.preprocess = m.mode;
    c.alias_used = true;
    m.mode = "streaming";
    return c;
  }
  c.preprocess = preprocess_option.empty() ? "crop" : preprocess_option;
  LINGBOT_CHECK(c.preprocess == "crop" || c.preprocess == "pad", "--preprocess must be crop or pad, got '",
                c.preprocess, "'");
  return c;
}

void check_mode_args(const ModeArgs& m, int K) {
  LINGBOT_CHECK(m.mode == "streaming" || m.mode == "windowed",
                "--mode must be streaming or windowed (crop | pad: the deprecated spelling of --preprocess), got '",
                m.mode, "'");
  const int interval = parse_interval(m.keyframe_interval);
  const bool flow = interval < 0 || (interval == 0 && m.live && m.mode == "streaming");
  if (!flow) {
    usage_check(!m.flow_threshold, "--flow-threshold only applies to --keyframe-interval flow (got --keyframe-interval ",
                m.keyframe_interval, ")");
    usage_check(!m.max_non_keyframe_gap,
                  "--max-non-keyframe-gap only applies to --keyframe-interval flow (got --keyframe-interval ",
                  m.keyframe_interval, ")");
  }
  LINGBOT_CHECK(!m.flow_threshold || (std::isfinite(*m.flow_threshold) && *m.flow_threshold > 0),
                "--flow-threshold must be a number > 0 (pixels), got ", m.flow_threshold ? shortest_str(*m.flow_threshold) : "");
  LINGBOT_CHECK(!m.max_non_keyframe_gap || *m.max_non_keyframe_gap >= 1, "--max-non-keyframe-gap must be >= 1, got ",
                m.max_non_keyframe_gap.value_or(0));
  if (m.mode == "streaming") {
    for (const auto& [given, name] : {std::pair{m.window_size.has_value(), "--window-size"},
                                      std::pair{m.overlap_size.has_value(), "--overlap-size"},
                                      std::pair{m.overlap_keyframes.has_value(), "--overlap-keyframes"}})
      usage_check(!given, name, " only applies to --mode windowed");
    return;
  }
  usage_check(!(m.overlap_size && m.overlap_keyframes), "give --overlap-size or --overlap-keyframes, not both");
  LINGBOT_CHECK(!m.overlap_size || *m.overlap_size >= 0, "--overlap-size must be >= 0, got ", m.overlap_size.value_or(0));
  LINGBOT_CHECK(!m.overlap_keyframes || *m.overlap_keyframes >= 1,
                "--overlap-keyframes must be >= 1 (the overlap is at least the scale frames; no overlap: --overlap-size 0), got ",
                m.overlap_keyframes.value_or(0));
  const int window = m.window_size.value_or(kDefaultWindowSize);
  LINGBOT_CHECK(window > K, "--window-size ", window, " must be larger than --scale-frames ", K,
                ": a window stores its scale frames plus at least one keyframe");
  const int n = interval > 0 ? interval : 1;  // auto is 1 in windowed mode (demo.py)
  int64_t ov = 0;
  std::string ov_text;
  if (m.overlap_keyframes) {
    ov = std::max<int64_t>(K, int64_t{*m.overlap_keyframes} * n);
    ov_text = "--overlap-keyframes " + std::to_string(*m.overlap_keyframes) + " (= " + std::to_string(ov) + " frames)";
  } else {
    ov = m.overlap_size.value_or(kDefaultOverlapSize);
    ov_text = m.overlap_size ? "--overlap-size " + std::to_string(ov)
                             : "the default overlap (--overlap-size " + std::to_string(ov) + ")";
  }
  if (flow) {
    LINGBOT_CHECK(window >= ov + K, "--window-size ", window, " must be at least the overlap + --scale-frames (",
                  ov, " + ", K, ") with --keyframe-interval flow: ", ov_text,
                  " would not fit in a window, and consecutive windows would not overlap by it");
  } else {
    const int64_t L = windowed_span(K, window, n);
    LINGBOT_CHECK(ov < L, ov_text, " must be smaller than a window (", L, " frames: --scale-frames ", K, " + (",
                  "--window-size ", window, " - ", K, ") keyframes x --keyframe-interval ", n, ")");
  }
}

ModeChoice choose_mode(const ModeArgs& m, std::optional<int64_t> frames) {
  ModeChoice c;
  c.windowed = m.mode == "windowed";
  const int interval = parse_interval(m.keyframe_interval);
  if (interval < 0 || (interval == 0 && m.live && !c.windowed)) {
    const auto p = std::make_shared<FlowKeyframes>(m.flow_threshold.value_or(kDefaultFlowThreshold),
                                                   m.max_non_keyframe_gap.value_or(kDefaultMaxNonKeyframeGap));
    c.keyframe_rule = interval == 0 ? "automatic (live input, unknown length: " + p->describe() + ")" : p->describe();
    c.policy = p;
  } else {
    if (interval > 0) {
      c.keyframe_interval = interval;
      c.keyframe_rule = "given";
    } else if (c.windowed) {
      c.keyframe_interval = 1;
      c.keyframe_rule = "automatic (windowed mode: 1)";
    } else if (frames) {
      c.keyframe_interval = auto_keyframe_interval(*frames);
      c.keyframe_rule = "automatic (1 up to 320 frames, else ceil(frames / 320))";
    } else {
      c.keyframe_interval = 1;
      c.keyframe_rule = "automatic (frame count unknown: 1)";
    }
    c.policy = std::make_shared<IntervalKeyframes>(c.keyframe_interval);
  }
  if (c.windowed) {
    c.window.window_size = m.window_size.value_or(kDefaultWindowSize);
    if (m.overlap_keyframes) c.window.overlap_keyframes = m.overlap_keyframes;
    else c.window.overlap_size = m.overlap_size.value_or(kDefaultOverlapSize);
  }
  return c;
}

}  // namespace lingbot::cli
