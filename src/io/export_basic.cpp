#include "io/export_basic.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "io/file_util.h"

namespace lingbot::io {

namespace fs = std::filesystem;

namespace {

class PosesExporter final : public Exporter {
 public:
  std::string_view name() const override { return "poses"; }
  void prepare(const ExportRun& run) override {
    ensure_writable_dir(run.out_dir);
    check_output_file_target(run.out_dir / "poses.json");
  }
  void begin(const ExportRun& run) override { writer_.emplace(run.out_dir / "poses.json", run.meta); }
  void frame(const ExportFrame& f) override {
    before_ = writer_->mark();
    FramePose p;
    p.index = f.index;
    p.timestamp = f.timestamp;
    p.keyframe = f.keyframe;
    p.source = std::string(f.source);
    p.c2w = f.c2w;
    p.intrinsics = f.intrinsics;
    p.placement = f.placement;
    p.valid = geometry_finite(f);
    writer_->append(p);
  }
  void discard_frame() override { writer_->rewind(before_); }
  void finish() override {
    frames_ = writer_->frames();
    writer_.reset();
  }
  nlohmann::json report() const override {
    return {{"files", {{"poses.json", "per frame: c2w 4x4, w2c 3x4, intrinsics 3x3, keyframe, source, source_size, source_intrinsics"}}},
            {"frames", writer_ ? writer_->frames() : frames_}};
  }

 private:
  std::optional<PosesJsonWriter> writer_;
  PosesJsonWriter::Mark before_;
  int64_t frames_ = 0;  // after finish()
};

class TumExporter final : public Exporter {
 public:
  std::string_view name() const override { return "tum"; }
  void prepare(const ExportRun& run) override {
    ensure_writable_dir(run.out_dir);
    check_output_file_target(run.out_dir / "trajectory.tum");
  }
  void begin(const ExportRun& run) override { writer_.emplace(run.out_dir / "trajectory.tum"); }
  void frame(const ExportFrame& f) override {
    before_ = {writer_->mark(), frames_, skipped_};
    if (!geometry_finite(f)) {
      ++skipped_;
      return;
    }
    writer_->append(f.timestamp, f.c2w);
    ++frames_;
  }
  void discard_frame() override {
    writer_->rewind(before_.file);
    frames_ = before_.frames;
    skipped_ = before_.skipped;
  }
  void finish() override { writer_.reset(); }
  nlohmann::json report() const override {
    return {{"files", {{"trajectory.tum", "timestamp tx ty tz qx qy qz qw (camera -> world)"}}},
            {"frames", frames_},
            {"frames_without_geometry", skipped_}};
  }

 private:
  std::optional<TumWriter> writer_;
  int64_t frames_ = 0, skipped_ = 0;
  struct {
    TumWriter::Mark file;
    int64_t frames = 0, skipped = 0;
  } before_;
};

class DepthExporter final : public Exporter {
 public:
  std::string_view name() const override { return "depth"; }
  void prepare(const ExportRun& run) override { ensure_writable_dir(run.out_dir / "depth"); }
  void begin(const ExportRun& run) override {
    dir_ = run.out_dir / "depth";
    width_ = run.width;
    height_ = run.height;
  }
  void frame(const ExportFrame& f) override {
    last_ = {-1, frames_, newest_};
    // A repeated index would overwrite a complete frame's files (and a discard then remove them).
    LINGBOT_CHECK(f.index > newest_, "depth frames must be written in increasing order: got frame ", f.index,
                  " after frame ", newest_);
    last_.index = f.index;
    last_clipped_ = {};  // a write that throws has counted nothing (discard_frame subtracts this)
    last_clipped_ = write_depth_frame(dir_, f.index, width_, height_, f.depth, f.depth_conf);
    clipped_.depth += last_clipped_.depth;
    clipped_.confidence += last_clipped_.confidence;
    clipped_frames_ += last_clipped_.depth + last_clipped_.confidence > 0 ? 1 : 0;
    ++frames_;
    newest_ = f.index;
  }
  void discard_frame() override {
    if (last_.index >= 0) {
      for (const std::string& name : depth_frame_file_names(last_.index)) remove_output_file(dir_ / name);
      clipped_.depth -= last_clipped_.depth;
      clipped_.confidence -= last_clipped_.confidence;
      clipped_frames_ -= last_clipped_.depth + last_clipped_.confidence > 0 ? 1 : 0;
      last_clipped_ = {};
    }
    frames_ = last_.frames_before;
    newest_ = last_.newest_before;
  }
  void finish() override {}
  nlohmann::json report() const override {
    nlohmann::json r = {
        {"files",
         {{"depth/NNNNNN.png", "uint16, depth = value * 0.001; 0 = invalid; 65535 = 65.535 or more"},
          {"depth/NNNNNN.npy", "float32 [H, W] depth as computed"},
          {"depth/NNNNNN_conf.png", "uint16, confidence = value * 0.01; 0 = invalid; 65535 = 655.35 or more"},
          {"depth/NNNNNN_conf.npy", "float32 [H, W] confidence as computed"}}},
        {"frames", frames_},
        {"clipped", {{"depth_samples", clipped_.depth}, {"confidence_samples", clipped_.confidence},
                     {"frames", clipped_frames_}}}};
    if (clipped_frames_ > 0)
      r["note"] = detail::concat(clipped_.depth, " depth samples (> 65.535) and ", clipped_.confidence,
                                 " confidence samples (> 655.35) in ", clipped_frames_,
                                 " frames were written as 65535 in the 16-bit PNGs; the .npy files keep the values");
    return r;
  }

