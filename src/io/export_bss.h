#pragma once
// "bss": upstream's benchmark on-disk format, so its evaluation scores a run unchanged.
//   bss/traj.txt        one line per frame: "timestamp r00 r01 r02 t0 r10 r11 r12 t1 r20 r21 r22 t2",
//                       the 3x4 camera -> world pose, row-major (scene units)
//   bss/intrinsics.txt  one line per frame: "timestamp fx fy cx cy width height" (pixels of the
//                       preprocessed image; principal point as the engine's K, no +0.5 shift)
// Both are appended and flushed per frame. Frames with non-finite geometry are left out of both.
#include <filesystem>
#include <memory>

#include "io/export.h"
#include "io/line_file.h"

namespace lingbot::io {

class BssWriter {
 public:
  explicit BssWriter(const std::filesystem::path& dir);  // writes dir/traj.txt, dir/intrinsics.txt
  void append(double timestamp, const RigidTransform<double>& c2w, const Mat33& K, int width, int height);
  struct Mark {
    LineFile::Mark traj, intrinsics;
  };
  Mark mark() const { return {traj_.mark(), intrinsics_.mark()}; }
  void rewind(const Mark& m);

 private:
  LineFile traj_, intrinsics_;
};

std::unique_ptr<Exporter> make_bss_exporter();
void remove_bss_outputs(const std::filesystem::path& out_dir);

}  // namespace lingbot::io
