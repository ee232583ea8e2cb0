#pragma once
// lingbot::Error: the one exception type of the library. Every bad input (a malformed file, an
// option out of range, a tensor of the wrong shape or dtype, a call out of protocol order) throws
// it, with a one-line message that names the value at fault; a step the caller stopped throws its
// subclass Stopped. Other exceptions only come from the standard library itself (std::bad_alloc).
#include <stdexcept>
#include <string>

namespace lingbot {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A step that ended early because the caller asked it to (SessionOptions::stop): not a fault.
class Stopped : public Error {
 public:
  explicit Stopped(const std::string& what) : Error(what) {}
};

}  // namespace lingbot
