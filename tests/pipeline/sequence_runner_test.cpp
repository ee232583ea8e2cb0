// SequenceRunner (pipeline/sequence_runner.h): the one interface run and the Python module drive a
// Session or a WindowedSession through gives what each gives alone, bit for bit, and reset() starts a
// sequence that repeats the first (windowed: a new WindowedSession, which has no reset of its own).
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "lingbot/windowed.h"
#include "pipeline/sequence_runner.h"
#include "tiny_model_fixture.h"

namespace {

using namespace lingbot;

class SequenceRunnerTest : public test::TinyModelTest {
 protected:
  static SessionOptions options() { return short_window_options(); }
  static WindowedOptions window() {
    WindowedOptions w;
    w.window_size = 4;
    w.overlap_size = 2;
    return w;
  }
  // Every result of a whole sequence, with what the scale-phase predicates said before each call.
  struct Run {
    std::vector<FrameResult> results;
    std::vector<bool> push_scale, finish_scale;
  };
  Run run(SequenceRunner& r) {
    Run out;
    for (int64_t i = 0; i < frames(); ++i) {
      out.push_scale.push_back(r.push_runs_scale_phase());
      for (auto& x : r.push_frame(frame(i))) out.results.push_back(std::move(x));
    }
    out.finish_scale.push_back(r.finish_runs_scale_phase());
    for (auto& x : r.finish()) out.results.push_back(std::move(x));
    return out;
  }
  template <class Engine>
  std::vector<FrameResult> run(Engine& e) {
    std::vector<FrameResult> out;
    for (int64_t i = 0; i < frames(); ++i)
      for (auto& x : e.push_frame(frame(i))) out.push_back(std::move(x));
    for (auto& x : e.finish()) out.push_back(std::move(x));
    return out;
  }
  static void expect_same(const std::vector<FrameResult>& a, const std::vector<FrameResult>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].frame_index, b[i].frame_index) << i;
      for (const auto& [x, y] : {std::pair{&a[i].depth, &b[i].depth}, std::pair{&a[i].extrinsic, &b[i].extrinsic}}) {
        ASSERT_EQ(x->numel(), y->numel()) << i;
        EXPECT_EQ(std::memcmp(x->f32(), y->f32(), static_cast<size_t>(x->numel()) * sizeof(float)), 0) << i;
      }
    }
  }
};

TEST_F(SequenceRunnerTest, StreamingIsTheSession) {
  SequenceRunner runner(model_, options(), std::nullopt);
  Session alone(model_, options());
  EXPECT_FALSE(runner.windowed());
  EXPECT_TRUE(runner.windows().empty());
  EXPECT_EQ(runner.overlap(), 0);
  const Run r = run(runner);
  expect_same(r.results, run(alone));
  ASSERT_GE(r.push_scale.size(), 3u);
  // The 2nd push runs the scale phase of 2 frames, no other; finish() has none left to run.
  EXPECT_FALSE(r.push_scale[0]);
  EXPECT_TRUE(r.push_scale[1]);
  for (size_t i = 2; i < r.push_scale.size(); ++i) EXPECT_FALSE(r.push_scale[i]) << i;
  EXPECT_FALSE(r.finish_scale[0]);
  EXPECT_EQ(runner.frames_pushed(), frames());
  EXPECT_EQ(runner.stats().frames_completed, alone.stats().frames_completed);
  EXPECT_EQ(runner.options().scale_frames, 2);
  EXPECT_TRUE(runner.finish_early().empty());  // streaming holds nothing back
  runner.reset();
  expect_same(run(runner).results, r.results);
}

TEST_F(SequenceRunnerTest, WindowedIsTheWindowedSessionAndResetRepeatsIt) {
  SequenceRunner runner(model_, options(), window());
  WindowedSession alone(model_, options(), window());
  EXPECT_TRUE(runner.windowed());
  EXPECT_EQ(runner.overlap(), 2);
  const Run r = run(runner);
  expect_same(r.results, run(alone));
  EXPECT_EQ(runner.windows().size(), alone.windows().size());
  EXPECT_GT(runner.windows().size(), 1u) << "the tiny sequence should span several windows";
  EXPECT_TRUE(runner.closed());  // a WindowedSession ends with finish()
  runner.reset();
  EXPECT_FALSE(runner.closed());
  EXPECT_EQ(runner.frames_pushed(), 0);
  expect_same(run(runner).results, r.results);
}

}  // namespace
