#include "io/viewer_frames.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "io/file_util.h"

namespace lingbot::io {

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

bool valid_depth(float d) { return std::isfinite(d) && d > 0; }

}  // namespace

std::string viewer_frame_file_name(int64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "%06lld.bin", static_cast<long long>(index));
  return name;
}

std::vector<uint8_t> encode_viewer_frame(const ViewerFrame& f, int preview_max_side) {
  LINGBOT_CHECK(f.width > 0 && f.height > 0, "viewer frame ", f.index, ": image size ", f.width, "x", f.height);
  LINGBOT_CHECK(preview_max_side >= 1, "viewer preview size must be >= 1, got ", preview_max_side);
  const size_t W = static_cast<size_t>(f.width), H = static_cast<size_t>(f.height), hw = W * H;
  LINGBOT_CHECK(f.image_chw.size() == 3 * hw && f.depth.size() == hw, "viewer frame ", f.index, ": image has ",
                f.image_chw.size(), " values and depth ", f.depth.size(), ", expected ", 3 * hw, " and ", hw);
  LINGBOT_CHECK(f.points != nullptr, "viewer frame ", f.index, ": no points");
  const PointBatch& pts = *f.points;
  const size_t n = pts.size();
  LINGBOT_CHECK(pts.xyz.size() == 3 * n && pts.rgb.size() == 3 * n && (pts.conf.empty() || pts.conf.size() == n),
                "viewer frame ", f.index, ": ", n, " points need ", n, " confidences, got ", pts.conf.size());

  // Previews: box average over f x f blocks, f the smallest integer bringing the longer side to
  // preview_max_side or below.
  const size_t longer = std::max(W, H);
  const size_t factor = (longer + static_cast<size_t>(preview_max_side) - 1) / static_cast<size_t>(preview_max_side);
  const size_t pw = std::max<size_t>(1, W / factor), ph = std::max<size_t>(1, H / factor);
  std::vector<uint8_t> prgb(pw * ph * 3);
  std::vector<float> pdepth(pw * ph, 0.0f);
  float dmin = 0, dmax = 0;
  bool any = false;
  for (size_t y = 0; y < ph; ++y) {
    for (size_t x = 0; x < pw; ++x) {
      double rgb[3] = {0, 0, 0}, dsum = 0;
      size_t dcount = 0;
      for (size_t yy = y * factor; yy < std::min(H, (y + 1) * factor); ++yy) {
        for (size_t xx = x * factor; xx < std::min(W, (x + 1) * factor); ++xx) {
          const size_t i = yy * W + xx;
          for (size_t c = 0; c < 3; ++c) rgb[c] += f.image_chw[c * hw + i];
          if (valid_depth(f.depth[i])) {
            dsum += f.depth[i];
            ++dcount;
          }
        }
      }
      const double cells = static_cast<double>(std::min(factor, H - y * factor) * std::min(factor, W - x * factor));
      for (size_t c = 0; c < 3; ++c)
        prgb[(y * pw + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(std::nearbyint(rgb[c] / cells * 255.0), 0.0, 255.0));
      if (dcount > 0) pdepth[y * pw + x] = static_cast<float>(dsum / static_cast<double>(dcount));
    }
  }
  for (const float d : f.depth) {
    if (!valid_depth(d)) continue;
    dmin = any ? std::min(dmin, d) : d;
    dmax = any ? std::max(dmax, d) : d;
    any = true;
  }
  std::vector<uint16_t> qdepth(pw * ph, 0);
  const double range = static_cast<double>(dmax) - static_cast<double>(dmin);
  for (size_t i = 0; i < qdepth.size(); ++i) {
    if (!valid_depth(pdepth[i])) continue;
    const double t = range > 0 ? (static_cast<double>(pdepth[i]) - dmin) / range : 0.0;
    qdepth[i] = static_cast<uint16_t>(1 + std::lround(std::clamp(t, 0.0, 1.0) * 65534.0));
  }

  const Mat44 c2w = rigid_inverse_4x4(f.w2c);
  ByteWriter w;
  w.put_span(std::span<const char>(kViewerMagic, 4));
  w.put(kViewerFormatVersion);
  w.put(kViewerHeaderBytes);
  w.put(static_cast<uint32_t>(f.keyframe ? kViewerFlagKeyframe : 0));
  w.put(static_cast<int64_t>(f.index));
  w.put(f.timestamp);
  w.put(static_cast<uint32_t>(W));
  w.put(static_cast<uint32_t>(H));
  for (int i = 0; i < 12; ++i) w.put(static_cast<float>(c2w[static_cast<size_t>(i)]));
  for (const size_t k : {size_t{0}, size_t{4}, size_t{2}, size_t{5}}) w.put(static_cast<float>(f.intrinsics[k]));
  w.put(static_cast<uint32_t>(n));
  w.put(f.conf_threshold);
  w.put(static_cast<uint32_t>(pw));
  w.put(static_cast<uint32_t>(ph));
  w.put(dmin);
  w.put(dmax);
  LINGBOT_CHECK(w.size() == kViewerHeaderBytes, "internal: viewer header is ", w.size(), " bytes");
  w.put_span(std::span<const float>(pts.xyz));
  if (pts.conf.empty()) {
    for (size_t i = 0; i < n; ++i) w.put(std::numeric_limits<float>::infinity());  // no confidence: always shown
  } else {
    w.put_span(std::span<const float>(pts.conf));
  }
  w.put_span(std::span<const uint8_t>(pts.rgb));
  w.pad4();
  w.put_span(std::span<const uint8_t>(prgb));
  w.pad4();
  w.put_span(std::span<const uint16_t>(qdepth));
  w.pad4();
  return w.take();
}

ViewerFrameWriter::ViewerFrameWriter(const std::filesystem::path& dir) : dir_(dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  LINGBOT_CHECK(!ec, "cannot create folder ", dir_.string(), ": ", ec.message());
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    const bool frame_name = name.size() == 10 && name.ends_with(".bin") &&
                            std::all_of(name.begin(), name.begin() + 6, [](char c) { return c >= '0' && c <= '9'; });
    if (entry.is_regular_file() && frame_name) {
      std::filesystem::remove(entry.path(), ec);
      LINGBOT_CHECK(!ec, "cannot remove old ", entry.path().string(), ": ", ec.message());
    }
  }
}

void ViewerFrameWriter::append(const ViewerFrame& f) {
  LINGBOT_CHECK(f.index == frames_, "viewer frames must be written in order: got frame ", f.index, ", expected ",
                frames_);
  write_file_atomic(dir_ / viewer_frame_file_name(f.index), encode_viewer_frame(f));
  ++frames_;
}

}  // namespace lingbot::io
