// Streaming Session: protocol (scale phase, keyframes, finish, reset), determinism across thread
// counts, and the exact error messages.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"
#include "test_errors.h"

namespace {

using namespace lingbot;
using lingbot_test::expect_error;

class SessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(LINGBOT_TESTDATA_DIR) + "/tiny/";
    model_ = Model::load(dir + "weights.safetensors");
    images_ = new Tensor(io::SafetensorsReader::open(dir + "reference.safetensors").read("images", DType::F32));
  }
  static void TearDownTestSuite() {
    delete images_;
    images_ = nullptr;
    model_.reset();
  }
  static const float* frame(int64_t i) { return images_->f32() + i * 3 * H() * W(); }
  static int64_t H() { return images_->dim(2); }
  static int64_t W() { return images_->dim(3); }
  static SessionOptions tiny_options() {
    SessionOptions o;
    o.scale_frames = 2;
    o.kv_window = 3;
    o.threads = 1;
    o.keep_features = true;  // same_bits() compares them with the heads' outputs
    return o;
  }
  // Pushes frames [0, n) and returns every result in arrival order.
  static std::vector<FrameResult> run(Session& s, int64_t n) {
    std::vector<FrameResult> all;
    for (int64_t i = 0; i < n; ++i)
      for (auto& r : s.push_frame(frame(i), H(), W())) all.push_back(std::move(r));
    for (auto& r : s.finish()) all.push_back(std::move(r));
    return all;
  }
  // Every output of every frame bit for bit (features, camera and depth heads); the heads' outputs
  // must be there, so a comparison of absent tensors cannot pass.
  static bool same_bits(const std::vector<FrameResult>& a, const std::vector<FrameResult>& b) {
    if (a.size() != b.size()) return false;
    const auto same = [](const Tensor& x, const Tensor& y) {
      return x.shape() == y.shape() && x.dtype() == y.dtype() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
    };
    for (size_t i = 0; i < a.size(); ++i) {
      const FrameResult &x = a[i], &y = b[i];
      if (x.frame_index != y.frame_index || x.is_keyframe != y.is_keyframe || x.features.size() != y.features.size())
        return false;
      for (size_t j = 0; j < x.features.size(); ++j)
        if (!same(x.features[j], y.features[j])) return false;
      if (x.pose_enc.empty() || x.depth.empty()) ADD_FAILURE() << "frame " << x.frame_index << " has no head outputs";
      for (const auto& [t, u] : {std::pair{&x.pose_enc, &y.pose_enc}, {&x.pose_enc_iters, &y.pose_enc_iters},
                                 {&x.extrinsic, &y.extrinsic}, {&x.intrinsic, &y.intrinsic},
                                 {&x.extrinsic_c2w, &y.extrinsic_c2w}, {&x.depth, &y.depth},
                                 {&x.depth_conf, &y.depth_conf}, {&x.world_points, &y.world_points}})
        if (!same(*t, *u)) return false;
    }
    return true;
  }
  static std::shared_ptr<const Model> model_;
  static Tensor* images_;
};
std::shared_ptr<const Model> SessionTest::model_;
Tensor* SessionTest::images_ = nullptr;

