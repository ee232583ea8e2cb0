#include "io/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lingbot::io {

namespace fs = std::filesystem;

OutputLock::OutputLock(const fs::path& dir) : path_(dir / kOutputLockName) {
  // A run that ends removes the file while it holds the lock: a process that opened the old file
  // and locks it afterwards holds a lock nobody else can see. So the lock counts only once the
  // path still names the file locked; otherwise try again on the new one.
  for (int attempt = 0; attempt < 8; ++attempt) {
    fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    LINGBOT_CHECK(fd_.valid(), "cannot create ", path_.string(), ": ", std::strerror(errno));
    if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      LINGBOT_CHECK(err != EWOULDBLOCK, "another lingbot-map run is writing to ", dir.string(), " (it holds ",
                    path_.string(), "); wait for it to end or choose another output folder");
      throw Error(detail::concat("cannot lock ", path_.string(), ": ", std::strerror(err)));
    }
    struct stat held{}, named{};
    if (::fstat(fd_.get(), &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev)
      return;
  }
  throw Error("cannot lock " + path_.string() + ": it keeps being replaced");
}

OutputLock::~OutputLock() {
  // While still locked (fd_ closes after this): a waiting process then sees a new file (above).
  if (fd_.valid()) ::unlink(path_.c_str());
}

OutputWriter output_writer(const fs::path& dir) {
  const fs::path path = dir / kOutputLockName;
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return OutputWriter::Unknown;
  // The shared lock taken just to look goes with the descriptor.
  return ::flock(fd.get(), LOCK_SH | LOCK_NB) == 0 ? OutputWriter::Gone : OutputWriter::Active;
}

}  // namespace lingbot::io
