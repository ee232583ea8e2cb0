#pragma once
// Keyframe policies: which streamed frames a Session stores in its caches (keyframes) and which it
// only uses (non-keyframes). Scale frames are always stored and never asked about.
//
// Two kinds of decision:
//   * before the frame runs (decides_before() == true): is_keyframe(query) says Keyframe or
//     NonKeyframe, and the frame runs in that mode.
//     IntervalKeyframes is of this kind.
//   * after the frame ran (decides_before() == false): the frame runs once with eviction deferred
//     (it attends to the cache as it stands plus its own tokens), then decide_after(query, result)
//     says whether to keep it; the session then commits (runs the deferred eviction) or rolls the
//     frame back out of the aggregator cache, the camera-head caches and the 3D-RoPE time index.
//     FlowKeyframes is of this kind (docs/long-streams.md "Long sequences: flow keyframes and windowed mode").
// Policies are immutable and may be shared by any number of sessions: every piece of per-stream state
// they need (the reference keyframe, positions) comes in the query. Derive from KeyframePolicy for a
// custom rule; to decide each frame by hand instead, use Session::push_frame_deferred.
#include <cstdint>
#include <memory>
#include <string>

#include "lingbot/tensor.h"

namespace lingbot {

struct SessionOptions;
struct FrameResult;

// What a frame is in its (window's) stream: 0 scale frame, 1 keyframe, 2 non-keyframe (the golden
// `frame_type` values).
enum class FrameType : int8_t { Scale = 0, Keyframe = 1, NonKeyframe = 2 };
const char* frame_type_name(FrameType t);  // "scale" | "keyframe" | "non-keyframe"

// A streamed frame's position, and the keyframe it is measured against.
struct KeyframeQuery {
  int64_t frame_index = 0;          // position in the session's sequence
  int64_t streamed_index = 0;       // frame_index - scale frames: 0 for the first streamed frame
  int64_t reference_frame = 0;      // last stored frame so far (the last scale frame at first)
  // Its raw pose encoding f32 [9] (null without camera head). Points into the session: valid only
  // during the is_keyframe() / decide_after() call the query is passed to (the next stored frame
  // replaces it); copy it to keep it.
  const Tensor* reference_pose_enc = nullptr;
  int64_t height = 0, width = 0;    // image size, pixels
};

// A decision taken after the frame ran.
struct KeyframeDecision {
  bool keyframe = true;
  double flow = -1.0;  // the measured value that decided (pixels for FlowKeyframes); -1 = none
};

class KeyframePolicy {
 public:
  virtual ~KeyframePolicy() = default;
  virtual bool decides_before() const = 0;
  // decides_before() policies: keyframe or not, before the frame runs.
  virtual bool is_keyframe(const KeyframeQuery& query) const;
  // Other policies: keyframe or not, from the frame's outputs (computed with eviction deferred).
  virtual KeyframeDecision decide_after(const KeyframeQuery& query, const FrameResult& result) const;
  // Throws lingbot::Error when the session cannot serve this policy (e.g. a missing head).
  virtual void check(const SessionOptions& options) const;
  // One line for logs and summaries, e.g. "interval 4" or "flow > 5 px, max non-keyframe gap 30".
  virtual std::string describe() const = 0;
  // The most streamed frames from one keyframe to the next (the interval; flow: the gap bound), so
  // that a run stores at least one in this many: memory estimates' lower bound. 0: no bound known.
  virtual int max_keyframe_spacing() const { return 0; }
};

// Every `interval`-th streamed frame is a keyframe: frame i >= K is one iff (i - K) % interval == 0.
class IntervalKeyframes final : public KeyframePolicy {
 public:
  explicit IntervalKeyframes(int interval);  // throws unless interval >= 1
  bool decides_before() const override { return true; }
  bool is_keyframe(const KeyframeQuery& query) const override;
  std::string describe() const override;
  int max_keyframe_spacing() const override { return interval_; }
  int interval() const { return interval_; }

 private:
  int interval_;
};

// Upstream demo.py's automatic interval: 1 up to 320 frames, else ceil(frames / 320), which bounds the
// frames stored in the KV cache. Needs the sequence length up front (throws unless frames >= 1).
inline constexpr int64_t kAutoKeyframeFrames = 320;
int auto_keyframe_interval(int64_t frames);

// Flow keyframes (upstream GCTStream with flow_threshold > 0). After the frame ran, its depth at the
// stride-8 samples (u, v) = (column, row) is unprojected with its own camera, mapped into the
// reference keyframe's camera and projected; flow = mean pixel displacement over the valid samples
// (depth > 1e-6 and reference-camera z > 1e-6; 0 if none). Keyframe iff first streamed frame, or
// flow > threshold (strict), or frame_index - reference_frame >= max_non_keyframe_gap.
// Needs the camera and depth heads.
class FlowKeyframes final : public KeyframePolicy {
 public:
  FlowKeyframes(double threshold_px, int max_non_keyframe_gap);  // throws unless > 0 and >= 1
  bool decides_before() const override { return false; }
  KeyframeDecision decide_after(const KeyframeQuery& query, const FrameResult& result) const override;
  void check(const SessionOptions& options) const override;
  std::string describe() const override;
  int max_keyframe_spacing() const override { return max_gap_; }
  double threshold() const { return threshold_; }
  int max_non_keyframe_gap() const { return max_gap_; }

 private:
  double threshold_;
  int max_gap_;
};

// Upstream's default max_non_keyframe_gap.
inline constexpr int kDefaultMaxNonKeyframeGap = 30;
// Our default flow threshold, pixels of mean camera-motion flow (CLI --flow-threshold, Python
// flow_threshold). Upstream has none: flow mode is off unless its demo gets --flow_threshold > 0.
inline constexpr double kDefaultFlowThreshold = 5.0;

}  // namespace lingbot