TEST_F(SessionTest, ScalePhaseThenOneResultPerPushWithKeyframes) {
  SessionOptions o = tiny_options();
  o.keyframe_interval = 2;
  Session s(model_, o);
  EXPECT_TRUE(s.push_frame(frame(0), H(), W()).empty());  // buffered until the scale phase is complete
  auto scale = s.push_frame(frame(1), H(), W());
  ASSERT_EQ(scale.size(), 2u);
  EXPECT_EQ(scale[0].frame_index, 0);
  EXPECT_EQ(scale[1].frame_index, 1);
  EXPECT_EQ(s.stats().cache.frames_stored, 2);
  const std::vector<bool> key = {true, false, true, false};
  const std::vector<int64_t> time = {2, 3, 3, 4};
  for (int64_t i = 2; i < 6; ++i) {
    auto r = s.push_frame(frame(i), H(), W());
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].frame_index, i);
    EXPECT_EQ(r[0].is_keyframe, key[static_cast<size_t>(i - 2)]) << i;
    EXPECT_EQ(r[0].rope_time_index, time[static_cast<size_t>(i - 2)]) << i;
    ASSERT_EQ(r[0].features.size(), 4u);
    EXPECT_EQ(r[0].features[0].shape(), (Shape{46, 256}));
    EXPECT_TRUE(r[0].patch_tokens.empty());  // not requested
    EXPECT_EQ(r[0].pose_enc.shape(), (Shape{9}));
    EXPECT_EQ(r[0].pose_enc_iters.shape(), (Shape{4, 9}));
    EXPECT_EQ(r[0].extrinsic.shape(), (Shape{3, 4}));
    EXPECT_EQ(r[0].intrinsic.shape(), (Shape{3, 3}));
    EXPECT_EQ(r[0].depth.shape(), (Shape{70, 112}));
    EXPECT_EQ(r[0].depth_conf.shape(), (Shape{70, 112}));
    EXPECT_EQ(r[0].world_points.shape(), (Shape{70, 112, 3}));
  }
  EXPECT_EQ(s.stats().camera_cache_frames, 4);  // the camera head skips non-keyframes too
  EXPECT_EQ(s.stats().cache.frames_stored, 4);  // scale frames + keyframes 2 and 4
  EXPECT_TRUE(s.finish().empty());
  EXPECT_TRUE(s.closed());
}

TEST_F(SessionTest, OneAndTwoThreadsBitIdentical) {
  for (KVBackend b : {KVBackend::Paged, KVBackend::Dense}) {
    SessionOptions o = tiny_options();
    o.kv_backend = b;
    Session s1(model_, o);
    o.threads = 2;
    Session s2(model_, o);
    EXPECT_TRUE(same_bits(run(s1, 7), run(s2, 7))) << kv_backend_name(b);  // frames 5, 6 evict
  }
}

TEST_F(SessionTest, ShortStreamFlushesTheScalePhaseOnFinish) {
  SessionOptions o = tiny_options();
  o.scale_frames = 3;
  Session s(model_, o);
  EXPECT_TRUE(s.push_frame(frame(0), H(), W()).empty());
  EXPECT_TRUE(s.push_frame(frame(1), H(), W()).empty());
  auto flushed = s.finish();
  ASSERT_EQ(flushed.size(), 2u);
  EXPECT_EQ(flushed[1].rope_time_index, 1);
  // Same as a session whose scale phase is exactly those two frames.
  Session s2(model_, tiny_options());
  EXPECT_TRUE(same_bits(flushed, run(s2, 2)));
}

TEST_F(SessionTest, ResetStartsAFreshSequence) {
  SessionOptions o = tiny_options();
  o.keep_patch_tokens = true;
  Session s(model_, o);
  auto first = run(s, 7);
  ASSERT_EQ(first.size(), 7u);
  EXPECT_EQ(first[0].patch_tokens.shape(), (Shape{40, 128}));
  s.reset();
  EXPECT_FALSE(s.closed());
  EXPECT_EQ(s.stats().cache.frames_stored, 0);
  EXPECT_TRUE(same_bits(first, run(s, 7)));
  // After a reset the next sequence may use another frame size.
  s.reset();
  Tensor small({3, 56, 98});
  EXPECT_TRUE(s.push_frame(small).empty());
  EXPECT_EQ(s.push_frame(small).size(), 2u);
}