 private:
  fs::path dir_;
  int width_ = 0, height_ = 0;
  int64_t frames_ = 0;
  int64_t newest_ = -1;  // index of the newest frame written
  LastFrame last_;
  ClippedSamples clipped_, last_clipped_;  // PNG samples clipped to 65535: the run's, the last frame's
  int64_t clipped_frames_ = 0;
};

class PlyExporter final : public Exporter {
 public:
  std::string_view name() const override { return "ply"; }
  void prepare(const ExportRun& run) override {
    ensure_writable_dir(run.out_dir);
    check_output_file_target(run.out_dir / "points.ply");
  }
  void begin(const ExportRun& run) override {
    filter_ = run.points;
    width_ = run.width;
    writer_.emplace(run.out_dir / "points.ply");
  }
  void frame(const ExportFrame& f) override {
    before_ = writer_->mark();
    const PointBatch b = frame_points(f, width_, filter_);
    writer_->append_points(b.xyz, b.rgb);
    writer_->flush();
  }
  void discard_frame() override { writer_->rewind(before_); }
  void finish() override {
    if (writer_) {
      writer_->flush();
      points_ = writer_->points();
    }
    writer_.reset();
  }
  nlohmann::json report() const override {
    return {{"files", {{"points.ply", "binary PLY: float x y z (world), uchar red green blue"}}},
            {"points", writer_ ? writer_->points() : points_}};
  }

 private:
  PointFilter filter_;
  int width_ = 0;
  std::optional<PlyWriter> writer_;
  PlyWriter::Mark before_;
  int64_t points_ = 0;  // after finish()
};

}  // namespace

bool is_depth_file_name(const std::string& name) {
  return is_frame_file_name(name, ".png") || is_frame_file_name(name, ".npy") ||
         is_frame_file_name(name, "_conf.png") || is_frame_file_name(name, "_conf.npy");
}

std::unique_ptr<Exporter> make_poses_exporter() { return std::make_unique<PosesExporter>(); }
std::unique_ptr<Exporter> make_tum_exporter() { return std::make_unique<TumExporter>(); }
std::unique_ptr<Exporter> make_depth_exporter() { return std::make_unique<DepthExporter>(); }
std::unique_ptr<Exporter> make_ply_exporter() { return std::make_unique<PlyExporter>(); }

void remove_poses_outputs(const fs::path& out_dir) { remove_output_file(out_dir / "poses.json"); }
void remove_tum_outputs(const fs::path& out_dir) { remove_output_file(out_dir / "trajectory.tum"); }
void remove_depth_outputs(const fs::path& out_dir) { remove_files_in(out_dir / "depth", is_depth_file_name); }
void remove_ply_outputs(const fs::path& out_dir) { remove_output_file(out_dir / "points.ply"); }

}  // namespace lingbot::io
