#include "io/line_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "io/file_util.h"

namespace lingbot::io {

LineFile::LineFile(const std::filesystem::path& path) : path_(path), file_(open_for_writing(path)) {
  // Unbuffered: an append is one write(2) whatever its size. Buffered, glibc split an append larger
  // than its buffer (a COLMAP frame's POINTS2D line: ~500 KB) into several, and a kill -9 between
  // them left a cut line.
  std::setvbuf(file_.get(), nullptr, _IONBF, 0);
}

void LineFile::append(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) == text.size() && std::fflush(file_.get()) == 0) {
    size_ += static_cast<long>(text.size());
    return;
  }
  const int err = errno;
  roll_back_failed_append(file_.get(), size_);  // the file keeps its complete lines
  throw Error(detail::concat("cannot write ", path_.string(), ": ", std::strerror(err)));
}

void LineFile::rewind(const Mark& m) {
  LINGBOT_CHECK(m.bytes <= size_, "internal: ", path_.string(), ": rewind to ", m.bytes, " bytes, past its ", size_);
  cut_file_back(file_.get(), path_, m.bytes);
  size_ = m.bytes;
}

}  // namespace lingbot::io