TEST_F(SessionTest, ErrorMessages) {
  Session s(model_, tiny_options());
  std::vector<float> img(static_cast<size_t>(3 * 70 * 112), 0.5f);
  expect_error([&] { s.push_frame(img.data(), 70, 100); },
               "image size 70x100 (HxW) is not a multiple of the patch size 14");
  expect_error([&] { s.push_frame(Tensor({1, 70, 112})); }, "image must have shape [3, H, W], got [1, 70, 112]");
  // Values: RGB in [0, 1]. A refused frame leaves the session as it was (frame 0 is still to come).
  std::vector<float> bad_values = img;
  bad_values[5] = NAN;
  bad_values[9] = INFINITY;
  expect_error([&] { s.push_frame(bad_values.data(), 70, 112); },
               "frame 0: 2 of its 23520 values are not finite (NaN or inf); frames are RGB in [0, 1]");
  std::vector<float> bytes(img.size(), 128.0f);
  bytes[0] = 0;
  bytes[1] = 255;
  expect_error([&] { s.push_frame(bytes.data(), 70, 112); },
               "frame 0: values from 0 to 255 are outside [0, 1], the range of RGB frames (8-bit values? divide by 255)");
  std::vector<float> normalised(img.size(), -1.8f);
  expect_error([&] { s.push_frame(normalised.data(), 70, 112); },
               "frame 0: values from -1.8 to 0 are outside [0, 1], the range of RGB frames");
  EXPECT_EQ(s.frames_pushed(), 0);
  s.push_frame(img.data(), 70, 112);
  expect_error([&] { s.push_frame(img.data(), 56, 112); },
               "frame 1 has size 56x112 (HxW), but this sequence's frames are 70x112 (call reset() to start a new "
               "sequence)");
  s.finish();
  expect_error([&] { s.push_frame(img.data(), 70, 112); },
               "a frame pushed after finish(): the session has finished its sequence (call reset() to start a new one)");
  expect_error([&] { s.finish(); },
               "finish() called twice: the session has finished its sequence (call reset() to start a new one)");

  SessionOptions bad = tiny_options();
  bad.keyframe_interval = 0;
  expect_error([&] { Session x(model_, bad); }, "keyframe_interval must be >= 1, got 0");
  bad = tiny_options();
  bad.scale_frames = -2;
  expect_error([&] { Session x(model_, bad); }, "scale_frames must be >= 1, got -2");
  bad = tiny_options();
  bad.threads = -1;
  expect_error([&] { Session x(model_, bad); }, "threads must be >= 0, got -1");
  // Refused at construction, as run refuses them (they failed at the first push, naming internals).
  bad = tiny_options();
  bad.kv_window = 1 << 30;
  expect_error([&] { Session x(model_, bad); }, "kv_window must be at most 1048576, got 1073741824");
  bad = tiny_options();
  bad.threads = 100000;
  expect_error([&] { Session x(model_, bad); }, "threads must be at most 4096, got 100000");
  bad = tiny_options();
  bad.max_special_frames = INT64_MAX;  // kv_window + it overflowed
  expect_error([&] { Session x(model_, bad); },
               "max_special_frames must be in 0..1073741824 (0 = keep all), got 9223372036854775807");
  bad = tiny_options();
  bad.kv_dtype = static_cast<DType>(7);
  expect_error([&] { Session x(model_, bad); }, "kv_dtype: unknown value 7");
  bad = tiny_options();
  bad.kv_backend = static_cast<KVBackend>(7);
  expect_error([&] { Session x(model_, bad); }, "kv_backend: unknown value 7");
  bad = tiny_options();
  bad.kv_backend = KVBackend::DenseFull;
  bad.max_special_frames = 4;
  expect_error([&] { Session x(model_, bad); },
               "max_special_frames does not apply to the dense-full KV backend (it keeps every frame)");
  bad = tiny_options();
  bad.keyframe_interval = 4;
  bad.keyframe_policy = std::make_shared<IntervalKeyframes>(2);
  expect_error([&] { Session x(model_, bad); },
               "keyframe_interval 4 contradicts keyframe_policy IntervalKeyframes(2): set one of them");
  bad.keyframe_interval = 1;  // the default: the policy's interval is reported
  EXPECT_EQ(Session(model_, bad).options().keyframe_interval, 2);
}

