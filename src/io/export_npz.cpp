#include "io/export_npz.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "io/byte_source.h"
#include "io/file_util.h"
#include "io/npy.h"
#include "io/zip_archive.h"
#include "io/zip_writer.h"

namespace lingbot::io {

namespace fs = std::filesystem;

namespace {

size_t dtype_size(const std::string& descr) {
  if (descr == "<f4") return 4;
  if (descr == "|b1" || descr == "|u1") return 1;
  throw Error("npz: unsupported dtype '" + descr + "'");
}

size_t element_count(std::span<const int64_t> shape) {
  size_t n = 1;
  for (int64_t d : shape) {
    LINGBOT_CHECK(d >= 0, "npz: negative dimension ", d);
    n *= static_cast<size_t>(d);
  }
  return n;
}

std::span<const uint8_t> as_bytes(std::span<const float> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()};
}

// The per-frame arrays of one frame, in the order they are written (and stacked). `arrays` views
// w2c and K of the object itself: built in place, never copied or moved.
struct FrameArrays {
  std::array<float, 12> w2c{};
  std::array<float, 9> K{};
  std::vector<NpzArray> arrays;

  FrameArrays(const ExportFrame& f, int64_t w, int64_t h) {
    const size_t hw = static_cast<size_t>(w * h);
    LINGBOT_CHECK(f.image.size() == 3 * hw && f.depth.size() == hw &&
                      (f.depth_conf.empty() || f.depth_conf.size() == hw) && f.pose_enc.size() == 9,
                  "npz: frame ", f.index, " arrays do not match the ", w, "x", h, " run");
    for (size_t i = 0; i < 12; ++i) w2c[i] = static_cast<float>(f.w2c[i]);  // f32 values of the engine: exact
    for (size_t i = 0; i < 9; ++i) K[i] = static_cast<float>(f.intrinsics[i]);
    arrays.push_back({"images", "<f4", {3, h, w}, as_bytes(f.image)});
    arrays.push_back({"pose_enc", "<f4", {9}, as_bytes(f.pose_enc)});
    arrays.push_back({"depth", "<f4", {h, w, 1}, as_bytes(f.depth)});
    if (!f.depth_conf.empty()) arrays.push_back({"depth_conf", "<f4", {h, w}, as_bytes(f.depth_conf)});
    arrays.push_back({"extrinsic", "<f4", {3, 4}, as_bytes(w2c)});
    arrays.push_back({"intrinsic", "<f4", {3, 3}, as_bytes(K)});
  }
  FrameArrays(const FrameArrays&) = delete;
  FrameArrays& operator=(const FrameArrays&) = delete;
};

// Reads the data of entry "<key>.npy" (after its .npy header) of an .npz we wrote.
struct EntryData {
  uint64_t offset = 0, size = 0;
};
EntryData locate_npy_data(const ByteSource& src, const ZipDirectory& dir, const std::string& key) {
  const ZipDirectory::Entry* e = dir.find(key + ".npy");
  LINGBOT_CHECK(e != nullptr, src.label(), ": no entry ", key, ".npy");
  const uint64_t off = dir.data_offset(*e);
  uint8_t head[10];
  LINGBOT_CHECK(e->size >= sizeof head, src.label(), ": entry ", key, ".npy is not an .npy array");
  src.read_at(off, head, sizeof head);
  LINGBOT_CHECK(std::memcmp(head, "\x93NUMPY\x01", 7) == 0, src.label(), ": entry ", key, ".npy is not an .npy 1.0 array");
  const uint64_t hlen = head[8] | (uint64_t{head[9]} << 8);
  LINGBOT_CHECK(10 + hlen <= e->size, src.label(), ": entry ", key, ".npy has a bad header");
  return {off + 10 + hlen, e->size - 10 - hlen};
}

}  // namespace

