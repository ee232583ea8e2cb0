// `lingbot-map bench gpu` (the GPU measurements of scripts/gpu_check.sh): its errors without a GPU.
// The measurements themselves need a GPU and are run by gpu_check.sh, not by ctest.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "lingbot/device.h"
#include "run_test_util.h"

namespace {

using namespace run_test;

TEST(BenchGpu, WithoutAGpuSaysWhy) {
  // A CUDA build on a machine with a GPU runs the measurement instead (gpu_check.sh's job). Asked
  // before the run, so that a run that succeeds without a GPU fails here.
  if (lingbot::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: bench gpu measures";
  const Result r = run_cli("bench gpu attention");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "");
#ifdef LINGBOT_HAVE_CUDA
  std::string why_none;
  lingbot::cuda_device_count(&why_none);
  EXPECT_EQ(r.err, "error: bench gpu: no CUDA device is visible (cudaGetDeviceCount: " + why_none + ")\n");
#else
  EXPECT_EQ(r.err, "error: bench gpu: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)\n");
#endif
}

TEST(BenchGpu, BadArgumentsGiveOneErrorLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench gpu memory --frames 8", "error: bench gpu: --frames must be > 8, got 8\n"},
  };
  const Result usage = run_cli("bench gpu speed");  // not one of the words: a usage error
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.err, "error: measurement: must be attention, memory or all, got 'speed'\n"
                       "Run 'lingbot-map bench gpu --help' for usage.\n");
  for (const auto& [args, expected] : cases) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, expected) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

}  // namespace
