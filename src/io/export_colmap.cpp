#include "io/export_colmap.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "core/error.h"
#include "io/file_util.h"
#include "io/image.h"
#include "io/png.h"

namespace lingbot::io {

namespace fs = std::filesystem;

ColmapWriter::ColmapWriter(const fs::path& dir)
    : cameras_(dir / "cameras.txt"), images_file_(dir / "images.txt"), points_(dir / "points3D.txt") {
  cameras_.append(
      "# Camera list with one line of data per camera:\n"
      "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n"
      "# written by lingbot-map: PINHOLE fx fy cx cy, cx/cy = engine principal point + 0.5 (COLMAP pixel centres)\n");
  images_file_.append(
      "# Image list with two lines of data per image:\n"
      "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n"
      "#   POINTS2D[] as (X, Y, POINT3D_ID)\n"
      "# written by lingbot-map: world -> camera pose; POINTS2D: the pixel centre each point came from\n");
  points_.append(
      "# 3D point list with one line of data per point:\n"
      "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)\n"
      "# written by lingbot-map: depth-map points, each observed once: at its pixel of the image it came from\n");
}

void ColmapWriter::append(int64_t index, const RigidTransform<double>& w2c, const Mat33& K, int width, int height,
                          const PointBatch& points) {
  // Checked before anything is written: a refused frame leaves the three files as they were.
  LINGBOT_CHECK(width >= 1 && height >= 1, "colmap: image size must be positive, got ", width, "x", height);
  LINGBOT_CHECK(points.pixel.empty() || points.pixel.size() == points.size(), "colmap: ", points.pixel.size(),
                " point pixels for ", points.size(), " points");
  const uint64_t pixels = static_cast<uint64_t>(width) * static_cast<uint64_t>(height);
  for (const uint32_t px : points.pixel) LINGBOT_CHECK(px < pixels, "colmap: point pixel ", px, " outside the ", width, "x", height, " image");
  const long long id = static_cast<long long>(index) + 1;
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "%lld PINHOLE %d %d %.17g %.17g %.17g %.17g\n", id, width, height, K[0], K[4],
                        K[2] + 0.5, K[5] + 0.5);
  cameras_.append(std::string_view(buf, static_cast<size_t>(n)));
  const auto q = rotation_to_quaternion_xyzw(w2c);  // qw >= 0
  n = std::snprintf(buf, sizeof buf, "%lld %.17g %.17g %.17g %.17g %.17g %.17g %.17g %lld %s\n", id, q[3], q[0],
                    q[1], q[2], w2c[3], w2c[7], w2c[11], id, frame_file_name(index, ".png").c_str());
  std::string image_text(buf, static_cast<size_t>(n));
  const bool observed = !points.pixel.empty();  // checked above: one pixel per point
  std::string text;
  text.reserve(points.size() * 64);
  if (observed) image_text.reserve(image_text.size() + points.size() * 24);
  for (size_t i = 0; i < points.size(); ++i) {
    const float* p = points.xyz.data() + 3 * i;
    const uint8_t* c = points.rgb.data() + 3 * i;
    const long long point_id = static_cast<long long>(next_point_id_++);
    if (observed) {  // COLMAP's pixel centres are at +0.5
      const uint32_t px = points.pixel[i], w = static_cast<uint32_t>(width);
      n = std::snprintf(buf, sizeof buf, "%s%u.5 %u.5 %lld", i == 0 ? "" : " ", px % w, px / w, point_id);
      image_text.append(buf, static_cast<size_t>(n));
      n = std::snprintf(buf, sizeof buf, "%lld %.9g %.9g %.9g %d %d %d 0 %lld %zu\n", point_id, p[0], p[1], p[2], c[0],
                        c[1], c[2], id, i);
    } else {
      n = std::snprintf(buf, sizeof buf, "%lld %.9g %.9g %.9g %d %d %d 0\n", point_id, p[0], p[1], p[2], c[0], c[1],
                        c[2]);
    }
    text.append(buf, static_cast<size_t>(n));
  }
  image_text += '\n';
  images_file_.append(image_text);
  points_.append(text);
  ++images_;
}

