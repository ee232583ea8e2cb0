#pragma once
// Error reporting: every bad input becomes a lingbot::Error whose message names the problem.
#include <sstream>
#include <stdexcept>
#include <string>

namespace lingbot {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace lingbot

// LINGBOT_CHECK(cond, msg parts...): throws lingbot::Error(msg) when cond is false.
// Use for user-facing validation (shapes, options, file contents); the message must name the value.
#define LINGBOT_CHECK(cond, ...)                                        \
  do {                                                                  \
    if (!(cond)) throw ::lingbot::Error(::lingbot::detail::concat(__VA_ARGS__)); \
  } while (0)