// A moved-from Session (and WindowedSession) throws instead of dereferencing null; a block index
// out of range of the fingerprint view is refused.
TEST_F(SessionTest, MovedFromSessionsAndBadBlockIndicesAreErrors) {
  Session a(model_, tiny_options());
  a.push_frame(frame(0), H(), W());
  Session b(std::move(a));
  const std::string moved = "this Session was moved from: it can only be assigned to or destroyed";
  expect_error([&] { (void)a.closed(); }, moved);  // NOLINT(bugprone-use-after-move): what is tested
  expect_error([&] { a.push_frame(frame(1), H(), W()); }, moved);
  expect_error([&] { (void)a.stats(); }, moved);
  expect_error([&] { a.finish(); }, moved);
  EXPECT_EQ(b.frames_pushed(), 1);
  a = Session(model_, tiny_options());  // assigning gives it a state again
  EXPECT_EQ(a.frames_pushed(), 0);
  const int blocks = model_->config().aggregator.depth;
  expect_error([&] { (void)b.cache_live_bytes(-1); }, "live_bytes: block -1 out of range [0, " + std::to_string(blocks) + ")");
  expect_error([&] { (void)b.cache_live_bytes(blocks); },
               "live_bytes: block " + std::to_string(blocks) + " out of range [0, " + std::to_string(blocks) + ")");

  WindowedSession w(model_, tiny_options(), WindowedOptions{});
  WindowedSession w2(std::move(w));
  expect_error([&] { (void)w.closed(); },  // NOLINT(bugprone-use-after-move)
               "this WindowedSession was moved from: it can only be assigned to or destroyed");
  EXPECT_FALSE(w2.closed());
}

// A policy that keeps every frame and runs the test's hook while the push that asks it is running.
class HookPolicy final : public KeyframePolicy {
 public:
  explicit HookPolicy(std::function<void()> hook) : hook_(std::move(hook)) {}
  bool decides_before() const override { return false; }
  KeyframeDecision decide_after(const KeyframeQuery&, const FrameResult&) const override {
    hook_();
    return {};
  }
  std::string describe() const override { return "test hook"; }

 private:
  std::function<void()> hook_;
};

// One call at a time: a call that changes the session while a push runs, from the keyframe policy
// on the same thread or from a second thread, is refused with the exact message and changes nothing;
// the running push and the rest of the stream give the results of an undisturbed session.
TEST_F(SessionTest, ACallWhileAPushRunsIsRefusedAndChangesNothing) {
  const std::string busy = " is already running a call (one thread at a time; a keyframe policy or window "
                           "observer must not call back into its session)";
  SessionOptions o = tiny_options();
  o.keyframe_policy = std::make_shared<HookPolicy>([] {});
  Session undisturbed(model_, o);
  const auto expected = run(undisturbed, 6);

  Session* target = nullptr;
  std::vector<std::string> refused;
  auto try_call = [&](const std::function<void()>& call) {
    try {
      call();
      refused.push_back("(not refused)");
    } catch (const Error& e) {
      refused.push_back(e.what());
    }
  };
  std::function<void()> in_policy = [] {};
  o.keyframe_policy = std::make_shared<HookPolicy>([&] { in_policy(); });
  Session s(model_, o);
  target = &s;
  in_policy = [&] {  // re-entered from its own policy, on the pushing thread
    try_call([&] { target->push_frame(frame(5), H(), W()); });
    try_call([&] { target->finish(); });
    try_call([&] { target->reset(); });
    try_call([&] { target->commit_frame(); });
  };
  std::vector<FrameResult> all;
  for (int64_t i = 0; i < 3; ++i)
    for (auto& r : s.push_frame(frame(i), H(), W())) all.push_back(std::move(r));
  EXPECT_EQ(refused, (std::vector<std::string>{"Session::push_frame: this Session" + busy,
                                               "Session::finish: this Session" + busy,
                                               "Session::reset: this Session" + busy,
                                               "Session::commit_frame: this Session" + busy}));

  // From a second thread while frame 3's push waits inside its policy.
  std::promise<void> inside, release;
  std::shared_future<void> released = release.get_future().share();
  in_policy = [&] {
    inside.set_value();
    released.wait();
  };
  auto pushing = std::async(std::launch::async, [&] { return s.push_frame(frame(3), H(), W()); });
  inside.get_future().wait();
  refused.clear();
  try_call([&] { s.push_frame(frame(4), H(), W()); });
  try_call([&] { s.rollback_frame(); });
  release.set_value();
  for (auto& r : pushing.get()) all.push_back(std::move(r));
  EXPECT_EQ(refused, (std::vector<std::string>{"Session::push_frame: this Session" + busy,
                                               "Session::rollback_frame: this Session" + busy}));
  in_policy = [] {};
  for (int64_t i = 4; i < 6; ++i)
    for (auto& r : s.push_frame(frame(i), H(), W())) all.push_back(std::move(r));
  for (auto& r : s.finish()) all.push_back(std::move(r));
  EXPECT_TRUE(same_bits(all, expected));

  // WindowedSession: its observer calling back is refused the same way.
  WindowedSession* wtarget = nullptr;
  refused.clear();
  WindowObserver obs;
  obs.on_step = [&](int64_t, int64_t, int64_t, int64_t, const SessionStats&) {
    if (refused.empty()) try_call([&] { wtarget->finish(); });
  };
  WindowedSession w(model_, tiny_options(), WindowedOptions{}, obs);
  wtarget = &w;
  Tensor image({3, H(), W()});
  for (int64_t i = 0; i < 3; ++i) {
    std::memcpy(image.f32(), frame(i), image.nbytes());
    w.push_frame(image);
  }
  EXPECT_EQ(refused, (std::vector<std::string>{"WindowedSession::finish: this WindowedSession" + busy}));
  EXPECT_FALSE(w.closed());
}

