#include "io/export_bss.h"

#include <cstdio>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/printf_string.h"
#include "io/file_util.h"

namespace lingbot::io {

namespace fs = std::filesystem;

BssWriter::BssWriter(const fs::path& dir) : traj_(dir / "traj.txt"), intrinsics_(dir / "intrinsics.txt") {}

void BssWriter::append(double timestamp, const RigidTransform<double>& c2w, const Mat33& K, int width, int height) {
  std::string line = printf_string("%.6f", timestamp);
  for (double v : c2w) line += printf_string(" %.9g", v);
  line += '\n';
  traj_.append(line);
  intrinsics_.append(
      printf_string("%.6f %.9g %.9g %.9g %.9g %d %d\n", timestamp, K[0], K[4], K[2], K[5], width, height));
}

void BssWriter::rewind(const Mark& m) {
  traj_.rewind(m.traj);
  intrinsics_.rewind(m.intrinsics);
}

namespace {

class BssExporter final : public Exporter {
 public:
  std::string_view name() const override { return "bss"; }
  void prepare(const ExportRun& run) override {
    ensure_writable_dir(run.out_dir / "bss");
    for (const char* file : {"traj.txt", "intrinsics.txt"}) check_output_file_target(run.out_dir / "bss" / file);
  }
  void begin(const ExportRun& run) override {
    width_ = run.width;
    height_ = run.height;
    writer_.emplace(run.out_dir / "bss");
  }
  void frame(const ExportFrame& f) override {
    before_ = {writer_->mark(), frames_, skipped_};
    if (!geometry_finite(f)) {
      ++skipped_;
      return;
    }
    writer_->append(f.timestamp, f.c2w, f.intrinsics, width_, height_);
    ++frames_;
  }
  void discard_frame() override {
    writer_->rewind(before_.files);
    frames_ = before_.frames;
    skipped_ = before_.skipped;
  }
  void finish() override { writer_.reset(); }
  nlohmann::json report() const override {
    return {{"files",
             {{"bss/traj.txt", "timestamp + 3x4 camera -> world, row-major"},
              {"bss/intrinsics.txt", "timestamp fx fy cx cy width height"}}},
            {"frames", frames_},
            {"frames_without_geometry", skipped_}};
  }

 private:
  std::optional<BssWriter> writer_;
  int width_ = 0, height_ = 0;
  int64_t frames_ = 0, skipped_ = 0;
  struct {
    BssWriter::Mark files;
    int64_t frames = 0, skipped = 0;
  } before_;
};

}  // namespace

std::unique_ptr<Exporter> make_bss_exporter() { return std::make_unique<BssExporter>(); }

void remove_bss_outputs(const fs::path& out_dir) {
  remove_files_in(out_dir / "bss", [](const std::string& n) { return n == "traj.txt" || n == "intrinsics.txt"; });
}

}  // namespace lingbot::io
