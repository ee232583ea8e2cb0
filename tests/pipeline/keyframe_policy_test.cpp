// Keyframe policies through the public Session: deciding by hand (push_frame_deferred + commit /
// rollback), policies that decide after the frame ran, and the exact errors. The flow values and
// decisions themselves are checked against the golden flow cases in verify_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/error.h"
#include "tiny_model_fixture.h"
#include "lingbot/keyframe_policy.h"
#include "lingbot/session.h"

namespace {

using namespace lingbot;

uint64_t fnv1a(const std::vector<unsigned char>& b) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

class KeyframePolicyTest : public test::TinyModelTest {
 protected:
  static SessionOptions tiny_options(KVBackend b = KVBackend::Paged) {
    SessionOptions o;
    o.kv_backend = b;
    o.scale_frames = 2;
    o.kv_window = 1;  // small window: keyframes evict, so a missed rollback would show
    o.threads = 1;
    o.keep_features = false;
    return o;
  }
  // Everything a rolled-back frame must leave as it was.
  struct Snapshot {
    std::vector<uint64_t> blocks;
    uint64_t camera = 0;
    int64_t rope_next = 0, stored = 0, resident = 0, visible = 0, specials = 0, camera_frames = 0;
    bool operator==(const Snapshot&) const = default;
  };
  static Snapshot snapshot(const Session& s) {
    Snapshot x;
    for (int b = 0; b < static_cast<int>(model_->config().aggregator.depth); ++b)
      x.blocks.push_back(fnv1a(s.cache_live_bytes(b)));
    x.camera = fnv1a(s.camera_cache_live_bytes());
    const SessionStats st = s.stats();
    x.rope_next = st.rope_time_next;
    x.stored = st.cache.frames_stored;
    x.resident = st.cache.frames_resident;
    x.visible = st.cache.visible_tokens;
    x.specials = st.cache.special_tokens;
    x.camera_frames = st.camera_cache_frames;
    return x;
  }
};

// The hash test: a rolled-back frame leaves the aggregator cache (every block's live K/V bytes),
// the camera-head caches and the 3D-RoPE time index exactly as before; a committed one advances them.
TEST_F(KeyframePolicyTest, RollbackLeavesBothCachesAndTheRopeIndexExactlyAsBefore) {
  for (KVBackend b : {KVBackend::Paged, KVBackend::Dense}) {
    SCOPED_TRACE(kv_backend_name(b));
    Session s(model_, tiny_options(b));
    EXPECT_TRUE(s.push_frame(frame(0)).empty());
    EXPECT_EQ(s.push_frame(frame(1)).size(), 2u);
    int rollbacks = 0;
    for (int64_t i = 2; i < frames(); ++i) {
      const Snapshot before = snapshot(s);
      const FrameResult r = s.push_frame_deferred(frame(i));
      EXPECT_EQ(r.frame_index, i);
      EXPECT_EQ(r.rope_time_index, before.rope_next);  // a deferred frame carries the next stored index
      EXPECT_TRUE(s.stats().decision_pending);
      EXPECT_NE(snapshot(s), before);  // it is in the caches while undecided
      if (i % 3 == 0 || i == 2) {
        s.commit_frame();
        const Snapshot after = snapshot(s);
        EXPECT_EQ(after.rope_next, before.rope_next + 1);
        EXPECT_EQ(after.stored, before.stored + 1);
        EXPECT_EQ(after.camera_frames, before.camera_frames + 1);
      } else {
        s.rollback_frame();
        EXPECT_EQ(snapshot(s), before) << "frame " << i;
        ++rollbacks;
      }
      EXPECT_FALSE(s.stats().decision_pending);
    }
    EXPECT_EQ(rollbacks, 4);
    EXPECT_TRUE(s.finish().empty());
  }
}

// A policy that decides after the frame ran is served inside push_frame: its decision shows in the
// result (frame_type, is_keyframe, flow, reference frame) and in the caches.
class EveryThirdAfterwards final : public KeyframePolicy {
 public:
  bool decides_before() const override { return false; }
  KeyframeDecision decide_after(const KeyframeQuery& q, const FrameResult& r) const override {
    EXPECT_EQ(q.frame_index, r.frame_index);
    EXPECT_NE(q.reference_pose_enc, nullptr);
    return {q.streamed_index % 3 == 0, static_cast<double>(q.frame_index - q.reference_frame)};
  }
  std::string describe() const override { return "every third, afterwards"; }
};

TEST_F(KeyframePolicyTest, AfterwardsPolicyDecidesInsidePush) {
  SessionOptions o = tiny_options();
  o.keyframe_policy = std::make_shared<EveryThirdAfterwards>();
  Session s(model_, o);
  std::vector<FrameResult> all;
  for (int64_t i = 0; i < frames(); ++i)
    for (auto& r : s.push_frame(frame(i))) all.push_back(std::move(r));
  ASSERT_EQ(static_cast<int64_t>(all.size()), frames());
  int64_t reference = 1;  // the last scale frame at first
  for (const FrameResult& r : all) {
    if (r.frame_index < 2) {
      EXPECT_EQ(r.frame_type, FrameType::Scale);
      EXPECT_EQ(r.flow, -1.0);
      continue;
    }
    const bool key = (r.frame_index - 2) % 3 == 0;
    EXPECT_EQ(r.frame_type, key ? FrameType::Keyframe : FrameType::NonKeyframe) << r.frame_index;
    EXPECT_EQ(r.is_keyframe, key);
    EXPECT_EQ(r.flow_reference_frame, reference);
    EXPECT_EQ(r.flow, static_cast<double>(r.frame_index - reference));
    if (key) reference = r.frame_index;
  }
  EXPECT_EQ(s.stats().cache.frames_stored, 2 + 3);  // scale frames + frames 2, 5, 8
  EXPECT_EQ(s.stats().rope_time_next, 5);
  EXPECT_EQ(s.keyframe_policy().describe(), "every third, afterwards");
}

TEST_F(KeyframePolicyTest, IntervalAndAutoPolicies) {
  const IntervalKeyframes every2(2);
  EXPECT_TRUE(every2.decides_before());
  KeyframeQuery q;
  q.streamed_index = 4;
  EXPECT_TRUE(every2.is_keyframe(q));
  q.streamed_index = 5;
  EXPECT_FALSE(every2.is_keyframe(q));
  EXPECT_EQ(auto_keyframe_interval(320), 1);
  EXPECT_EQ(auto_keyframe_interval(321), 2);
  EXPECT_EQ(auto_keyframe_interval(10000), 32);
  // The default policy is the interval of SessionOptions::keyframe_interval.
  SessionOptions o = tiny_options();
  o.keyframe_interval = 3;
  Session s(model_, o);
  EXPECT_EQ(s.keyframe_policy().describe(), "interval 3");
  EXPECT_EQ(FlowKeyframes(5.0, 3).describe(), "flow > 5 px, max non-keyframe gap 3");
}

TEST_F(KeyframePolicyTest, ErrorMessages) {
  auto expect_error = [](auto&& fn, const std::string& msg) {
    try {
      fn();
      ADD_FAILURE() << "expected: " << msg;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  };
  expect_error([] { FlowKeyframes(0.0, 3); }, "flow threshold must be a number > 0 (pixels), got 0");
  expect_error([] { FlowKeyframes(5.0, 0); }, "max non-keyframe gap must be >= 1, got 0");
  expect_error([] { IntervalKeyframes(0); }, "keyframe interval must be >= 1, got 0");
  expect_error([] { auto_keyframe_interval(0); }, "the automatic keyframe interval needs the number of frames, got 0");
  SessionOptions no_depth = tiny_options();
  no_depth.depth_head = false;
  no_depth.keyframe_policy = std::make_shared<FlowKeyframes>(5.0, 3);
  expect_error([&] { Session(model_, no_depth); },
               "flow keyframes need the camera and the depth head (SessionOptions.camera_head and depth_head)");

  Session s(model_, tiny_options());
  s.push_frame(frame(0));
  expect_error([&] { s.push_frame_deferred(frame(1)); },
               "push_frame_deferred: frame 1 is a scale frame (the first 2 frames are always stored; push them with "
               "push_frame)");
  s.push_frame(frame(1));
  expect_error([&] { s.commit_frame(); }, "commit_frame: no frame awaits a decision (push one with push_frame_deferred)");
  expect_error([&] { s.rollback_frame(); },
               "rollback_frame: no frame awaits a decision (push one with push_frame_deferred)");
  s.push_frame_deferred(frame(2));
  expect_error([&] { s.push_frame(frame(3)); },
               "push_frame: frame 2 awaits its decision (call commit_frame() or rollback_frame() first)");
  expect_error([&] { s.finish(); }, "finish: frame 2 awaits its decision (call commit_frame() or rollback_frame() first)");
  s.rollback_frame();
  EXPECT_EQ(s.push_frame(frame(3)).size(), 1u);
}

// A custom policy that lacks the override its decides_before() calls for is named with what is missing.
TEST_F(KeyframePolicyTest, ACustomPolicyMissingItsDecisionSaysWhich) {
  struct Before : KeyframePolicy {
    bool decides_before() const override { return true; }
    std::string describe() const override { return "mine"; }
  };
  struct After : KeyframePolicy {
    bool decides_before() const override { return false; }
    std::string describe() const override { return "mine"; }
  };
  for (const bool before : {true, false}) {
    SessionOptions o = tiny_options();
    o.keyframe_policy = before ? std::shared_ptr<const KeyframePolicy>(std::make_shared<Before>())
                               : std::make_shared<After>();
    Session s(model_, o);
    s.push_frame(frame(0));
    s.push_frame(frame(1));  // the scale frames are never asked about
    try {
      s.push_frame(frame(2));
      ADD_FAILURE() << "a policy without its decision ran";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), before ? "KeyframePolicy 'mine': decides_before() is true but is_keyframe() is not overridden"
                                              : "KeyframePolicy 'mine': decides_before() is false but decide_after() is not overridden");
    }
  }
}

}  // namespace