// SessionOptions::stop ends the step in progress with lingbot::Stopped (no result for its frames) and
// closes the session until reset(), which gives a fresh sequence with the same results as ever.
TEST_F(SessionTest, StopFlagEndsTheStepAndClosesTheSessionUntilReset) {
  std::atomic<bool> stop{false};
  SessionOptions o = tiny_options();
  o.stop = &stop;
  Session s(model_, o);
  Session fresh(model_, tiny_options());
  const auto expected = run(fresh, 7);
  for (const int64_t stop_at : {1, 4}) {  // the push that runs the scale phase, then a streamed frame
    SCOPED_TRACE("stop at frame " + std::to_string(stop_at));
    for (int64_t i = 0; i < stop_at; ++i) s.push_frame(frame(i), H(), W());
    stop = true;
    try {
      s.push_frame(frame(stop_at), H(), W());
      ADD_FAILURE() << "no Stopped";
    } catch (const Stopped& e) {
      EXPECT_EQ(std::string(e.what()), "stopped by the caller (SessionOptions::stop)");
    }
    EXPECT_TRUE(s.closed());
    stop = false;
    expect_error([&] { s.push_frame(frame(0), H(), W()); },
                 "the session has ended its sequence at a step that failed or was stopped (call reset() to start a new one)");
    expect_error([&] { s.finish(); },
                 "the session has ended its sequence at a step that failed or was stopped (call reset() to start a new one)");
    s.reset();
    EXPECT_FALSE(s.closed());
    EXPECT_TRUE(same_bits(run(s, 7), expected));
    s.reset();
  }
  // A short stream's scale phase, run by finish(), stops the same way.
  s.push_frame(frame(0), H(), W());
  stop = true;
  EXPECT_THROW(s.finish(), Stopped);
  EXPECT_TRUE(s.closed());
}

