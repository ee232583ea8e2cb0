#pragma once
// lingbot::Error: the one exception type of the library. Every bad input (a malformed file, an
// option out of range, a tensor of the wrong shape or dtype, a call out of protocol order) throws
// it, with a one-line message that names the value at fault; a step the caller stopped throws its
// subclass Stopped, and a path the caller named that does not exist its subclass FileNotFound. Other
// exceptions only come from the standard library itself (std::bad_alloc).
#include <stdexcept>
#include <string>
#include <utility>

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

// A file or folder the caller named (a model file, an image folder, a video file, an output folder)
// does not exist. The message is "<what> not found: <path>"; path() is that path (as given, or
// empty where the thrower had none). A path that exists but cannot be read throws Error.
class FileNotFound : public Error {
 public:
  explicit FileNotFound(const std::string& what, std::string path = {}) : Error(what), path_(std::move(path)) {}
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace lingbot
