#pragma once
// "npz": upstream's prediction files, readable by numpy.load and by upstream's own tools.
//
//   predictions/frame_NNNNNN.npz  one per frame, as demo_render/batch_demo.py save_predictions_npz
//                                 writes them (sequence arrays sliced per frame):
//       images      float32 [3, H, W]  preprocessed RGB in [0, 1]
//       pose_enc    float32 [9]        t (xyz), q (xyzw), fov_h, fov_w (radians)
//       depth       float32 [H, W, 1]  as computed (invalid values kept)
//       depth_conf  float32 [H, W]
//       extrinsic   float32 [3, 4]     WORLD -> CAMERA [R | t] (upstream's `extrinsic`)
//       intrinsic   float32 [3, 3]     K, principal point (W/2, H/2), pixels at integer coordinates
//   predictions/meta.npz          the per-sequence 1-D arrays, rewritten (atomically) after every frame:
//       is_keyframe bool   [S]        stored in the KV cache (scale frames included)
//       frame_type  uint8  [S]        0 = scale frame, 1 = keyframe, 2 = non-keyframe
//   predictions.npz               the whole run in one file with the keys of upstream
//                                 demo_render/demo.py --save_predictions (the arrays above stacked: images [S, 3, H, W],
//                                 pose_enc [S, 9], depth [S, H, W, 1], depth_conf [S, H, W],
//                                 extrinsic [S, 3, 4], intrinsic [S, 3, 3], is_keyframe [S],
//                                 frame_type [S]); assembled at finish by streaming the per-frame files
//                                 back, written atomically, only for runs of at most
//                                 kPredictionsNpzMaxFrames frames (and under 4 GiB: no ZIP64).
// Entries are stored uncompressed (as np.savez; upstream's demo_render/demo.py uses savez_compressed, which
// numpy.load reads the same way). Every frame is written whatever its values (raw arrays).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/export.h"

namespace lingbot::io {

inline constexpr int64_t kPredictionsNpzMaxFrames = 300;

// One array of an .npz: entry "<name>.npy" with NumPy dtype `descr` ('<f4', '|b1', '|u1') and
// C-order little-endian bytes (bytes.size() must match shape and dtype).
struct NpzArray {
  std::string name;
  std::string descr;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};
// Writes an uncompressed .npz atomically (temporary name + rename).
void write_npz(const std::filesystem::path& path, std::span<const NpzArray> arrays);

class PredictionsWriter {
 public:
  // Writes into `dir` (which must exist): frame_NNNNNN.npz and meta.npz.
  PredictionsWriter(const std::filesystem::path& dir, int width, int height);
  void append(const ExportFrame& f);
  int64_t frames() const { return static_cast<int64_t>(frame_type_.size()); }
  // Takes back the frames after the first `frames` (their files; meta.npz rewritten), and a frame
  // whose append() failed part way.
  void truncate(int64_t frames);
  // Writes `path` (predictions.npz) from the frames appended so far, streaming them back from the
  // per-frame files. Returns "" when written, else why not (too many frames / too large).
  std::string write_combined(const std::filesystem::path& path) const;

 private:
  std::filesystem::path frame_path(int64_t index) const;
  void write_meta() const;
  std::filesystem::path dir_;
  int width_, height_;
  std::vector<int64_t> indices_;
  std::vector<uint8_t> is_keyframe_, frame_type_;  // bool stored as 0/1 bytes ('|b1')
};

std::unique_ptr<Exporter> make_npz_exporter();
void remove_npz_outputs(const std::filesystem::path& out_dir);

}  // namespace lingbot::io