void write_npz(const fs::path& path, std::span<const NpzArray> arrays) {
  try {
    ZipWriter zip(temp_path(path));
    for (const NpzArray& a : arrays) {
      LINGBOT_CHECK(a.bytes.size() == element_count(a.shape) * dtype_size(a.descr), "npz ", path.string(), ": array ",
                    a.name, " has ", a.bytes.size(), " bytes, its shape and dtype need ",
                    element_count(a.shape) * dtype_size(a.descr));
      const std::string header = npy_header(a.descr, a.shape);
      zip.begin_entry(a.name + ".npy");
      zip.write(header.data(), header.size());
      zip.write(a.bytes.data(), a.bytes.size());
      zip.end_entry();
    }
    zip.close();
  } catch (...) {
    discard_temp_file(path);
    throw;
  }
  commit_temp_file(path);
}

// ---------------------------------------------------------------------------------------------
PredictionsWriter::PredictionsWriter(const fs::path& dir, int width, int height)
    : dir_(dir), width_(width), height_(height) {
  LINGBOT_CHECK(width > 0 && height > 0, "npz: bad frame size ", width, "x", height);
}

fs::path PredictionsWriter::frame_path(int64_t index) const {
  return dir_ / ("frame_" + frame_file_name(index, ".npz"));
}

void PredictionsWriter::append(const ExportFrame& f) {
  LINGBOT_CHECK(indices_.empty() || f.index > indices_.back(), "npz: frame ", f.index, " after frame ", indices_.back());
  const FrameArrays a(f, width_, height_);
  write_npz(frame_path(f.index), a.arrays);
  indices_.push_back(f.index);
  is_keyframe_.push_back(f.keyframe ? 1 : 0);
  frame_type_.push_back(f.frame_type());
  write_meta();
}

void PredictionsWriter::write_meta() const {
  const int64_t s = frames();
  const NpzArray meta[] = {{"is_keyframe", "|b1", {s}, is_keyframe_}, {"frame_type", "|u1", {s}, frame_type_}};
  write_npz(dir_ / "meta.npz", meta);
}

void PredictionsWriter::truncate(int64_t frames) {
  LINGBOT_CHECK(frames >= 0 && frames <= this->frames(), "internal: npz: truncate to ", frames, " of ",
                this->frames(), " frames");
  // A frame whose meta.npz failed is in indices_ already; one whose own file failed left no file.
  if (frames == this->frames()) return;
  for (size_t i = static_cast<size_t>(frames); i < indices_.size(); ++i) remove_output_file(frame_path(indices_[i]));
  indices_.resize(static_cast<size_t>(frames));
  is_keyframe_.resize(static_cast<size_t>(frames));
  frame_type_.resize(static_cast<size_t>(frames));
  if (frames > 0)
    write_meta();
  else
    remove_output_file(dir_ / "meta.npz");
}

