#include "io/export_viewer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>

#include "core/error.h"
#include "io/export_depth_preview.h"
#include "io/file_util.h"

namespace lingbot::io {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the viewer frame format is little-endian");

namespace {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    const size_t old = bytes_.size();
    bytes_.resize(old + sizeof(T));
    std::memcpy(bytes_.data() + old, &v, sizeof(T));
  }
  template <typename T>
  void put_span(std::span<const T> v) {
    if (v.empty()) return;
    const size_t old = bytes_.size();
    bytes_.resize(old + v.size_bytes());
    std::memcpy(bytes_.data() + old, v.data(), v.size_bytes());
  }
  void pad4() { bytes_.resize((bytes_.size() + 3) / 4 * 4, 0); }
  size_t size() const { return bytes_.size(); }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

bool is_viewer_name(const std::string& name) { return is_frame_file_name(name, ".bin"); }

class ViewerExporter final : public Exporter {
 public:
  std::string_view name() const override { return "viewer"; }
  void prepare(const ExportRun& run) override { ensure_writable_dir(run.out_dir / "viewer"); }
  void begin(const ExportRun& run) override {
    dir_ = run.out_dir / "viewer";
    width_ = run.width;
    height_ = run.height;
    filter_ = run.points;
  }
  void frame(const ExportFrame& f) override {
    last_ = {-1, frames_, frames_ - 1};
    points_before_ = points_;
    LINGBOT_CHECK(f.index == frames_, "viewer frames must be written in order: got frame ", f.index, ", expected ",
                  frames_);
    last_.index = f.index;
    const PointBatch points = frame_points(f, width_, filter_);
    write_file_atomic(dir_ / viewer_frame_file_name(f.index),
                      encode_viewer_frame(f, width_, height_, points, filter_.conf_threshold));
    ++frames_;
    points_ += static_cast<int64_t>(points.size());
  }
  void discard_frame() override {
    if (last_.index >= 0) remove_output_file(dir_ / viewer_frame_file_name(last_.index));
    frames_ = last_.frames_before;
    points_ = points_before_;
  }
  void finish() override {}
  nlohmann::json report() const override {
    return {{"files",
             {{"viewer/NNNNNN.bin",
               "per frame: pose, the points.ply points with confidence, a small frame image (docs/viewer.md: Viewer "
               "frame format); read by 'lingbot-map view'"}}},
            {"frames", frames_},
            {"points", points_}};
  }

 private:
  fs::path dir_;
  int width_ = 0, height_ = 0;
  PointFilter filter_;
  int64_t frames_ = 0, points_ = 0;
  LastFrame last_;
  int64_t points_before_ = 0;
};

}  // namespace

std::string viewer_frame_file_name(int64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "%06lld.bin", static_cast<long long>(index));
  return name;
}

std::vector<uint8_t> encode_viewer_frame(const ExportFrame& f, int width, int height, const PointBatch& pts,
                                         float conf_threshold, int preview_max_side) {
  LINGBOT_CHECK(width > 0 && height > 0, "viewer frame ", f.index, ": image size ", width, "x", height);
  LINGBOT_CHECK(preview_max_side >= 1, "viewer preview size must be >= 1, got ", preview_max_side);
  const size_t W = static_cast<size_t>(width), H = static_cast<size_t>(height), hw = W * H;
  LINGBOT_CHECK(f.image.size() == 3 * hw && f.depth.size() == hw, "viewer frame ", f.index, ": image has ",
                f.image.size(), " values and depth ", f.depth.size(), ", expected ", 3 * hw, " and ", hw);
  const size_t n = pts.size();
  LINGBOT_CHECK(pts.xyz.size() == 3 * n && pts.rgb.size() == 3 * n && (pts.conf.empty() || pts.conf.size() == n),
                "viewer frame ", f.index, ": ", n, " points need ", n, " confidences, got ", pts.conf.size());

  // Frame preview: W / k x H / k, k the smallest integer bringing the longer side to preview_max_side
  // or below; each preview pixel the box average of the frame pixels it spans, k or k + 1 a side, so
  // the preview covers the whole frame (the viewer stretches it over the whole frustum: 518 / 4 with
  // blocks of 4 left 2 columns out and shifted the picture up to 2 pixels).
  const size_t max_side = static_cast<size_t>(preview_max_side);
  const size_t k = (std::max(W, H) + max_side - 1) / max_side;
  const size_t pw = std::max<size_t>(1, W / k), ph = std::max<size_t>(1, H / k);
  std::vector<uint8_t> preview(pw * ph * 3);
  for (size_t y = 0; y < ph; ++y) {
    const size_t y0 = y * H / ph, y1 = (y + 1) * H / ph;
    for (size_t x = 0; x < pw; ++x) {
      const size_t x0 = x * W / pw, x1 = (x + 1) * W / pw;
      double sum[3] = {0, 0, 0};
      for (size_t yy = y0; yy < y1; ++yy)
        for (size_t xx = x0; xx < x1; ++xx)
          for (size_t c = 0; c < 3; ++c) sum[c] += f.image[c * hw + yy * W + xx];
      const double count = static_cast<double>((y1 - y0) * (x1 - x0));
      for (size_t c = 0; c < 3; ++c)
        preview[(y * pw + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(std::nearbyint(sum[c] / count * 255.0), 0.0, 255.0));
    }
  }
  const DepthRange range = depth_preview_range(f.depth);

  ByteWriter w;
  w.put_span(std::span<const char>(kViewerMagic, 4));
  w.put(kViewerFormatVersion);
  w.put(kViewerHeaderBytes);
  w.put(static_cast<uint32_t>((f.keyframe ? kViewerFlagKeyframe : 0) |
                              (f.timestamp_unit == TimestampUnit::Seconds ? kViewerFlagTimestampSeconds : 0)));
  w.put(static_cast<int64_t>(f.index));
  w.put(f.timestamp);
  w.put(static_cast<uint32_t>(W));
  w.put(static_cast<uint32_t>(H));
  for (const double v : f.c2w) w.put(static_cast<float>(v));
  for (const size_t i : {size_t{0}, size_t{4}, size_t{2}, size_t{5}}) w.put(static_cast<float>(f.intrinsics[i]));
  w.put(static_cast<uint32_t>(n));
  w.put(conf_threshold);
  w.put(static_cast<uint32_t>(pw));
  w.put(static_cast<uint32_t>(ph));
  w.put(range.lo);
  w.put(range.hi);
  LINGBOT_CHECK(w.size() == kViewerHeaderBytes, "internal: viewer header is ", w.size(), " bytes");
  w.put_span(std::span<const float>(pts.xyz));
  if (pts.conf.empty()) {
    for (size_t i = 0; i < n; ++i) w.put(std::numeric_limits<float>::infinity());  // no confidence: always shown
  } else {
    w.put_span(std::span<const float>(pts.conf));
  }
  w.put_span(std::span<const uint8_t>(pts.rgb));
  w.pad4();
  w.put_span(std::span<const uint8_t>(preview));
  w.pad4();
  return w.take();
}

std::unique_ptr<Exporter> make_viewer_exporter() { return std::make_unique<ViewerExporter>(); }
void remove_viewer_outputs(const fs::path& out_dir) { remove_files_in(out_dir / "viewer", is_viewer_name); }

}  // namespace lingbot::io
