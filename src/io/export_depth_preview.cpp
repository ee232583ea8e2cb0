#include "io/export_depth_preview.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"
#include "io/png.h"

namespace lingbot::io {

namespace fs = std::filesystem;

std::array<uint8_t, 3> turbo_rgb(double t) {
  // Polynomial fit of Turbo (A. Mikhailov, Google AI blog, 2019): c(t) = sum_k a_k t^k, k = 0..5.
  static constexpr double kR[6] = {0.13572138, 4.61539260, -42.66032258, 132.13108234, -152.94239396, 59.28637943};
  static constexpr double kG[6] = {0.09140261, 2.19418839, 4.84296658, -14.18503333, 4.27729857, 2.82956604};
  static constexpr double kB[6] = {0.10667330, 12.64194608, -60.58204836, 110.36276771, -89.90310912, 27.34824973};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0);
  auto eval = [t](const double* a) {
    double v = 0;
    for (int k = 5; k >= 0; --k) v = v * t + a[k];
    return static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 1.0) * 255.0));
  };
  return {eval(kR), eval(kG), eval(kB)};
}

DepthRange depth_preview_range(std::span<const float> depth) {
  std::vector<float> v;
  v.reserve(depth.size());
  for (float d : depth)
    if (is_valid_map_value(d)) v.push_back(d);
  if (v.empty()) return {};
  auto percentile = [&v](double p) {
    const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
    const size_t i = static_cast<size_t>(std::floor(pos));
    std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
    const double a = v[i];
    if (i + 1 >= v.size()) return static_cast<float>(a);
    const double b = *std::min_element(v.begin() + static_cast<long>(i) + 1, v.end());
    return static_cast<float>(a + (pos - static_cast<double>(i)) * (b - a));
  };
  const float lo = percentile(kDepthPreviewLowPercentile);
  const float hi = percentile(kDepthPreviewHighPercentile);
  return {lo, hi};
}

ImageU8 colorize_depth(int width, int height, std::span<const float> depth) {
  LINGBOT_CHECK(width > 0 && height > 0 && depth.size() == static_cast<size_t>(width) * static_cast<size_t>(height),
                "depth preview: ", depth.size(), " values do not fill ", width, "x", height);
  const DepthRange r = depth_preview_range(depth);
  const double span = static_cast<double>(r.hi) - static_cast<double>(r.lo);
  ImageU8 img(width, height);  // zero-filled: invalid pixels stay black
  for (size_t i = 0; i < depth.size(); ++i) {
    if (!is_valid_map_value(depth[i])) continue;
    // Near = red (t = 1): a constant-depth frame shows the middle of the map.
    const double t = span > 0 ? std::clamp(1.0 - (static_cast<double>(depth[i]) - r.lo) / span, 0.0, 1.0) : 0.5;
    const auto c = turbo_rgb(kDepthPreviewFarEnd + (1.0 - kDepthPreviewFarEnd) * t);
    std::copy(c.begin(), c.end(), img.rgb.begin() + static_cast<long>(i * 3));
  }
  return img;
}

void write_depth_preview(const fs::path& path, int width, int height, std::span<const float> depth) {
  write_png_rgb8(path, colorize_depth(width, height, depth));
}

namespace {

bool is_preview_name(const std::string& name) { return is_frame_file_name(name, ".png"); }

class DepthPreviewExporter final : public Exporter {
 public:
  std::string_view name() const override { return "depth-preview"; }
  void prepare(const ExportRun& run) override { ensure_writable_dir(run.out_dir / "depth_preview"); }
  void begin(const ExportRun& run) override {
    dir_ = run.out_dir / "depth_preview";
    width_ = run.width;
    height_ = run.height;
  }
  void frame(const ExportFrame& f) override {
    last_ = {-1, frames_, newest_};
    LINGBOT_CHECK(f.index > newest_, "depth-preview frames must be written in increasing order: got frame ", f.index,
                  " after frame ", newest_);
    last_.index = f.index;
    write_depth_preview(dir_ / file_name(f.index), width_, height_, f.depth);
    ++frames_;
    newest_ = f.index;
  }
  void discard_frame() override {
    if (last_.index >= 0) remove_output_file(dir_ / file_name(last_.index));
    frames_ = last_.frames_before;
    newest_ = last_.newest_before;
  }
  void finish() override {}
  nlohmann::json report() const override {
    return {{"files",
             {{"depth_preview/NNNNNN.png",
               "8-bit RGB Turbo colour map of depth (near = red, 2nd..98th percentile per frame, invalid = black)"}}},
            {"frames", frames_}};
  }

 private:
  static std::string file_name(int64_t index) { return frame_file_name(index, ".png"); }

  fs::path dir_;
  int width_ = 0, height_ = 0;
  int64_t frames_ = 0;
  int64_t newest_ = -1;  // index of the newest frame written
  LastFrame last_;
};

}  // namespace

std::unique_ptr<Exporter> make_depth_preview_exporter() { return std::make_unique<DepthPreviewExporter>(); }
void remove_depth_preview_outputs(const fs::path& out_dir) { remove_files_in(out_dir / "depth_preview", is_preview_name); }

}  // namespace lingbot::io