// SessionOptions::step_progress: the start and every block of every step, then every frame's heads, in order; the
// results do not change; an exception it throws fails the step like any error.
TEST_F(SessionTest, StepProgressReportsEveryBlockAndFrameOfEveryStep) {
  std::vector<std::string> events;
  SessionOptions o = tiny_options();
  o.step_progress = [&events](const StepProgress& p) {
    events.push_back(std::to_string(p.frames) + (p.stage == StepProgress::Stage::Aggregator ? " block " : " heads ") +
                     std::to_string(p.done) + "/" + std::to_string(p.total));
  };
  Session s(model_, o);
  Session plain(model_, tiny_options());
  EXPECT_TRUE(same_bits(run(s, 4), run(plain, 4)));
  const int64_t depth = model_->config().aggregator.depth;
  ASSERT_GE(depth, 2);
  std::vector<std::string> expected;
  for (const int64_t frames : {2, 1, 1}) {  // the scale phase (frames 0 and 1), then frames 2 and 3
    for (int64_t b = 0; b <= depth; ++b)
      expected.push_back(std::to_string(frames) + " block " + std::to_string(b) + "/" + std::to_string(depth));
    for (int64_t f = 1; f <= frames; ++f)
      expected.push_back(std::to_string(frames) + " heads " + std::to_string(f) + "/" + std::to_string(frames));
  }
  EXPECT_EQ(events, expected);

  SessionOptions camera_only = tiny_options();
  camera_only.depth_head = false;
  events.clear();
  camera_only.step_progress = o.step_progress;
  Session c(model_, camera_only);
  c.push_frame(frame(0), H(), W());
  c.push_frame(frame(1), H(), W());
  EXPECT_EQ(events.back(), "2 heads 2/2");  // the camera head runs the step's frames at once
  EXPECT_EQ(events.size(), static_cast<size_t>(depth + 2));

  SessionOptions throwing = tiny_options();
  throwing.step_progress = [](const StepProgress& p) {
    if (p.stage == StepProgress::Stage::Aggregator && p.done == 2) throw Error("progress display failed");
  };
  Session t(model_, throwing);
  t.push_frame(frame(0), H(), W());
  expect_error([&] { t.push_frame(frame(1), H(), W()); }, "progress display failed");
  EXPECT_TRUE(t.closed());
}

// A policy that stores every frame (as keyframe_interval 1) and runs the test's hook when the push
// asks it about a frame: after that frame's encoder ran, before the step's aggregator blocks.
class BeforeBlocksHookPolicy final : public KeyframePolicy {
 public:
  explicit BeforeBlocksHookPolicy(std::function<void(int64_t)> hook) : hook_(std::move(hook)) {}
  bool decides_before() const override { return true; }
  bool is_keyframe(const KeyframeQuery& q) const override {
    hook_(q.frame_index);
    return true;
  }
  std::string describe() const override { return "test hook before the blocks"; }

 private:
  std::function<void(int64_t)> hook_;
};

// A stop in the middle of a step leaves nothing behind that reset() does not clear. The flag is set
// from inside frame 3's push, by its keyframe policy: the frame is encoded by then, and the next
// check is the first aggregator block, after the KV cache began the step (aggregator.cpp), so the
// stop lands there on every machine (a thread sleeping part of a measured step could land before it).
TEST_F(SessionTest, StopInTheMiddleOfAStepThenResetGivesTheSameResults) {
  Session fresh(model_, tiny_options());
  const auto expected = run(fresh, 7);
  std::atomic<bool> stop{false};
  int64_t asked_about_3 = 0;
  SessionOptions o = tiny_options();
  o.stop = &stop;
  o.keyframe_policy = std::make_shared<BeforeBlocksHookPolicy>([&](int64_t frame_index) {
    if (frame_index == 3 && asked_about_3++ == 0) stop = true;  // once: the run after reset() goes through
  });
  Session s(model_, o);
  for (int64_t i = 0; i < 3; ++i) s.push_frame(frame(i), H(), W());
  const SessionStats before = s.stats();
  ASSERT_EQ(before.cache.frames_stored, 3);
  try {
    s.push_frame(frame(3), H(), W());
    ADD_FAILURE() << "no Stopped";
  } catch (const Stopped& e) {
    EXPECT_EQ(std::string(e.what()), "stopped by the caller (SessionOptions::stop)");
  }
  EXPECT_EQ(asked_about_3, 1);  // the flag came from inside the step
  EXPECT_TRUE(s.closed());
  EXPECT_EQ(s.frames_pushed(), 4);  // frame 3 was taken: the stop came after its encoder
  // The stopped step stored no frame as far as stats() says (its partial cache is not counted), and
  // completed no step.
  const SessionStats after = s.stats();
  EXPECT_EQ(after.steps, before.steps);
  EXPECT_EQ(after.frames_completed, 3);
  EXPECT_EQ(after.cache.frames_stored, 3);
  EXPECT_EQ(after.cache.bytes_used, before.cache.bytes_used);
  EXPECT_EQ(after.camera_cache_frames, before.camera_cache_frames);
  EXPECT_EQ(after.rope_time_next, 3);
  stop = false;
  s.reset();
  EXPECT_EQ(s.stats().cache.frames_stored, 0);
  EXPECT_TRUE(same_bits(run(s, 7), expected));
  EXPECT_EQ(asked_about_3, 2);
}

