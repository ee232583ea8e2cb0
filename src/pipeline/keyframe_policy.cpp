#include "lingbot/keyframe_policy.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "lingbot/session.h"
#include "model/geometry.h"

namespace lingbot {

const char* frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::Scale: return "scale";
    case FrameType::Keyframe: return "keyframe";
    case FrameType::NonKeyframe: return "non-keyframe";
  }
  return "unknown";
}

// The base versions run only when a policy lacks the override its decides_before() calls for.
bool KeyframePolicy::is_keyframe(const KeyframeQuery&) const {
  throw Error("KeyframePolicy '" + describe() + "': " +
              (decides_before() ? "decides_before() is true but is_keyframe() is not overridden"
                                : "decides after the frame ran; is_keyframe() is not for it"));
}

KeyframeDecision KeyframePolicy::decide_after(const KeyframeQuery&, const FrameResult&) const {
  throw Error("KeyframePolicy '" + describe() + "': " +
              (decides_before() ? "decides before the frame runs; decide_after() is not for it"
                                : "decides_before() is false but decide_after() is not overridden"));
}

void KeyframePolicy::check(const SessionOptions&) const {}

IntervalKeyframes::IntervalKeyframes(int interval) : interval_(interval) {
  LINGBOT_CHECK(interval >= 1, "keyframe interval must be >= 1, got ", interval);
}

bool IntervalKeyframes::is_keyframe(const KeyframeQuery& q) const { return q.streamed_index % interval_ == 0; }

std::string IntervalKeyframes::describe() const { return "interval " + std::to_string(interval_); }

int auto_keyframe_interval(int64_t frames) {
  LINGBOT_CHECK(frames >= 1, "the automatic keyframe interval needs the number of frames, got ", frames);
  return frames <= kAutoKeyframeFrames ? 1 : static_cast<int>((frames + kAutoKeyframeFrames - 1) / kAutoKeyframeFrames);
}

FlowKeyframes::FlowKeyframes(double threshold_px, int max_non_keyframe_gap)
    : threshold_(threshold_px), max_gap_(max_non_keyframe_gap) {
  LINGBOT_CHECK(std::isfinite(threshold_px) && threshold_px > 0, "flow threshold must be a number > 0 (pixels), got ",
                threshold_px);
  LINGBOT_CHECK(max_non_keyframe_gap >= 1, "max non-keyframe gap must be >= 1, got ", max_non_keyframe_gap);
}

void FlowKeyframes::check(const SessionOptions& o) const {
  LINGBOT_CHECK(o.camera_head && o.depth_head,
                "flow keyframes need the camera and the depth head (SessionOptions.camera_head and depth_head)");
}

KeyframeDecision FlowKeyframes::decide_after(const KeyframeQuery& q, const FrameResult& r) const {
  LINGBOT_CHECK(q.reference_pose_enc != nullptr && !r.pose_enc.empty() && !r.depth.empty(),
                "flow keyframes: frame ", q.frame_index, " has no pose / depth output or no reference keyframe");
  const model::ImageSize size{static_cast<int>(q.height), static_cast<int>(q.width)};
  auto camera = [&](const Tensor& pe) {
    model::PoseEncoding e;
    std::memcpy(e.data(), pe.f32(), sizeof(e));
    return model::camera_from_pose_encoding(e, size);
  };
  const model::FlowMeasure m = model::reprojection_flow(r.depth, camera(r.pose_enc), camera(*q.reference_pose_enc), size);
  KeyframeDecision d;
  d.flow = m.flow;
  d.keyframe = q.streamed_index == 0 || m.flow > threshold_ || q.frame_index - q.reference_frame >= max_gap_;
  return d;
}

std::string FlowKeyframes::describe() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "flow > %g px, max non-keyframe gap %d", threshold_, max_gap_);
  return buf;
}

}  // namespace lingbot
