// WindowedSession beyond the golden cases (verify_test.cpp compares those with the reference): a
// single window equals the streaming Session up to the warp's quaternion re-encoding, frames come out
// streamed (each exactly once, in order, at most `overlap` frames behind the input), windows chain,
// and the option checks name the field.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <map>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "tiny_model_fixture.h"
#include "lingbot/windowed.h"
#include "test_errors.h"

namespace {

using namespace lingbot;

using lingbot_test::expect_error;

class WindowedTest : public test::TinyModelTest {
 protected:
  static SessionOptions options() { return short_window_options(); }
  static double max_diff(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.numel(), b.numel());
    double d = 0;
    for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::abs(double(a.f32()[i]) - b.f32()[i]));
    return d;
  }
};

TEST_F(WindowedTest, OneWindowEqualsTheStreamingSession) {
  Session plain(model_, options());
  WindowedOptions w;
  w.window_size = 50;  // longer than the sequence: one window
  WindowedSession win(model_, options(), w);
  std::vector<FrameResult> a, b;
  for (int64_t i = 0; i < frames(); ++i) {
    for (auto& r : plain.push_frame(frame(i))) a.push_back(std::move(r));
    for (auto& r : win.push_frame(frame(i))) b.push_back(std::move(r));
  }
  for (auto& r : plain.finish()) a.push_back(std::move(r));
  for (auto& r : win.finish()) b.push_back(std::move(r));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(win.windows().size(), 1u);
  EXPECT_EQ(win.windows()[0].end, frames());
  EXPECT_EQ(win.windows()[0].scale, 1.0f);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].frame_index, b[i].frame_index);
    EXPECT_EQ(a[i].frame_type, b[i].frame_type);
    EXPECT_EQ(std::memcmp(a[i].depth.f32(), b[i].depth.f32(), a[i].depth.nbytes()), 0);  // s = 1 exactly
    EXPECT_LE(max_diff(a[i].extrinsic, b[i].extrinsic), 1e-6);  // the quaternion is only re-encoded
    EXPECT_LE(max_diff(a[i].world_points, b[i].world_points), 1e-5);
    // The warped quaternion is unit length with w >= 0.
    const float* q = b[i].pose_enc.f32() + 3;
    EXPECT_NEAR(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3], 1.0, 1e-5);
    EXPECT_GE(q[3], 0.0f);
  }
}

// A window stores at most window_size frames: a KV window beyond what it can fill besides its pinned
// scale frames (windowed_kv_window) reserves nothing more and changes no result. The premise is
// checked on plain Sessions over one window's frames (the clamped and the asked-for KV window give
// the same bits, with the scale frames pinned or not), then the windowed sessions' memory.
TEST_F(WindowedTest, AKvWindowBeyondTheWindowReservesNoMoreAndChangesNothing) {
  WindowedOptions w;
  w.window_size = 4;
  w.overlap_size = 2;
  for (const bool pinned : {true, false}) {
    SCOPED_TRACE(pinned ? "scale frames pinned" : "scale frames not pinned");
    SessionOptions o = options();  // scale_frames 2
    o.include_scale_frames = pinned;
    const int clamped = windowed_kv_window(64, pinned ? o.scale_frames : 0, w);
    EXPECT_EQ(clamped, pinned ? 2 : 4);
    std::vector<std::vector<FrameResult>> out;
    for (const int kv_window : {clamped, 64}) {
      o.kv_window = kv_window;
      Session s(model_, o);
      std::vector<FrameResult> rows;
      for (int64_t i = 0; i < w.window_size; ++i)  // one window: interval 1 stores every frame
        for (auto& r : s.push_frame(frame(i))) rows.push_back(std::move(r));
      for (auto& r : s.finish()) rows.push_back(std::move(r));
      out.push_back(std::move(rows));
    }
    ASSERT_EQ(out[0].size(), out[1].size());
    for (size_t i = 0; i < out[0].size(); ++i) {
      EXPECT_EQ(std::memcmp(out[0][i].depth.f32(), out[1][i].depth.f32(), out[0][i].depth.nbytes()), 0) << i;
      EXPECT_EQ(std::memcmp(out[0][i].pose_enc.f32(), out[1][i].pose_enc.f32(), out[0][i].pose_enc.nbytes()), 0) << i;
    }
    // The windowed sessions: the same cache whatever KV window beyond it is asked for, which
    // options() still reports.
    std::vector<int64_t> reserved;
    for (const int kv_window : {clamped, 64}) {
      o.kv_window = kv_window;
      WindowedSession win(model_, o, w);
      for (int64_t i = 0; i < frames(); ++i) win.push_frame(frame(i));
      win.finish();
      ASSERT_GE(win.windows().size(), 2u);
      reserved.push_back(win.windows()[0].cache.bytes_reserved);
      EXPECT_EQ(win.options().kv_window, kv_window);
    }
    EXPECT_EQ(reserved[0], reserved[1]);
  }
  EXPECT_EQ(windowed_kv_window(0, 2, WindowedOptions{}), 0);  // out of range: as given, for the options check
  EXPECT_EQ(windowed_kv_window(kMaxKvWindow + 1, 2, WindowedOptions{}), kMaxKvWindow + 1);
  EXPECT_EQ(windowed_kv_window(100, 8, WindowedOptions{}), 56);
  WindowedOptions tiny;
  tiny.window_size = 3;
  EXPECT_EQ(windowed_kv_window(100, 8, tiny), 1);
}

