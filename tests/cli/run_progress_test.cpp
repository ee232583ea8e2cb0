// run's progress rate (tools/run_progress.h RecentRate): frames per second over the last 20 s, so the
// rate and the ETA follow a run whose frames slow down; it was the average since the start (at frame
// 2,100 of a run that had slowed to 8.9 fps it printed 22.9 fps).
#include <gtest/gtest.h>

#include <chrono>

#include "run_progress.h"

namespace lingbot::cli {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RecentRate, FollowsTheLastWindowNotTheWholeRun) {
  RecentRate rate(seconds(20));
  const RecentRate::Clock::time_point t0{};
  rate.restart(t0);
  EXPECT_EQ(rate.add(t0, 0), 0.0);  // no time passed
  // 100 s at 10 fps, then 60 s at 2 fps: the last 20 s say 2 fps (the whole run's mean is 7).
  int64_t n = 0;
  for (int i = 1; i <= 1000; ++i) EXPECT_DOUBLE_EQ(rate.add(t0 + milliseconds(100 * i), ++n), 10.0) << i;
  double last = 0;
  for (int i = 1; i <= 120; ++i) last = rate.add(t0 + seconds(100) + milliseconds(500 * i), ++n);
  EXPECT_DOUBLE_EQ(last, 2.0);
  // A step of several frames at once (a scale phase) counts where it ended.
  RecentRate phase(seconds(20));
  phase.restart(t0);
  EXPECT_DOUBLE_EQ(phase.add(t0 + seconds(80), 8), 0.1);  // 8 frames in 80 s: since the start
  EXPECT_DOUBLE_EQ(phase.add(t0 + seconds(81), 9), 9.0 / 81);
  for (int i = 2; i <= 40; ++i) last = phase.add(t0 + seconds(80 + i), 8 + i);
  EXPECT_DOUBLE_EQ(last, 1.0);  // 1 frame a second after the phase, once it is 20 s behind
}

}  // namespace
}  // namespace lingbot::cli
