#pragma once
// A text file written by appending: every append() reaches the file (fflush) before it returns, so
// an interrupted run leaves the lines written so far. Used by the line-based exports (bss, colmap).
#include <cstdio>
#include <filesystem>
#include <string_view>

namespace lingbot::io {

class LineFile {
 public:
  // Creates (truncates) `path`. Error: "cannot write <path>: <reason>".
  explicit LineFile(const std::filesystem::path& path);
  ~LineFile();
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;
  void append(std::string_view text);  // written and flushed; no newline added
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace lingbot::io