// Fixed windows of 4 stored frames, overlap 2 -> [0,4) [2,6) [4,8) [6,10); flow windows end on keyframes.
TEST_F(WindowedTest, FramesAreStreamedOnceInOrderAtMostOverlapBehind) {
  for (bool flow : {false, true}) {
    SCOPED_TRACE(flow ? "flow" : "interval");
    SessionOptions o = options();
    if (flow) o.keyframe_policy = std::make_shared<FlowKeyframes>(1e9, 2);  // keyframes only by the gap rule
    WindowedOptions w;
    w.window_size = 4;
    w.overlap_size = 2;
    std::vector<int64_t> steps_per_window;
    WindowObserver obs;
    obs.on_step = [&](int64_t window, int64_t, int64_t, int64_t, const SessionStats&) {
      if (static_cast<int64_t>(steps_per_window.size()) <= window) steps_per_window.resize(window + 1, 0);
      ++steps_per_window[static_cast<size_t>(window)];
    };
    WindowedSession s(model_, o, w, obs);
    int64_t next = 0;
    for (int64_t i = 0; i < frames(); ++i) {
      for (const FrameResult& r : s.push_frame(frame(i))) EXPECT_EQ(r.frame_index, next++);
      if (i >= 1) {
        EXPECT_GE(next, i + 1 - s.overlap()) << "after frame " << i;
      }
    }
    for (const FrameResult& r : s.finish()) EXPECT_EQ(r.frame_index, next++);
    EXPECT_EQ(next, frames());
    const auto& win = s.windows();
    ASSERT_GE(win.size(), 2u);
    for (size_t k = 1; k < win.size(); ++k) {
      EXPECT_EQ(win[k].start, win[k - 1].end - 2) << "window " << k;  // overlap of exactly ov frames
      EXPECT_TRUE(win[k].aligned);
    }
    EXPECT_EQ(win.back().end, frames());
    if (!flow) {
      ASSERT_EQ(win.size(), 4u);
      for (size_t k = 0; k < 4; ++k) EXPECT_EQ(win[k].start, static_cast<int64_t>(2 * k));
    }
    // Every window starts with its scale phase (one forward call for 2 frames) and then one call per row.
    for (size_t k = 0; k < win.size(); ++k)
      EXPECT_EQ(steps_per_window[k], win[k].end - win[k].start - 1) << "window " << k;
  }
}

// A row comes out as soon as its window is aligned and it is not in the overlap the next window
// begins with: the "at most overlap behind" bound above also holds for a session that always holds
// back `overlap` rows, which the exact schedule does not.
TEST_F(WindowedTest, RowsComeOutAsSoonAsTheirWindowIsAligned) {
  WindowedOptions w;
  w.window_size = 5;
  w.overlap_size = 2;
  WindowedSession s(model_, options(), w);
  ASSERT_EQ(frames(), 10);
  std::vector<std::vector<int64_t>> got;
  const auto indices = [](const std::vector<FrameResult>& rows) {
    std::vector<int64_t> out;
    for (const FrameResult& r : rows) out.push_back(r.frame_index);
    return out;
  };
  for (int64_t i = 0; i < frames(); ++i) got.push_back(indices(s.push_frame(frame(i))));
  got.push_back(indices(s.finish()));
  // Window 0 = frames 0-4: its scale phase gives 0 and 1, frame 2 follows; 3 and 4 are the overlap
  // window 1 (frames 3-7) begins with, out with its first row (5) once it is aligned; and so on.
  const std::vector<std::vector<int64_t>> want = {{}, {0, 1}, {2}, {}, {}, {3, 4, 5}, {}, {}, {6, 7, 8}, {}, {9}};
  EXPECT_EQ(got, want);
}

