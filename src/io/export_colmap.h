#pragma once
// "colmap": a COLMAP text model, colmap/{cameras,images,points3D}.txt, that COLMAP reads
// (model_converter, model_analyzer, the GUI's File > Import model) and converts to its binary form.
//   cameras.txt   one PINHOLE camera per frame: "CAMERA_ID PINHOLE W H fx fy cx cy" with
//                 cx, cy = the engine's principal point + 0.5. COLMAP puts the centre of pixel
//                 (col, row) at (col + 0.5, row + 0.5), the engine at (col, row): with the shift a
//                 point unprojected from pixel (col, row) projects onto that pixel's centre.
//   images.txt    per frame "IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME": the world -> camera
//                 rotation as a unit quaternion (scalar first, QW >= 0) and translation, then the
//                 POINTS2D line: "X Y POINT3D_ID" for each of the frame's points, at the centre of
//                 the pixel it was unprojected from. IMAGE_ID = CAMERA_ID = frame index + 1;
//                 NAME = NNNNNN.png, the names `run --export-preprocessed DIR` gives the model's input frames.
//   points3D.txt  "POINT3D_ID X Y Z R G B ERROR IMAGE_ID POINT2D_IDX" per point (the points of
//                 points.ply: same filter): ERROR 0 and a track of one observation, its pixel (the
//                 engine does not match features across frames). The observations let COLMAP's
//                 image_undistorter and patch_match_stereo derive each image's depth range.
// Lines are appended and flushed per frame, so the model is valid after every frame. Frames with
// non-finite geometry are left out (no camera, image or points).
#include <cstdint>
#include <filesystem>
#include <memory>

#include "io/export.h"
#include "io/line_file.h"

namespace lingbot::io {

class ColmapWriter {
 public:
  explicit ColmapWriter(const std::filesystem::path& dir);  // writes the three files in dir
  // One frame: its camera and image (w2c, K of the engine), and its points (PointBatch::pixel gives
  // their observations; a batch without pixels gets empty tracks).
  void append(int64_t index, const RigidTransform<double>& w2c, const Mat33& K, int width, int height, const PointBatch& points);
  int64_t images() const { return images_; }
  int64_t points() const { return next_point_id_ - 1; }
  struct Mark {
    LineFile::Mark cameras, images_file, points;
    int64_t images = 0, next_point_id = 1;
  };
  Mark mark() const { return {cameras_.mark(), images_file_.mark(), points_.mark(), images_, next_point_id_}; }
  void rewind(const Mark& m);

 private:
  LineFile cameras_, images_file_, points_;
  int64_t images_ = 0;
  int64_t next_point_id_ = 1;
};

std::unique_ptr<Exporter> make_colmap_exporter();
void remove_colmap_outputs(const std::filesystem::path& out_dir);

}  // namespace lingbot::io
