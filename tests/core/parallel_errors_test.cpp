// ParallelErrors: an exception thrown by one thread of an OpenMP region reaches the caller after the
// region (leaving the region would end the process), the other threads stop taking work, and the
// first exception is the one rethrown.
#include <gtest/gtest.h>

#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "core/parallel_errors.h"

namespace lingbot {
namespace {

TEST(ParallelErrors, AThrowInsideARegionReachesTheCallerAndStopsTheLoop) {
  constexpr int kIterations = 4000;
  ParallelErrors errors;
  std::atomic<int> ran{0};
#pragma omp parallel for schedule(static) num_threads(4)
  for (int i = 0; i < kIterations; ++i) errors.run([&] {
    ran.fetch_add(1);
    if (i == 10) throw std::runtime_error("iteration 10 failed");
  });
  try {
    errors.rethrow();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "iteration 10 failed");
  }
  // The failing thread's block (iterations 0..999) stops at 10; the other threads stop once they see it.
  EXPECT_LE(ran.load(), kIterations - 989);
}

TEST(ParallelErrors, TheFirstOfSeveralIsKeptAndANormalLoopRunsWhole) {
  ParallelErrors errors;
#pragma omp parallel num_threads(4)
  errors.run([&] { throw std::runtime_error("thread " + std::to_string(omp_get_thread_num())); });
  try {
    errors.rethrow();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("thread ", 0), 0u) << e.what();
  }

  ParallelErrors none;
  std::atomic<int> ran{0};
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < 100; ++i) none.run([&] { ran.fetch_add(1); });
  EXPECT_NO_THROW(none.rethrow());
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace lingbot