// Windows whose overlap holds no frame that is a keyframe in both windows (interval 2 with an
// overlap of one frame: it is a keyframe in one of them) are aligned on the overlap's first frame,
// as upstream: the anchor's camera in the new window maps exactly onto its camera in window 0's frame.
TEST_F(WindowedTest, AnOverlapWithoutSharedKeyframesIsAlignedOnItsFirstFrame) {
  SessionOptions o = options();
  o.keyframe_interval = 2;
  WindowedOptions w;
  w.window_size = 3;
  w.overlap_size = 1;
  std::map<std::pair<int64_t, int64_t>, std::array<float, 3>> raw_centre;  // (window, frame) -> camera centre
  WindowObserver obs;
  obs.on_row = [&](int64_t window, int64_t, const FrameResult& r) {
    raw_centre[{window, r.frame_index}] = {r.pose_enc.f32()[0], r.pose_enc.f32()[1], r.pose_enc.f32()[2]};
  };
  WindowedSession s(model_, o, w, obs);
  std::vector<FrameResult> out;
  for (int64_t i = 0; i < frames(); ++i)
    for (FrameResult& r : s.push_frame(frame(i))) out.push_back(std::move(r));
  for (FrameResult& r : s.finish()) out.push_back(std::move(r));
  ASSERT_EQ(static_cast<int64_t>(out.size()), frames());
  const auto& win = s.windows();
  ASSERT_EQ(win.size(), 3u);  // frames 0-3, 3-6, 6-9
  // x -> scale * R x + t, transform = [[R, t], [0, 1]] row-major: a window's raw camera centre in
  // window 0's frame.
  const auto in_window0 = [&](size_t k, int64_t f) {
    EXPECT_EQ(raw_centre.count({static_cast<int64_t>(k), f}), 1u) << "window " << k << " frame " << f;
    const std::array<float, 3> c = raw_centre[{static_cast<int64_t>(k), f}];
    std::array<double, 3> x{};
    for (int r = 0; r < 3; ++r) {
      const float* row = &win[k].transform[static_cast<size_t>(r) * 4];
      x[static_cast<size_t>(r)] = win[k].scale * (row[0] * c[0] + row[1] * c[1] + row[2] * c[2]) + row[3];
    }
    return x;
  };
  for (size_t k = 1; k < win.size(); ++k) {
    SCOPED_TRACE("window " + std::to_string(k));
    ASSERT_TRUE(win[k].aligned);
    const int64_t anchor = win[k].start;  // the overlap's only frame
    const std::array<double, 3> want = in_window0(k - 1, anchor), got = in_window0(k, anchor);
    double size = 1e-6;
    for (double v : want) size = std::max(size, std::abs(v));
    for (size_t r = 0; r < 3; ++r) EXPECT_NEAR(got[r], want[r], 1e-4 * size) << "coordinate " << r;
    const std::array<float, 3> delivered = {out[static_cast<size_t>(anchor)].pose_enc.f32()[0],
                                            out[static_cast<size_t>(anchor)].pose_enc.f32()[1],
                                            out[static_cast<size_t>(anchor)].pose_enc.f32()[2]};
    for (size_t r = 0; r < 3; ++r) EXPECT_NEAR(delivered[r], want[r], 1e-4 * size) << "delivered, coordinate " << r;
  }
}

