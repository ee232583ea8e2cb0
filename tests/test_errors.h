#pragma once
// The one check of an error path in the C++ tests: `f` must throw an E (lingbot::Error, or a subclass
// such as Stopped) whose message is exactly `message`.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace lingbot_test {

template <class E = lingbot::Error, class F>
void expect_error(F&& f, const std::string& message) {
  try {
    std::forward<F>(f)();
    ADD_FAILURE() << "no exception thrown; expected: " << message;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

}  // namespace lingbot_test
