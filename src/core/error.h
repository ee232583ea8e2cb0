#pragma once
// Error reporting inside the engine: every bad input becomes a lingbot::Error (the public type,
// lingbot/error.h) whose message names the problem; LINGBOT_CHECK builds it.
#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>

#include "lingbot/error.h"

namespace lingbot {

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Bytes from a file, made safe to echo in a one-line error message: printable ASCII as is, every
// other byte as \xNN (so control characters, escape sequences and newlines cannot reach the
// terminal), cut after `max_bytes` input bytes with "... (N bytes)".
inline std::string printable_excerpt(std::string_view bytes, size_t max_bytes = 64) {
  std::string out;
  const size_t n = bytes.size() < max_bytes ? bytes.size() : max_bytes;
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (n < bytes.size()) out += "... (" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

}  // namespace lingbot

// LINGBOT_CHECK(cond, msg parts...): throws lingbot::Error(msg) when cond is false.
// Use for user-facing validation (shapes, options, file contents); the message must name the value.
#define LINGBOT_CHECK(cond, ...)                                        \
  do {                                                                  \
    if (!(cond)) throw ::lingbot::Error(::lingbot::detail::concat(__VA_ARGS__)); \
  } while (0)