// A push that throws (here: stopped by SessionOptions::stop) closes the windowed session for good,
// also when the next push would start a new window (whose reset() would otherwise reopen it).
TEST_F(WindowedTest, AStoppedStepClosesItForGood) {
  std::atomic<bool> stop{false};
  SessionOptions o = options();
  o.stop = &stop;
  WindowedOptions w;
  w.window_size = 4;
  w.overlap_size = 1;
  WindowedSession win(model_, o, w);
  for (int64_t i = 0; i < 4; ++i) win.push_frame(frame(i));  // the first window is full
  stop = true;
  expect_error<Stopped>([&] { win.push_frame(frame(4)); }, "stopped by the caller (SessionOptions::stop)");
  EXPECT_EQ(win.frames_pushed(), 4);  // stopped before its encoding: not taken, as a Session counts it
  stop = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      win.push_frame(frame(4));
      ADD_FAILURE() << "the windowed session took a frame after a stopped step";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "the windowed session has ended its sequence at a step that failed or was stopped");
    }
  }
  expect_error<Error>([&] { win.finish(); },
                           "the windowed session has ended its sequence at a step that failed or was stopped");
  // Window 1 was begun, but the stop came before its first row: it ends where it starts.
  const std::vector<FrameResult> tail = win.finish_early();
  ASSERT_EQ(win.windows().size(), 2u);
  EXPECT_EQ(win.windows()[1].end, win.windows()[1].start);
  EXPECT_FALSE(tail.empty());  // window 0's rows held back for the overlap
  EXPECT_TRUE(win.closed());
}

// A stop in the push that begins a window, after the overlap's re-fed frames already ran (and could
// be aligned), loses no frame: finish_early() returns every frame computed and not yet returned,
// each once (the rows aligned before the stopped step were returned from a push that threw: lost).
TEST_F(WindowedTest, AStopWhileAWindowBeginsLosesNoFrame) {
  std::atomic<bool> stop{false};
  SessionOptions o = options();
  o.stop = &stop;
  WindowedOptions w;
  w.window_size = 4;
  w.overlap_size = 2;  // = the scale frames: the re-feed runs window 1's scale phase by itself
  WindowObserver obs;
  obs.on_step = [&](int64_t window, int64_t, int64_t, int64_t, const SessionStats&) {
    if (window == 1) stop = true;  // after the re-feed: the new frame's step is the one stopped
  };
  WindowedSession win(model_, o, w, obs);
  std::vector<int64_t> seen;
  for (int64_t i = 0; i < 4; ++i)
    for (const FrameResult& r : win.push_frame(frame(i))) seen.push_back(r.frame_index);
  expect_error<Stopped>([&] { win.push_frame(frame(4)); }, "stopped by the caller (SessionOptions::stop)");
  for (const FrameResult& r : win.finish_early()) {
    seen.push_back(r.frame_index);
    EXPECT_FALSE(r.depth.empty());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));
}

// next_push_runs_scale_phase() / finish_runs_scale_phase() say which call runs a window's scale phase
// (its session's first step, RoPE time 0), whether the overlap re-feed or the new frame completes it,
// and finish() for a last window shorter than the scale frames.
TEST_F(WindowedTest, ScalePhasePredictionsMatchTheStepsRun) {
  int scale_phases_seen = 0, finish_scale_phases = 0;
  for (int K : {2, 3})
    for (int ov : {1, 2, 3})
      for (bool flow : {false, true})
        for (int64_t n : {frames() - 1, frames()}) {
          SCOPED_TRACE("K " + std::to_string(K) + " overlap " + std::to_string(ov) + (flow ? " flow" : " interval") +
                       " frames " + std::to_string(n));
          SessionOptions o = options();
          o.scale_frames = K;
          if (flow) o.keyframe_policy = std::make_shared<FlowKeyframes>(1e9, 2);
          WindowedOptions w;
          w.window_size = 5;
          w.overlap_size = ov;
          bool scale_phase = false;
          WindowObserver obs;
          obs.on_step = [&](int64_t, int64_t, int64_t, int64_t rope_time_start, const SessionStats&) {
            scale_phase = scale_phase || rope_time_start == 0;
          };
          WindowedSession win(model_, o, w, obs);
          try {
            check_windowed_options(w, win.options());
          } catch (const Error&) {
            continue;  // these windows cannot overlap by ov
          }
          for (int64_t i = 0; i < n; ++i) {
            const bool predicted = win.next_push_runs_scale_phase();
            scale_phase = false;
            win.push_frame(frame(i));
            EXPECT_EQ(predicted, scale_phase) << "push " << i;
            scale_phases_seen += scale_phase ? 1 : 0;
          }
          const bool predicted = win.finish_runs_scale_phase();
          scale_phase = false;
          win.finish();
          EXPECT_EQ(predicted, scale_phase) << "finish";
          finish_scale_phases += scale_phase ? 1 : 0;
          EXPECT_FALSE(win.next_push_runs_scale_phase());
          EXPECT_FALSE(win.finish_runs_scale_phase());
        }
  EXPECT_GT(scale_phases_seen, 20);
  EXPECT_GT(finish_scale_phases, 0) << "no case ended with a window shorter than its scale frames";
}

