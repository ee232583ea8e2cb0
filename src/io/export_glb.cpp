#include "io/export_glb.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <tiny_gltf.h>

#include "core/error.h"
#include "io/file_util.h"

namespace lingbot::io {

namespace fs = std::filesystem;

GlbSceneBuilder::GlbSceneBuilder(int64_t max_points, uint64_t seed) : max_points_(max_points), rng_(seed) {
  LINGBOT_CHECK(max_points >= 1, "glb: the point budget must be >= 1, got ", max_points);
}

namespace {

// sRGB byte -> linear intensity in 16 bits (the sRGB transfer function's inverse, IEC 61966-2-1).
uint16_t srgb_to_linear16(uint8_t v) {
  static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> t{};
    for (int i = 0; i < 256; ++i) {
      const double c = i / 255.0;
      const double linear = c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
      t[static_cast<size_t>(i)] = static_cast<uint16_t>(std::lround(linear * 65535.0));
    }
    return t;
  }();
  return table[v];
}

}  // namespace

void GlbSceneBuilder::add_points(const PointBatch& points) {
  for (size_t i = 0; i < points.size(); ++i) {
    const int64_t slot = seen_ < max_points_ ? seen_ : static_cast<int64_t>(rng_() % static_cast<uint64_t>(seen_ + 1));
    ++seen_;
    if (slot >= max_points_) continue;
    const size_t s = static_cast<size_t>(slot);
    if (s * 3 == xyz_.size()) {
      xyz_.resize(xyz_.size() + 3);
      rgba_.resize(rgba_.size() + 4);
    }
    std::copy_n(points.xyz.data() + 3 * i, 3, xyz_.data() + 3 * s);
    for (size_t c = 0; c < 3; ++c) rgba_[4 * s + c] = srgb_to_linear16(points.rgb[3 * i + c]);
    rgba_[4 * s + 3] = 65535;
  }
}

void GlbSceneBuilder::add_camera(const RigidTransform<double>& c2w, const Mat33& K, int width, int height, float frustum_depth,
                                 bool keyframe) {
  auto to_world = [&c2w](double x, double y, double z, float* out) {
    for (int r = 0; r < 3; ++r)
      out[r] = static_cast<float>(c2w[r * 4 + 0] * x + c2w[r * 4 + 1] * y + c2w[r * 4 + 2] * z + c2w[r * 4 + 3]);
  };
  float apex[3];
  to_world(0, 0, 0, apex);
  centres_.insert(centres_.end(), apex, apex + 3);
  if (!keyframe) return;
  const double s = frustum_depth, fx = K[0], fy = K[4], cx = K[2], cy = K[5];
  // The image's edges: pixel centres sit at integer coordinates (docs/accuracy.md "Camera convention").
  const double l = -0.5, r = width - 0.5, t = -0.5, b = height - 0.5;
  const double us[4] = {l, r, r, l};
  const double vs[4] = {t, t, b, b};
  float corner[4][3];
  for (int k = 0; k < 4; ++k) to_world((us[k] - cx) / fx * s, (vs[k] - cy) / fy * s, s, corner[k]);
  for (int k = 0; k < 4; ++k) {
    frustums_.insert(frustums_.end(), apex, apex + 3);  // apex -> corner
    frustums_.insert(frustums_.end(), corner[k], corner[k] + 3);
    frustums_.insert(frustums_.end(), corner[k], corner[k] + 3);  // image rectangle edge
    frustums_.insert(frustums_.end(), corner[(k + 1) % 4], corner[(k + 1) % 4] + 3);
  }
}

