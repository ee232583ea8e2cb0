#pragma once
// A text file written by appending: every append() reaches the file in one write(2) before it
// returns, so an interrupted run leaves the lines written so far (a kill -9 could still cut the one
// being written, in the microseconds the kernel copies it). An append that fails (full disk) throws and
// leaves the file as it was before the call; rewind() takes back appends that succeeded (a frame
// another export failed on). Used by the line-based exports (bss, colmap).
#include <filesystem>
#include <string_view>

#include "io/file_util.h"

namespace lingbot::io {

class LineFile {
 public:
  // Creates (truncates) `path`. Error: "cannot write <path>: <reason>".
  explicit LineFile(const std::filesystem::path& path);
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;
  void append(std::string_view text);  // written and flushed; no newline added
  // The file's state now (its length), and the cut back to an earlier state.
  struct Mark {
    long bytes = 0;
  };
  Mark mark() const { return {size_}; }
  void rewind(const Mark& m);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  UniqueFile file_;
  long size_ = 0;  // bytes of complete appends
};

}  // namespace lingbot::io