void ColmapWriter::rewind(const Mark& m) {
  cameras_.rewind(m.cameras);
  images_file_.rewind(m.images_file);
  points_.rewind(m.points);
  images_ = m.images;
  next_point_id_ = m.next_point_id;
}

namespace {

// colmap/images/NNNNNN.png: the model input of frame NNNNNN, the picture images.txt names.
std::string image_name(int64_t index) { return frame_file_name(index, ".png"); }
bool is_image_name(const std::string& n) { return is_frame_file_name(n, ".png"); }

class ColmapExporter final : public Exporter {
 public:
  std::string_view name() const override { return "colmap"; }
  void prepare(const ExportRun& run) override {
    ensure_writable_dir(run.out_dir / "colmap");
    ensure_writable_dir(run.out_dir / "colmap" / "images");
    for (const char* file : {"cameras.txt", "images.txt", "points3D.txt"})
      check_output_file_target(run.out_dir / "colmap" / file);
  }
  void begin(const ExportRun& run) override {
    width_ = run.width;
    height_ = run.height;
    filter_ = run.points;
    images_dir_ = run.out_dir / "colmap" / "images";
    ensure_writable_dir(images_dir_);  // again: removing the earlier run's outputs removed it when empty
    writer_.emplace(run.out_dir / "colmap");
  }
  // The image first: a model listed in images.txt always has its picture.
  void frame(const ExportFrame& f) override {
    before_ = {writer_->mark(), skipped_, -1};
    if (!geometry_finite(f)) {
      ++skipped_;
      return;
    }
    before_.image = f.index;
    write_png_rgb8(images_dir_ / image_name(f.index), rgb8_from_chw(f.image, width_, height_));
    writer_->append(f.index, f.w2c, f.intrinsics, width_, height_, frame_points(f, width_, filter_));
  }
  void discard_frame() override {
    writer_->rewind(before_.files);
    skipped_ = before_.skipped;
    if (before_.image >= 0) remove_output_file(images_dir_ / image_name(before_.image));
  }
  void finish() override {
    if (writer_) {
      images_ = writer_->images();
      points_ = writer_->points();
    }
    writer_.reset();
  }
  nlohmann::json report() const override {
    const int64_t images = writer_ ? writer_->images() : images_, points = writer_ ? writer_->points() : points_;
    return {{"files",
             {{"colmap/cameras.txt", "PINHOLE per frame, principal point + 0.5 (COLMAP pixel centres)"},
              {"colmap/images.txt", "world -> camera QW QX QY QZ TX TY TZ, NAME NNNNNN.png, POINTS2D at the points' pixels"},
              {"colmap/images/NNNNNN.png", "the model input of each listed frame (COLMAP's --image_path)"},
              {"colmap/points3D.txt", "points as points.ply, each observed once: its pixel in its image"}}},
            {"images", images},
            {"points", points},
            {"frames_without_geometry", skipped_}};
  }

 private:
  std::optional<ColmapWriter> writer_;
  std::filesystem::path images_dir_;
  PointFilter filter_;
  int width_ = 0, height_ = 0;
  int64_t images_ = 0, points_ = 0, skipped_ = 0;
  struct {
    ColmapWriter::Mark files;
    int64_t skipped = 0;
    int64_t image = -1;  // the frame whose picture the latest frame() wrote (-1: none)
  } before_;
};

}  // namespace

std::unique_ptr<Exporter> make_colmap_exporter() { return std::make_unique<ColmapExporter>(); }

void remove_colmap_outputs(const fs::path& out_dir) {
  remove_files_in(out_dir / "colmap",
                  [](const std::string& n) { return n == "cameras.txt" || n == "images.txt" || n == "points3D.txt"; });
  const fs::path images = out_dir / "colmap" / "images";
  remove_files_in(images, is_image_name);
  std::error_code ec;  // the emptied images/ goes, so an unselected colmap/ can go too (never a link)
  if (fs::is_directory(fs::symlink_status(images, ec)) && fs::is_empty(images, ec)) fs::remove(images, ec);
}

}  // namespace lingbot::io
