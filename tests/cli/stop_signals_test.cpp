// The stop-signal rules of run and the benches (tools/stop_signals.h), in this process: a first
// signal sets the flag; the same signal again within 1 s is the same interrupt (timeout(1) without
// --foreground delivers it twice); a second one later terminates at once, saying what it loses.
#include <signal.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "stop_signals.h"

namespace {

using lingbot::cli::StopSignalGuard;

TEST(StopSignals, TheFirstSignalSetsTheFlagAndTheSameOneSoonAfterIsIgnored) {
  const StopSignalGuard guard("nothing");
  EXPECT_FALSE(guard.requested());
  EXPECT_EQ(guard.signal(), 0);
  ASSERT_EQ(::raise(SIGTERM), 0);  // handled before raise returns (one thread sends it to itself)
  EXPECT_TRUE(guard.requested());
  EXPECT_TRUE(guard.flag()->load());
  EXPECT_EQ(guard.signal(), SIGTERM);
  ASSERT_EQ(::raise(SIGTERM), 0);  // within 1 s: the same interrupt; this process goes on
  EXPECT_EQ(guard.signal(), SIGTERM);
}

TEST(StopSignals, ASecondSignalASecondLaterTerminatesSayingWhatItLoses) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const StopSignalGuard guard("no table, no CSV");
        ::raise(SIGINT);
        std::this_thread::sleep_for(std::chrono::milliseconds(1100));
        ::raise(SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(5));  // not reached
      },
      testing::KilledBySignal(SIGINT), "\nlingbot-map: second interrupt: terminating at once \\(no table, no CSV\\)\n");
}

TEST(StopSignals, ANewGuardStartsClearAndTheOldHandlersComeBack) {
  {
    const StopSignalGuard first("nothing");
    ASSERT_EQ(::raise(SIGINT), 0);
    EXPECT_TRUE(first.requested());
  }
  struct sigaction now{};
  ASSERT_EQ(::sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);  // restored
  const StopSignalGuard second("nothing");
  EXPECT_FALSE(second.requested());  // a new command (a Python-style loop of them) starts clear
  EXPECT_EQ(second.signal(), 0);
}

}  // namespace