namespace {

// Appends `bytes` to the buffer as a new buffer view (4-byte aligned) and returns its index.
int add_view(tinygltf::Model& m, const void* data, size_t n, int target) {
  std::vector<unsigned char>& buf = m.buffers[0].data;
  buf.resize((buf.size() + 3) / 4 * 4);
  tinygltf::BufferView v;
  v.buffer = 0;
  v.byteOffset = buf.size();
  v.byteLength = n;
  v.target = target;
  const auto* p = static_cast<const unsigned char*>(data);
  buf.insert(buf.end(), p, p + n);
  m.bufferViews.push_back(v);
  return static_cast<int>(m.bufferViews.size() - 1);
}

int add_positions(tinygltf::Model& m, const std::vector<float>& xyz) {
  tinygltf::Accessor a;
  a.bufferView = add_view(m, xyz.data(), xyz.size() * sizeof(float), TINYGLTF_TARGET_ARRAY_BUFFER);
  a.componentType = TINYGLTF_COMPONENT_TYPE_FLOAT;
  a.type = TINYGLTF_TYPE_VEC3;
  a.count = xyz.size() / 3;
  a.minValues = {std::numeric_limits<double>::max(), std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
  a.maxValues = {std::numeric_limits<double>::lowest(), std::numeric_limits<double>::lowest(),
                 std::numeric_limits<double>::lowest()};
  for (size_t i = 0; i < xyz.size(); ++i) {
    a.minValues[i % 3] = std::min(a.minValues[i % 3], static_cast<double>(xyz[i]));
    a.maxValues[i % 3] = std::max(a.maxValues[i % 3], static_cast<double>(xyz[i]));
  }
  m.accessors.push_back(a);
  return static_cast<int>(m.accessors.size() - 1);
}

int add_material(tinygltf::Model& m, const std::string& name, std::vector<double> rgba) {
  tinygltf::Material mat;
  mat.name = name;
  mat.pbrMetallicRoughness.baseColorFactor = std::move(rgba);
  mat.pbrMetallicRoughness.metallicFactor = 0.0;
  // Points and lines have no surface to light: shown as coloured (KHR_materials_unlit, an empty object).
  mat.extensions["KHR_materials_unlit"] = tinygltf::Value(tinygltf::Value::Object{});
  if (std::find(m.extensionsUsed.begin(), m.extensionsUsed.end(), "KHR_materials_unlit") == m.extensionsUsed.end())
    m.extensionsUsed.push_back("KHR_materials_unlit");
  m.materials.push_back(mat);
  return static_cast<int>(m.materials.size() - 1);
}

void add_mesh(tinygltf::Model& m, const std::string& name, tinygltf::Primitive prim) {
  tinygltf::Mesh mesh;
  mesh.name = name;
  mesh.primitives.push_back(std::move(prim));
  m.meshes.push_back(mesh);
  tinygltf::Node node;
  node.name = name;
  node.mesh = static_cast<int>(m.meshes.size() - 1);
  m.nodes.push_back(node);
  m.nodes[0].children.push_back(static_cast<int>(m.nodes.size() - 1));
}

}  // namespace

void GlbSceneBuilder::write(const fs::path& path) const {
  tinygltf::Model m;
  m.asset.version = "2.0";
  m.asset.generator = "lingbot-map";
  m.buffers.emplace_back();
  tinygltf::Node root;
  root.name = "lingbot-map world";
  root.rotation = {1.0, 0.0, 0.0, 0.0};  // 180 degrees about x: OpenCV (y down, z forward) -> glTF (y up)
  m.nodes.push_back(root);

  if (!xyz_.empty()) {
    tinygltf::Primitive p;
    p.mode = TINYGLTF_MODE_POINTS;
    p.attributes["POSITION"] = add_positions(m, xyz_);
    tinygltf::Accessor c;
    c.bufferView = add_view(m, rgba_.data(), rgba_.size() * sizeof(uint16_t), TINYGLTF_TARGET_ARRAY_BUFFER);
    c.componentType = TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT;
    c.normalized = true;
    c.type = TINYGLTF_TYPE_VEC4;
    c.count = rgba_.size() / 4;
    m.accessors.push_back(c);
    p.attributes["COLOR_0"] = static_cast<int>(m.accessors.size() - 1);
    p.material = add_material(m, "points", {1.0, 1.0, 1.0, 1.0});
    add_mesh(m, "points", p);
  }
  if (!frustums_.empty()) {
    tinygltf::Primitive p;
    p.mode = TINYGLTF_MODE_LINE;
    p.attributes["POSITION"] = add_positions(m, frustums_);
    p.material = add_material(m, "frustums", {1.0, 0.35, 0.0, 1.0});
    add_mesh(m, "frustums", p);
  }
  if (centres_.size() >= 6) {
    tinygltf::Primitive p;
    p.mode = TINYGLTF_MODE_LINE_STRIP;
    p.attributes["POSITION"] = add_positions(m, centres_);
    p.material = add_material(m, "trajectory", {0.1, 0.4, 1.0, 1.0});
    add_mesh(m, "trajectory", p);
  }
  if (m.buffers[0].data.empty()) m.buffers.clear();
  tinygltf::Scene scene;
  scene.name = "lingbot-map";
  scene.nodes = {0};
  m.scenes.push_back(scene);
  m.defaultScene = 0;

  // Serialised in memory, then written by write_file_atomic, which checks every write and the close:
  // TinyGLTF's file writer (2.7) reports success whatever its stream did, so a full disk gave a
  // truncated scene.glb under its final name.
  tinygltf::TinyGLTF gltf;
  std::ostringstream glb(std::ios::binary);
  if (!gltf.WriteGltfSceneToStream(&m, glb, /*prettyPrint=*/false, /*writeBinary=*/true) || !glb)
    throw Error("cannot write " + path.string() + " (TinyGLTF failed)");
  write_file_atomic(path, glb.view());
}

namespace {

// 1/10 of the frame's median valid depth (on a 1-in-16 sample of pixels), or 0.1 when none is valid.
float frustum_depth(std::span<const float> depth) {
  std::vector<float> v;
  for (size_t i = 0; i < depth.size(); i += 16)
    if (is_valid_map_value(depth[i])) v.push_back(depth[i]);
  if (v.empty()) return 0.1f;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return 0.1f * v[v.size() / 2];
}

class GlbExporter final : public Exporter {
 public:
  std::string_view name() const override { return "glb"; }
  void prepare(const ExportRun& run) override {
    ensure_writable_dir(run.out_dir);
    check_output_file_target(run.out_dir / "scene.glb");
  }
  void begin(const ExportRun& run) override {
    path_ = run.out_dir / "scene.glb";
    width_ = run.width;
    height_ = run.height;
    filter_ = run.points;
  }
  // A frame reaches the builder only when the next one comes (or at finish): the reservoir sample
  // cannot take points back, and discard_frame() must be able to.
  void frame(const ExportFrame& f) override {
    current_ = f.index;
    skipped_before_ = skipped_;
    add_staged();
    if (!geometry_finite(f)) {
      ++skipped_;
      return;
    }
    staged_ = Staged{f.index, frame_points(f, width_, filter_), f.c2w, f.intrinsics, frustum_depth(f.depth), f.keyframe};
  }
  void discard_frame() override {
    if (staged_ && staged_->index == current_) staged_.reset();  // never the frame before (add_staged failed)
    skipped_ = skipped_before_;
  }
  void finish() override {
    add_staged();
    builder_.write(path_);
  }
  // Counts the staged frame too: it is written at finish(), so the report matches the file from the
  // frame it was written (Python's Exporter.report() runs between frames).
  nlohmann::json report() const override {
    const int64_t staged_points = staged_ ? static_cast<int64_t>(staged_->points.size()) : 0;
    const int64_t seen = builder_.points_seen() + staged_points;
    nlohmann::json r = {{"files", {{"scene.glb", "glTF 2.0 binary: points, keyframe frustums, trajectory (root node flips y, z)"}}},
            {"points", std::min(seen, kGlbMaxPoints)},  // the reservoir keeps every point until the budget
            {"points_before_budget", seen},
            {"point_budget", kGlbMaxPoints},
            {"cameras", builder_.cameras() + (staged_ ? 1 : 0)},  // every frame with a pose: the trajectory's points
            {"frustums", builder_.frustums() + (staged_ && staged_->keyframe ? 1 : 0)},  // the keyframes among them
            {"frames_without_geometry", skipped_}};
    // Said on the console (run prints the notes): past the budget the file is a sample, which only
    // summary.json's figures told.
    if (seen > kGlbMaxPoints)
      r["note"] = detail::concat("scene.glb holds a uniform random sample of ", kGlbMaxPoints, " of the ", seen,
                                 " points (its budget)");
    return r;
  }

 private:
  struct Staged {
    int64_t index;
    PointBatch points;
    RigidTransform<double> c2w;
    Mat33 intrinsics;
    float frustum_depth;
    bool keyframe;
  };
  void add_staged() {
    if (!staged_) return;
    builder_.add_points(staged_->points);
    builder_.add_camera(staged_->c2w, staged_->intrinsics, width_, height_, staged_->frustum_depth, staged_->keyframe);
    staged_.reset();
  }

  GlbSceneBuilder builder_;
  fs::path path_;
  PointFilter filter_;
  int width_ = 0, height_ = 0;
  int64_t skipped_ = 0, skipped_before_ = 0;
  int64_t current_ = -1;  // the frame of the latest frame() call
  std::optional<Staged> staged_;
};

}  // namespace

std::unique_ptr<Exporter> make_glb_exporter() { return std::make_unique<GlbExporter>(); }

void remove_glb_outputs(const fs::path& out_dir) { remove_output_file(out_dir / "scene.glb"); }

}  // namespace lingbot::io
