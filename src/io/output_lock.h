#pragma once
// The run lock of an output folder. `lingbot-map run` holds an exclusive flock(2) on
// <folder>/.lingbot-run.lock while it writes there; the kernel releases it when the process ends,
// however it ends (kill -9 included). So a second run into the same folder is refused instead of
// mixing its files with the first one's, and a reader (`lingbot-map view`) can tell a run that is
// going on from one that ended without writing summary.json.
#include <filesystem>

#include "io/unique_fd.h"

namespace lingbot::io {

inline constexpr const char* kOutputLockName = ".lingbot-run.lock";

class OutputLock {
 public:
  // Creates the lock file in `dir` (which must exist) and takes the lock. Error when another process
  // holds it: "another lingbot-map run is writing to <dir> (it holds <dir>/.lingbot-run.lock); wait
  // for it to end or choose another output folder".
  explicit OutputLock(const std::filesystem::path& dir);
  // Removes the lock file (a folder whose run ended normally keeps none) and releases the lock.
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::filesystem::path path_;
  UniqueFd fd_;
};

enum class OutputWriter {
  Active,  // a process holds the folder's lock: a run is writing there
  Gone,    // the lock file is there and nobody holds it: its run ended without removing it (killed)
  Unknown  // no lock file: no run, a run that ended normally, or one of a version without the lock
};
OutputWriter output_writer(const std::filesystem::path& dir);

}  // namespace lingbot::io
