#include "io/line_file.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lingbot::io {

LineFile::LineFile(const std::filesystem::path& path) : path_(path) {
  file_ = std::fopen(path_.c_str(), "wb");
  LINGBOT_CHECK(file_ != nullptr, "cannot write ", path_.string(), ": ", std::strerror(errno));
}

LineFile::~LineFile() {
  if (file_) std::fclose(file_);
}

void LineFile::append(std::string_view text) {
  LINGBOT_CHECK(std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0,
                "cannot write ", path_.string(), ": ", std::strerror(errno));
}

}  // namespace lingbot::io