std::string PredictionsWriter::write_combined(const fs::path& path) const {
  const int64_t s = frames();
  if (s == 0) return "no frames";
  if (s > kPredictionsNpzMaxFrames)
    return std::to_string(s) + " frames > " + std::to_string(kPredictionsNpzMaxFrames) +
           " (predictions/ holds every frame)";
  // Keys and per-frame shapes from the first frame's file; every other frame must match them.
  const auto first_src = ByteSource::open_file(frame_path(indices_.front()).string());
  const ZipDirectory first_dir(*first_src);
  struct Key {
    std::string name;
    uint64_t frame_bytes;
    std::vector<int64_t> shape;  // per frame
  };
  const int64_t h = height_, w = width_;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> known = {
      {"images", {3, h, w}}, {"pose_enc", {9}}, {"depth", {h, w, 1}}, {"depth_conf", {h, w}}, {"extrinsic", {3, 4}},
      {"intrinsic", {3, 3}}};
  std::vector<Key> keys;
  uint64_t total = 0;
  for (const auto& [name, shape] : known) {
    if (first_dir.find(name + ".npy") == nullptr) continue;
    const uint64_t bytes = element_count(shape) * 4;
    keys.push_back({name, bytes, shape});
    total += bytes * static_cast<uint64_t>(s) + 256;
  }
  if (total + 2 * static_cast<uint64_t>(s) + 65536 > ZipWriter::kMaxBytes)
    return "the arrays would exceed 4 GiB (no ZIP64; predictions/ holds every frame)";

  try {
    ZipWriter zip(temp_path(path));
    std::vector<uint8_t> buf;
    for (const Key& k : keys) {
      std::vector<int64_t> shape = {s};
      shape.insert(shape.end(), k.shape.begin(), k.shape.end());
      const std::string header = npy_header("<f4", shape);
      zip.begin_entry(k.name + ".npy");
      zip.write(header.data(), header.size());
      for (int64_t index : indices_) {
        const auto src = ByteSource::open_file(frame_path(index).string());
        const ZipDirectory dir(*src);
        const EntryData d = locate_npy_data(*src, dir, k.name);
        LINGBOT_CHECK(d.size == k.frame_bytes, src->label(), ": ", k.name, " has ", d.size, " bytes, expected ",
                      k.frame_bytes);
        buf.resize(static_cast<size_t>(d.size));
        src->read_at(d.offset, buf.data(), buf.size());
        zip.write(buf.data(), buf.size());
      }
      zip.end_entry();
    }
    for (const auto& [name, descr, values] :
         {std::tuple{"is_keyframe", "|b1", &is_keyframe_}, std::tuple{"frame_type", "|u1", &frame_type_}}) {
      const std::vector<int64_t> shape = {s};
      const std::string header = npy_header(descr, shape);
      zip.begin_entry(std::string(name) + ".npy");
      zip.write(header.data(), header.size());
      zip.write(values->data(), values->size());
      zip.end_entry();
    }
    zip.close();
  } catch (...) {
    discard_temp_file(path);
    throw;
  }
  commit_temp_file(path);
  return "";
}

// ---------------------------------------------------------------------------------------------
namespace {

bool is_predictions_name(const std::string& n) {
  return n == "meta.npz" || (n.rfind("frame_", 0) == 0 && n.ends_with(".npz"));  // remove_files_in: NAME.tmp too
}

class NpzExporter final : public Exporter {
 public:
  std::string_view name() const override { return "npz"; }
  void prepare(const ExportRun& run) override {
    ensure_writable_dir(run.out_dir / "predictions");
    check_output_file_target(run.out_dir / "predictions.npz");
  }
  void begin(const ExportRun& run) override {
    out_ = run.out_dir;
    writer_.emplace(run.out_dir / "predictions", run.width, run.height);
  }
  void frame(const ExportFrame& f) override {
    frames_before_ = writer_->frames();
    writer_->append(f);
  }
  void discard_frame() override { writer_->truncate(frames_before_); }
  void finish() override {
    combined_ = writer_->write_combined(out_ / "predictions.npz");
    finished_ = true;
  }
  nlohmann::json report() const override {
    const int64_t frames = writer_ ? writer_->frames() : 0;
    nlohmann::json files = {
        {"predictions/frame_NNNNNN.npz",
         "images [3,H,W], pose_enc [9], depth [H,W,1], depth_conf [H,W], extrinsic [3,4] world->camera, "
         "intrinsic [3,3]; float32"}};
    if (frames > 0)  // written with the first frame
      files["predictions/meta.npz"] = "is_keyframe bool [S], frame_type uint8 [S] (0 scale, 1 keyframe, 2 non-keyframe)";
    nlohmann::json r = {{"frames", frames}};
    if (finished_ && combined_.empty()) files["predictions.npz"] = "the arrays above stacked over the S frames";
    if (finished_ && !combined_.empty()) r["note"] = "predictions.npz not written: " + combined_;
    r["files"] = files;
    return r;
  }

 private:
  fs::path out_;
  std::optional<PredictionsWriter> writer_;
  std::string combined_;
  bool finished_ = false;
  int64_t frames_before_ = 0;
};

}  // namespace

std::unique_ptr<Exporter> make_npz_exporter() { return std::make_unique<NpzExporter>(); }

void remove_npz_outputs(const fs::path& out_dir) {
  remove_files_in(out_dir / "predictions", is_predictions_name);
  remove_output_file(out_dir / "predictions.npz");
}

}  // namespace lingbot::io