// A last window shorter than the scale frames runs its scale phase in finish(); stopped there,
// finish_early() still returns the previous window's tail held back for the overlap.
TEST_F(WindowedTest, FinishEarlyAfterAStoppedFinishReturnsTheHeldBackTail) {
  std::atomic<bool> stop{false};
  SessionOptions o = options();
  o.scale_frames = 3;
  o.stop = &stop;
  WindowedOptions w;
  w.window_size = 5;
  w.overlap_size = 1;
  WindowedSession win(model_, o, w);
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 6; ++i)  // window 0 = frames 0-4; frame 5 starts window 1 at frame 4
    for (const FrameResult& r : win.push_frame(frame(i))) got.push_back(r.frame_index);
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 3}));  // frame 4 is held back for the overlap
  stop = true;
  expect_error<Stopped>([&] { win.finish(); }, "stopped by the caller (SessionOptions::stop)");  // window 1 has 2 of 3 scale frames: its scale phase runs here
  stop = false;
  const std::vector<FrameResult> tail = win.finish_early();
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].frame_index, 4);
  EXPECT_EQ(tail[0].window_index, 0);
  expect_error<Error>([&] { win.push_frame(frame(6)); },
                           "the windowed session has ended its sequence at a step that failed or was stopped");
}

TEST_F(WindowedTest, OptionChecksNameTheField) {
  auto expect_error = [&](const SessionOptions& o, const WindowedOptions& w, const std::string& msg) {
    try {
      SessionOptions resolved = Session(model_, o).options();
      check_windowed_options(w, resolved);
      ADD_FAILURE() << "expected: " << msg;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
    // A field error: the session refuses the options at construction, with the same message.
    if (w.window_size < 1 || w.overlap_size.value_or(0) < 0 || w.overlap_keyframes.value_or(1) < 1 ||
        (w.overlap_size && w.overlap_keyframes)) {
      try {
        WindowedSession s(model_, o, w);
        ADD_FAILURE() << "the session took options its check refuses: " << msg;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), msg);
      }
      return;
    }
    // A session with these options runs a sequence that fits in one window (4 frames), and stops with
    // the same error when a second window would begin.
    WindowedSession s(model_, o, w);
    for (int64_t i = 0; i < 4; ++i) s.push_frame(frame(i));
    try {
      for (int64_t i = 4; i < frames(); ++i) s.push_frame(frame(i));
      ADD_FAILURE() << "expected at the second window: " << msg;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  };
  WindowedOptions w;
  w.window_size = 4;
  w.overlap_size = 4;
  expect_error(options(), w,
               "overlap_size 4 must be smaller than a window (4 frames: scale_frames 2 + (window_size 4 - 2) "
               "keyframes x keyframe_interval 1)");
  w.overlap_size = -1;
  expect_error(options(), w, "overlap_size must be >= 0, got -1");
  w.overlap_size = 3;
  SessionOptions flow = options();
  flow.keyframe_policy = std::make_shared<FlowKeyframes>(5.0, 3);
  expect_error(flow, w,
               "window_size 4 must be at least overlap_size 3 + scale_frames 2 with keyframes chosen while "
               "running (keyframe_interval 'flow'), or consecutive windows would not overlap by it");
  w.overlap_keyframes = 1;
  expect_error(options(), w, "set overlap_size or overlap_keyframes, not both");
  w.overlap_size.reset();
  w.overlap_keyframes = 0;
  expect_error(options(), w,
               "overlap_keyframes must be >= 1 (the overlap is at least the scale frames; no "
               "overlap: overlap_size = 0), got 0");
  w.overlap_keyframes.reset();
  w.window_size = 0;
  expect_error(options(), w, "window_size must be >= 1, got 0");
}

// overlap_keyframes in frames: max(scale frames, N x interval), the interval policy's interval, and
// with flow keyframes keyframe_interval as upstream converts it there too (run passes 1 with flow).
TEST_F(WindowedTest, OverlapKeyframesConvertWithTheIntervalAsUpstream) {
  SessionOptions o = options();
  o.keyframe_policy = std::make_shared<FlowKeyframes>(5.0, 3);
  WindowedOptions w;
  w.window_size = 8;
  w.overlap_keyframes = 3;
  EXPECT_EQ(WindowedSession(model_, o, w).overlap(), 3);
  w.overlap_keyframes = 1;
  EXPECT_EQ(WindowedSession(model_, o, w).overlap(), 2);  // at least the scale frames
  o.keyframe_interval = 4;
  EXPECT_EQ(WindowedSession(model_, o, w).overlap(), 4);
  o.keyframe_policy = std::make_shared<IntervalKeyframes>(2);
  o.keyframe_interval = 1;  // 4 would contradict the policy's 2
  w.overlap_keyframes = 3;
  EXPECT_EQ(WindowedSession(model_, o, w).overlap(), 6);
}

