#include "io/writers.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/printf_string.h"
#include "io/file_util.h"
#include "io/npy.h"
#include "io/output_validity.h"
#include "io/png.h"
#include "io/preprocess.h"

namespace lingbot::io {

static_assert(std::endian::native == std::endian::little, "the PLY writer assumes a little-endian host");

namespace {

void write_all(std::FILE* f, const std::filesystem::path& path, const void* data, size_t n) {
  if (n == 0) return;
  LINGBOT_CHECK(std::fwrite(data, 1, n, f) == n, "cannot write ", path.string(), ": ", std::strerror(errno));
}
void write_all(std::FILE* f, const std::filesystem::path& path, const std::string& s) {
  write_all(f, path, s.data(), s.size());
}
void seek(std::FILE* f, const std::filesystem::path& path, long pos, int whence) {
  LINGBOT_CHECK(std::fseek(f, pos, whence) == 0, "cannot write ", path.string(), ": ", std::strerror(errno));
}
void flush_file(std::FILE* f, const std::filesystem::path& path) {
  LINGBOT_CHECK(std::fflush(f) == 0, "cannot write ", path.string(), ": ", std::strerror(errno));
}


nlohmann::json rows(const double* m, int r, int c) {
  nlohmann::json out = nlohmann::json::array();
  for (int i = 0; i < r; ++i) {
    nlohmann::json row = nlohmann::json::array();
    for (int j = 0; j < c; ++j) row.push_back(m[i * c + j]);
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

Mat44 rigid_inverse_4x4(const RigidTransform<double>& m) {
  const RigidTransform<double> inv = rigid_inverse(m);
  Mat44 out{};
  std::copy(inv.begin(), inv.end(), out.begin());
  out[15] = 1.0;
  return out;
}

std::array<double, 4> rotation_to_quaternion_xyzw(const RigidTransform<double>& m) {
  const std::array<double, 4> q = rotation_to_quat_xyzw<double>({m[0], m[1], m[2], m[4], m[5], m[6], m[8], m[9], m[10]});
  const double n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  return {q[0] / n, q[1] / n, q[2] / n, q[3] / n};
}

// ---------------------------------------------------------------------------------------------
void check_poses_metadata(const nlohmann::json& meta) {
  LINGBOT_CHECK(meta.is_null() || meta.is_object(), "poses.json metadata must be a JSON object");
  if (meta.is_object())
    for (const auto& [k, v] : meta.items())
      LINGBOT_CHECK(k != "frames" && k != "format" && k != "version", "poses.json metadata must not contain the key '", k,
                    "' (the file's own)");
}

PosesJsonWriter::PosesJsonWriter(const std::filesystem::path& path, const nlohmann::json& meta) : path_(path) {
  check_poses_metadata(meta);
  nlohmann::json head = {{"format", "lingbot-map poses"}, {"version", 1}};
  if (meta.is_object())
    for (const auto& [k, v] : meta.items()) head[k] = v;
  std::string text = json_text(head);
  text.pop_back();  // drop the closing brace; "frames" follows
  text += ",\"frames\":[";
  trailer_pos_ = static_cast<long>(text.size());
  file_ = create_with_content(path_, text + "\n]}\n");
}


void PosesJsonWriter::append(const FramePose& p) {
  nlohmann::json frame = {{"index", p.index},
                          {"timestamp", p.timestamp},
                          {"keyframe", p.keyframe},
                          {"source", p.source}};
  if (p.placement) frame["source_size"] = {p.placement->source.width, p.placement->source.height};
  frame["valid"] = p.valid;
  // nlohmann writes a non-finite double as null: a frame must never carry such matrices.
  LINGBOT_CHECK(!p.valid || (all_finite(p.c2w) && all_finite(p.intrinsics)), "poses.json: frame ", p.index,
                " is marked valid but has a non-finite camera value");
  if (p.valid) {
    Mat44 c2w{};
    std::copy(p.c2w.begin(), p.c2w.end(), c2w.begin());
    c2w[15] = 1.0;
    const RigidTransform<double> w2c = rigid_inverse(p.c2w);
    frame["c2w"] = rows(c2w.data(), 4, 4);
    frame["w2c"] = rows(w2c.data(), 3, 4);
    frame["intrinsics"] = rows(p.intrinsics.data(), 3, 3);
    if (p.placement) frame["source_intrinsics"] = rows(source_intrinsics(p.intrinsics, *p.placement).data(), 3, 3);
  }
  std::string text = (frames_ > 0 ? ",\n" : "\n") + json_text(frame);
  const std::string trailer = "\n]}\n";
  try {
    seek(file_.get(), path_, trailer_pos_, SEEK_SET);
    // The new content is longer than the old trailer it replaced, so nothing stale remains after it.
    write_all(file_.get(), path_, text + trailer);
    flush_file(file_.get(), path_);
  } catch (const Error&) {
    // Restore the document of the frames before this one (the trailer fits where it was).
    roll_back_failed_append(file_.get(), trailer_pos_);
    if (std::fwrite(trailer.data(), 1, trailer.size(), file_.get()) == trailer.size()) (void)std::fflush(file_.get());
    throw;
  }
  trailer_pos_ += static_cast<long>(text.size());
  ++frames_;
}

void PosesJsonWriter::rewind(const Mark& m) {
  LINGBOT_CHECK(m.frames <= frames_ && m.trailer_pos <= trailer_pos_, "internal: ", path_.string(), " rewind past its end");
  // The trailer first, in place over the frames taken back (no new disk blocks on a full disk), then
  // the cut: a failure at either step leaves a document that parses.
  const std::string trailer = "\n]}\n";
  seek(file_.get(), path_, m.trailer_pos, SEEK_SET);
  write_all(file_.get(), path_, trailer);
  flush_file(file_.get(), path_);
  trailer_pos_ = m.trailer_pos;
  frames_ = m.frames;
  cut_file_back(file_.get(), path_, m.trailer_pos + static_cast<long>(trailer.size()));
}

// ---------------------------------------------------------------------------------------------
bool TumWriter::append(double timestamp, const RigidTransform<double>& c2w) {
  if (!all_finite(c2w)) return false;
  const auto q = rotation_to_quaternion_xyzw(c2w);
  file_.append(printf_string("%.6f %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n", timestamp, c2w[3], c2w[7], c2w[11], q[0], q[1],
                             q[2], q[3]));
  return true;
}

// ---------------------------------------------------------------------------------------------
PlyWriter::PlyWriter(const std::filesystem::path& path) : path_(path) {
  const std::string head =
      "ply\nformat binary_little_endian 1.0\ncomment written by lingbot-map\nelement vertex ";
  const std::string tail =
      "\nproperty float x\nproperty float y\nproperty float z\n"
      "property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n";
  count_pos_ = static_cast<long>(head.size());
  std::string count = "0";
  count.resize(kPlyCountWidth, ' ');
  file_ = create_with_content(path_, head + count + tail);
  data_pos_ = static_cast<long>(head.size() + count.size() + tail.size());
}

PlyWriter::~PlyWriter() {
  if (!file_) return;
  try {
    flush();
  } catch (const Error&) {
    // A destructor must not throw; the file keeps the count of the last successful flush.
  }
}

void PlyWriter::append_points(std::span<const float> xyz, std::span<const uint8_t> rgb) {
  LINGBOT_CHECK(xyz.size() % 3 == 0 && xyz.size() == rgb.size(), "PLY points: ", xyz.size(),
                " coordinates and ", rgb.size(), " colour bytes do not describe the same points");
  const size_t n = xyz.size() / 3;
  const size_t old = buffer_.size();
  buffer_.resize(old + n * 15);
  char* out = buffer_.data() + old;
  for (size_t i = 0; i < n; ++i, out += 15) {
    std::memcpy(out, xyz.data() + i * 3, 12);
    std::memcpy(out + 12, rgb.data() + i * 3, 3);
  }
  pending_ += static_cast<int64_t>(n);
}

void PlyWriter::flush() {
  if (pending_ == 0) return;
  const long valid = data_pos_ + static_cast<long>(written_ * 15);
  try {
    seek(file_.get(), path_, valid, SEEK_SET);
    write_all(file_.get(), path_, buffer_);
    // Make the data durable in the stream before the header claims it.
    flush_file(file_.get(), path_);
  } catch (const Error&) {
    // The points of this flush are dropped; the file keeps exactly the vertices its header counts.
    roll_back_failed_append(file_.get(), valid);
    buffer_.clear();
    pending_ = 0;
    throw;
  }
  buffer_.clear();
  std::string count = std::to_string(written_ + pending_);
  LINGBOT_CHECK(count.size() <= static_cast<size_t>(kPlyCountWidth), "PLY vertex count ", count, " too large");
  count.resize(kPlyCountWidth, ' ');
  seek(file_.get(), path_, count_pos_, SEEK_SET);
  write_all(file_.get(), path_, count);
  flush_file(file_.get(), path_);
  written_ += pending_;
  pending_ = 0;
}

void PlyWriter::rewind(const Mark& m) {
  LINGBOT_CHECK(m.points <= written_, "internal: ", path_.string(), " rewind past its end");
  buffer_.clear();
  pending_ = 0;
  // The header's count first (in place: no new disk blocks), then the cut: the header never
  // counts vertices the file does not have.
  std::string count = std::to_string(m.points);
  count.resize(kPlyCountWidth, ' ');
  seek(file_.get(), path_, count_pos_, SEEK_SET);
  write_all(file_.get(), path_, count);
  flush_file(file_.get(), path_);
  written_ = m.points;
  cut_file_back(file_.get(), path_, data_pos_ + static_cast<long>(m.points * 15));
}

// ---------------------------------------------------------------------------------------------
uint16_t quantize_u16(float value, double unit) {
  if (!std::isfinite(value) || value <= 0) return 0;
  const double q = std::nearbyint(static_cast<double>(value) / unit);
  if (q < 1) return 1;
  if (q > 65535) return 65535;
  return static_cast<uint16_t>(q);
}

int64_t write_map_png16(const std::filesystem::path& path, int width, int height, std::span<const float> values,
                        double unit, const std::string& quantity) {
  LINGBOT_CHECK(unit > 0, "PNG map unit must be positive, got ", unit);
  LINGBOT_CHECK(width > 0 && height > 0 && values.size() == static_cast<size_t>(width) * height, "cannot write ",
                path.string(), ": ", values.size(), " values do not fill ", width, "x", height);
  std::vector<uint16_t> q(values.size());
  int64_t clipped = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    q[i] = quantize_u16(values[i], unit);
    // 65535 itself is clipped only when the value lies past 65535 units' rounding interval.
    clipped += q[i] == 65535 && static_cast<double>(values[i]) / unit >= 65535.5 ? 1 : 0;
  }
  char unit_text[64];
  std::snprintf(unit_text, sizeof(unit_text), "%.17g", unit);
  const PngText text[] = {{"lingbot:quantity", quantity}, {"lingbot:unit", unit_text}};
  write_png_gray16(path, width, height, q, text);
  return clipped;
}

std::array<std::string, 4> depth_frame_file_names(int64_t index) {
  return {frame_file_name(index, ".png"), frame_file_name(index, ".npy"), frame_file_name(index, "_conf.png"),
          frame_file_name(index, "_conf.npy")};
}

ClippedSamples write_depth_frame(const std::filesystem::path& dir, int64_t index, int width, int height,
                                 std::span<const float> depth, std::span<const float> conf) {
  const std::array<std::string, 4> names = depth_frame_file_names(index);
  const std::vector<int64_t> shape = {height, width};
  ClippedSamples clipped;
  clipped.depth = write_map_png16(dir / names[0], width, height, depth, kDepthPngUnit, "depth");
  write_npy_f32(dir / names[1], shape, depth);
  if (!conf.empty()) {
    clipped.confidence = write_map_png16(dir / names[2], width, height, conf, kConfidencePngUnit, "confidence");
    write_npy_f32(dir / names[3], shape, conf);
  }
  return clipped;
}

PointBatch select_points(std::span<const float> points, std::span<const float> image_chw, std::span<const float> conf,
                         float conf_threshold, int downsample, std::span<const float> depth, const PointArea& area) {
  LINGBOT_CHECK(downsample >= 1, "downsample must be >= 1, got ", downsample);
  LINGBOT_CHECK(points.size() % 3 == 0, "world points: ", points.size(), " values are not [N, 3]");
  const size_t n = points.size() / 3;
  LINGBOT_CHECK(image_chw.size() == 3 * n, "point colours: image has ", image_chw.size(), " values, expected ", 3 * n);
  LINGBOT_CHECK(conf.empty() || conf.size() == n, "point confidence: ", conf.size(), " values, expected ", n);
  LINGBOT_CHECK(depth.empty() || depth.size() == n, "point depth: ", depth.size(), " values, expected ", n);
  const size_t fw = static_cast<size_t>(std::max(area.frame_width, 0));
  LINGBOT_CHECK(area.frame_width >= 0 && (fw == 0 || n % fw == 0), "point area: ", n, " points are not rows of ",
                area.frame_width, " pixels");
  LINGBOT_CHECK(area.mask.empty() || area.mask.size() == n, "point mask: ", area.mask.size(), " values, expected ", n);
  PointBatch out;
  size_t kept = 0;  // points that passed the filters so far; every downsample-th is emitted
  for (size_t i = 0; i < n; ++i) {
    const float* p = points.data() + i * 3;
    if (!std::isfinite(p[0]) || !std::isfinite(p[1]) || !std::isfinite(p[2])) continue;
    if (!conf.empty() && (!is_valid_map_value(conf[i]) || !(conf[i] > conf_threshold))) continue;
    if (!depth.empty() && !is_valid_map_value(depth[i])) continue;
    if (fw != 0 && !area.rect.contains(static_cast<int>(i % fw), static_cast<int>(i / fw))) continue;
    if (!area.mask.empty() && area.mask[i] == 0) continue;
    if (kept++ % static_cast<size_t>(downsample) != 0) continue;
    out.xyz.insert(out.xyz.end(), p, p + 3);
    out.pixel.push_back(static_cast<uint32_t>(i));
    if (!conf.empty()) out.conf.push_back(conf[i]);
    for (int c = 0; c < 3; ++c) {
      const float v = image_chw[static_cast<size_t>(c) * n + i];
      out.rgb.push_back(static_cast<uint8_t>(std::clamp(std::nearbyint(v * 255.0f), 0.0f, 255.0f)));
    }
  }
  return out;
}

std::string json_text(const nlohmann::json& doc, int indent) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void write_json_file(const std::filesystem::path& path, const nlohmann::json& doc) {
  write_file_atomic(path, json_text(doc, 2) + "\n");
}

}  // namespace lingbot::io
