#pragma once
// Shared by the libFuzzer targets: the only failures a parser may report for malformed input are
// lingbot::Error (and, for JSON text, nlohmann's parse/type errors, which callers turn into one
// error line). Anything else escaping -- another exception, a crash, a sanitizer report -- is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"

namespace lingbot_fuzz {

inline std::vector<uint8_t> bytes(const uint8_t* data, size_t size) { return {data, data + size}; }

// Runs `f`, swallowing the documented error type only.
template <typename F>
void expect_only_lingbot_errors(F&& f) {
  try {
    f();
  } catch (const lingbot::Error&) {
  }
}

}  // namespace lingbot_fuzz