// Frame i cut to its first `width` columns.
Tensor narrowed(const Tensor& f, int64_t width) {
  const int64_t H = f.dim(1), W = f.dim(2);
  Tensor t({3, H, width});
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < H; ++y)
      std::memcpy(t.f32() + (c * H + y) * width, f.f32() + (c * H + y) * W, static_cast<size_t>(width) * sizeof(float));
  return t;
}

// A first frame the window's session refuses before its step (not a multiple of the patch size)
// leaves the windowed session as if it had not been pushed: the sequence then runs as in a fresh one.
TEST_F(WindowedTest, ARefusedFirstFrameLeavesItOpenAndUnchanged) {
  WindowedOptions w;
  w.window_size = 4;
  w.overlap_size = 2;
  WindowedSession fresh(model_, options(), w), win(model_, options(), w);
  const int64_t W = frame(0).dim(2);
  expect_error<Error>([&] { win.push_frame(narrowed(frame(0), W - 1)); },
                           "image size 70x111 (HxW) is not a multiple of the patch size 14");
  EXPECT_FALSE(win.closed());
  EXPECT_TRUE(win.windows().empty());
  EXPECT_EQ(win.frames_pushed(), 0);
  std::vector<FrameResult> a, b;
  for (int64_t i = 0; i < frames(); ++i) {
    for (auto& r : fresh.push_frame(frame(i))) a.push_back(std::move(r));
    for (auto& r : win.push_frame(frame(i))) b.push_back(std::move(r));
  }
  for (auto& r : fresh.finish()) a.push_back(std::move(r));
  for (auto& r : win.finish()) b.push_back(std::move(r));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].frame_index, b[i].frame_index);
    EXPECT_EQ(std::memcmp(a[i].world_points.f32(), b[i].world_points.f32(), a[i].world_points.nbytes()), 0);
  }
}

// Every frame must have the first frame's size, also the first frame of a new window (whose session
// is fresh): refused with the sequence's size, and the session goes on with frames of that size.
TEST_F(WindowedTest, AFrameOfAnotherSizeIsRefusedAlsoWhereAWindowBegins) {
  for (int overlap : {0, 2}) {
    SCOPED_TRACE("overlap " + std::to_string(overlap));
    WindowedOptions w;
    w.window_size = 4;
    w.overlap_size = overlap;
    WindowedSession win(model_, options(), w);
    int64_t next = 0;
    for (int64_t i = 0; i < 4; ++i)
      for (const FrameResult& r : win.push_frame(frame(i))) EXPECT_EQ(r.frame_index, next++);
    const int64_t H = frame(0).dim(1), W = frame(0).dim(2);
    try {
      win.push_frame(narrowed(frame(4), W - 14));
      ADD_FAILURE() << "a narrower frame was taken";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "frame 4 has size " + std::to_string(H) + "x" + std::to_string(W - 14) +
                                           " (HxW), but this sequence's frames are " + std::to_string(H) + "x" +
                                           std::to_string(W));
    }
    Tensor nan_frame = frame(4);
    nan_frame.f32()[7] = NAN;
    try {
      win.push_frame(nan_frame);
      ADD_FAILURE() << "a frame with a NaN was taken";
    } catch (const Error& e) {  // the sequence's index, not the window's
      EXPECT_EQ(std::string(e.what()), "frame 4: 1 of its " + std::to_string(nan_frame.numel()) +
                                           " values are not finite (NaN or inf); frames are RGB in [0, 1]");
    }
    EXPECT_FALSE(win.closed());
    EXPECT_EQ(win.windows().size(), 1u);  // the next window was not begun
    for (int64_t i = 4; i < frames(); ++i)
      for (const FrameResult& r : win.push_frame(frame(i))) EXPECT_EQ(r.frame_index, next++);
    for (const FrameResult& r : win.finish()) EXPECT_EQ(r.frame_index, next++);
    EXPECT_EQ(next, frames());
  }
}

}  // namespace
