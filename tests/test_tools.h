#pragma once
// Tests that need a tool or codec scripts/setup.sh installs (gnuplot, libavcodec's FFV1 / MPEG-4
// encoders): skipped visibly where it is missing, but a failure under LINGBOT_REQUIRE_TEST_TOOLS=1,
// which scripts/test.sh (and so CI) sets: there a missing tool is a missing install step, and a green
// run must not hide it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace lingbot_test {

inline bool test_tools_required() {
  const char* v = std::getenv("LINGBOT_REQUIRE_TEST_TOOLS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace lingbot_test

// Ends the test when `available` is false: GTEST_SKIP with `why`, or a failure when tools are required.
#define LINGBOT_SKIP_WITHOUT_TOOL(available, why)                                                       \
  do {                                                                                                 \
    if (!(available)) {                                                                                \
      if (lingbot_test::test_tools_required())                                                         \
        FAIL() << why << " (LINGBOT_REQUIRE_TEST_TOOLS=1: scripts/setup.sh should have installed it)"; \
      GTEST_SKIP() << why;                                                                             \
    }                                                                                                  \
  } while (0)