TEST_F(SessionTest, HeadsCanBeSwitchedOff) {
  SessionOptions o = tiny_options();
  o.camera_head = false;
  o.keep_features = false;
  Session s(model_, o);
  auto r = run(s, 3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(r[2].features.empty());
  EXPECT_TRUE(r[2].pose_enc.empty());
  EXPECT_TRUE(r[2].world_points.empty());  // needs the camera
  EXPECT_EQ(r[2].depth.shape(), (Shape{70, 112}));
  EXPECT_EQ(s.stats().camera_cache_frames, 0);
  o.camera_head = true;
  o.depth_head = false;
  o.camera_iterations = 2;
  Session c(model_, o);
  r = run(c, 3);
  EXPECT_EQ(r[2].pose_enc_iters.shape(), (Shape{2, 9}));
  EXPECT_TRUE(r[2].depth.empty());
}

TEST_F(SessionTest, PyTorchCheckpointGivesTheSameResults) {
  // model.pt holds the same values as weights.safetensors (f32 vs exact f16).
  auto pt = Model::load(std::string(LINGBOT_TESTDATA_DIR) + "/tiny/model.pt");
  Session a(model_, tiny_options()), b(pt, tiny_options());
  EXPECT_TRUE(same_bits(run(a, 4), run(b, 4)));
}

TEST_F(SessionTest, OverridesInconsistentWithTheCheckpointAreRejected) {
  const std::string path = std::string(LINGBOT_TESTDATA_DIR) + "/tiny/weights.safetensors";
  // 3 heads do not divide the aggregator width 128; layer 7 does not exist in a depth-4 trunk.
  expect_error([&] { Model::load(path, {{"aggregator.num_heads", "3"}}); },
               "invalid model config:\n  aggregator.num_heads 3 must divide aggregator.embed_dim 128");
  expect_error([&] { Model::load(path, {{"aggregator.selected_layers", "0,1,2,7"}}); },
               "invalid model config:\n  aggregator.selected_layers entry 7 out of range [0, 4)");
  // The encoder implements upstream's resampling only (offset 0, antialiased).
  expect_error([&] { Model::load(path, {{"encoder.interpolate_offset", "0.1"}}); },
               "encoder: only interpolate_offset 0 with antialiased resampling is supported, got offset 0.1, "
               "antialias true");
}

}  // namespace

TEST_F(SessionTest, DeviceIsResolvedAndAMissingCudaIsNamed) {
  EXPECT_EQ(parse_device("auto"), Device::Auto);
  EXPECT_EQ(device_name(Device::Cuda), "cuda");
  expect_error([] { (void)parse_device("gpu"); }, "unknown device 'gpu' (expected auto, cpu or cuda)");
  SessionOptions o = tiny_options();
  o.device = Device::Auto;
  {
    Session s(model_, o);
    EXPECT_EQ(s.options().device, cuda_device_count() > 0 ? Device::Cuda : Device::Cpu);
    if (s.options().device == Device::Cpu) {
      EXPECT_EQ(s.device_description(), "cpu (" + std::to_string(s.options().threads) +
                                             (s.options().threads == 1 ? " thread)" : " threads)"));
    }
  }
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: device cuda is valid here";
  o.device = Device::Cuda;
  std::string why_none;
  cuda_device_count(&why_none);
  expect_error([&] { Session s(model_, o); },
               cuda_compiled() ? "device cuda: no CUDA device is visible (cudaGetDeviceCount: " + why_none + ")"
                               : "device cuda: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)");
}
