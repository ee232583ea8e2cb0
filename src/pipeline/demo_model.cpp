#include "pipeline/demo_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "core/error.h"

namespace lingbot {

namespace {

// SplitMix64: tiny, portable and fully specified (std:: distributions are not portable across
// standard libraries, and the demo should produce the same numbers everywhere).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) with 24 bits of resolution.
  float symmetric() { return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }
};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

ModelConfig demo_model_config() {
  ModelConfig c = ModelConfig::release();
  const std::pair<const char*, const char*> fields[] = {
      {"encoder.img_size", "98"},          {"encoder.embed_dim", "128"},
      {"encoder.depth", "1"},              {"encoder.num_heads", "2"},
      {"encoder.mlp_hidden", "256"},       {"aggregator.embed_dim", "128"},
      {"aggregator.depth", "4"},           {"aggregator.num_heads", "16"},
      {"aggregator.mlp_hidden", "128"},    {"aggregator.selected_layers", "0,1,2,3"},
      {"aggregator.rope3d_fhw", "4,2,2"},  {"camera.dim_in", "256"},
      {"camera.trunk_depth", "1"},         {"camera.num_heads", "16"},
      {"camera.mlp_hidden", "256"},        {"camera.pose_branch_hidden", "128"},
      {"dpt.dim_in", "256"},               {"dpt.features", "16"},
      {"dpt.out_channels", "8,16,32,32"},  {"dpt.head_features_2", "32"},
  };
  for (const auto& [key, value] : fields) c.set(key, value);
  c.check();
  return c;
}

io::TensorMap demo_weights(const ModelConfig& config, uint64_t seed, DType block_linear_dtype) {
  io::TensorMap weights;
  for (const ExpectedTensor& e : config.expected_keys()) {
    Tensor t(e.shape);
    float* v = t.f32();
    const int64_t n = t.numel();
    SplitMix64 rng{seed ^ fnv1a(e.name)};  // per-name stream: independent of key order
    const std::string_view name = e.name;
    const bool is_1d = e.shape.size() == 1;
    if (is_1d && ends_with(name, ".weight") && name.find("norm") != std::string_view::npos) {
      std::fill(v, v + n, 1.0f);  // LayerNorm scale
    } else if (ends_with(name, ".gamma")) {
      std::fill(v, v + n, 0.1f);  // LayerScale: keep the random residual branches modest
    } else if (ends_with(name, ".bias") || name.find("token") != std::string_view::npos ||
               name.find("pos_embed") != std::string_view::npos) {
      for (int64_t i = 0; i < n; ++i) v[i] = 0.02f * rng.symmetric();
      // The camera head's FoV outputs (pose entries 7, 8) pass a ReLU: a random bias near 0 would
      // often give FoV 0, i.e. an infinite focal length, and every geometric export drops such
      // frames. A positive bias per refinement step keeps the demo's cameras finite (~57 degrees after
      // the default 4 steps)
      if (ends_with(name, "pose_branch.fc2.bias") && n >= 9) v[7] = v[8] = 0.25f;
    } else {
      const int64_t fan_in = e.shape.empty() || e.shape[0] == 0 ? 1 : std::max<int64_t>(1, n / e.shape[0]);
      const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
      for (int64_t i = 0; i < n; ++i) v[i] = bound * rng.symmetric();
      // ... and the random part of the FoV outputs small, so the bias decides (rows 7, 8).
      if (ends_with(name, "pose_branch.fc2.weight") && e.shape.size() == 2 && e.shape[0] >= 9)
        for (int64_t i = 7 * e.shape[1]; i < 9 * e.shape[1]; ++i) v[i] *= 0.05f;
    }
    if (block_linear_dtype != DType::F32 && uses_weights_dtype(name)) t = t.to(block_linear_dtype);
    weights.emplace(e.name, std::move(t));
  }
  // The camera head's last layer decides the pose encoding [t(3), q(4), fov(2)]: with plain random
  // weights its FoV output is about 0 (and ReLU-clipped), i.e. an infinite focal length, and the
  // quaternion is random. Give it a small random part around a plausible camera instead: identity
  // rotation and a 64-degree field of view once the refinement iterations have summed their
  // deltas, so the demo writes finite poses, intrinsics and a frustum-shaped point cloud. The FoV is
  // the generated frames' own camera (render_demo_frame: focal 0.9 x width on a 112x70 frame).
  {
    const int64_t iterations = config.camera.num_iterations;
    Tensor& w = weights.at("camera_head.pose_branch.fc2.weight");
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] *= 0.05f;
    Tensor& b = weights.at("camera_head.pose_branch.fc2.bias");
    const float per_iteration = 1.0f / static_cast<float>(std::max<int64_t>(1, iterations));
    const double focal = 0.9 * kDemoFrameWidth;
    const auto fov = [&](double size) { return static_cast<float>(2 * std::atan(0.5 * size / focal)); };
    const float target[9] = {0, 0, 0, 0, 0, 0, 1.0f, fov(kDemoFrameHeight), fov(kDemoFrameWidth)};  // qw = 1
    for (int64_t i = 0; i < b.numel() && i < 9; ++i) b.f32()[i] = target[i] * per_iteration;
  }
  return weights;
}

std::shared_ptr<const Model> make_demo_model(uint64_t seed, const ModelLoadOptions& options) {
  const ModelConfig config = demo_model_config();
  return Model::from_weights(demo_weights(config, seed, options.weights_dtype), config, options);
}

namespace {

struct Vec3 {
  double x = 0, y = 0, z = 0;
};
Vec3 operator+(Vec3 a, Vec3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
Vec3 operator*(double s, Vec3 a) { return {s * a.x, s * a.y, s * a.z}; }

double hash01(int64_t a, int64_t b, int64_t c) {
  uint64_t h = static_cast<uint64_t>(a) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(b) * 0xC2B2AE3D27D4EB4Full ^
               static_cast<uint64_t>(c) * 0x165667B19E3779F9ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<double>(h >> 11) / 9007199254740992.0;
}

// Bilinear value noise on a unit grid.
double value_noise(double u, double v, int64_t salt) {
  const double fu = std::floor(u), fv = std::floor(v);
  const auto iu = static_cast<int64_t>(fu), iv = static_cast<int64_t>(fv);
  const double tu = u - fu, tv = v - fv;
  const double a = hash01(iu, iv, salt), b = hash01(iu + 1, iv, salt);
  const double c = hash01(iu, iv + 1, salt), d = hash01(iu + 1, iv + 1, salt);
  return (a * (1 - tu) + b * tu) * (1 - tv) + (c * (1 - tu) + d * tu) * tv;
}

// Surface colour at texture coordinates (u, v) in metres of plane `id`.
Vec3 shade(int id, double u, double v) {
  static constexpr Vec3 base[5] = {{0.55, 0.40, 0.25}, {0.85, 0.85, 0.80}, {0.30, 0.45, 0.70},
                                   {0.75, 0.35, 0.30}, {0.40, 0.65, 0.40}};
  const double noise = 0.6 * value_noise(u * 2, v * 2, id) + 0.4 * value_noise(u * 9, v * 9, id + 17);
  double pattern = 1.0;
  if (id == 0) pattern = ((static_cast<int64_t>(std::floor(u)) + static_cast<int64_t>(std::floor(v))) & 1) ? 0.65 : 1.0;
  else if (id == 2) pattern = (static_cast<int64_t>(std::floor(u * 2.5)) & 1) ? 0.75 : 1.0;
  else if (id == 3 || id == 4) pattern = std::fmod(std::fabs(v), 1.0) < 0.08 ? 0.3 : 1.0;
  const double k = pattern * (0.55 + 0.6 * noise);
  return k * base[id];
}

}  // namespace

io::ImageU8 render_demo_frame(int64_t index, int width, int height) {
  LINGBOT_CHECK(index >= 0 && width > 0 && height > 0, "render_demo_frame: bad frame ", index, " or size ", width, "x", height);
  // Room in OpenCV-style world axes (x right, y down, z forward): floor y = 1.5, ceiling y = -1.5,
  // side walls x = +-3, back wall z = 14. The camera starts at z = 0 and moves forward.
  const double t = static_cast<double>(index);
  const Vec3 centre{0.6 * std::sin(0.5 * t), 0.15 * std::sin(0.8 * t), 0.35 * t};
  const double yaw = 0.08 * std::sin(0.35 * t), pitch = 0.03 * std::cos(0.6 * t);
  const double cy_ = std::cos(yaw), sy = std::sin(yaw), cp = std::cos(pitch), sp = std::sin(pitch);
  const double focal = 0.9 * width;  // about 64 degrees horizontal field of view
  io::ImageU8 img(width, height);
  for (int py = 0; py < height; ++py) {
    for (int px = 0; px < width; ++px) {
      // Camera ray, then pitch (about x) and yaw (about y) into world axes.
      const double dx0 = (px + 0.5 - 0.5 * width) / focal, dy0 = (py + 0.5 - 0.5 * height) / focal, dz0 = 1.0;
      const double dy1 = cp * dy0 - sp * dz0, dz1 = sp * dy0 + cp * dz0;
      const Vec3 d{cy_ * dx0 + sy * dz1, dy1, -sy * dx0 + cy_ * dz1};
      double best = 1e30;
      Vec3 colour{0, 0, 0};
      auto hit = [&](int id, double dist, double u, double v) {
        if (dist > 1e-6 && dist < best) {
          best = dist;
          colour = shade(id, u, v);
        }
      };
      if (d.y > 1e-9) {  // floor
        const double s = (1.5 - centre.y) / d.y;
        const Vec3 p = centre + s * d;
        hit(0, s, p.x, p.z);
      }
      if (d.y < -1e-9) {  // ceiling
        const double s = (-1.5 - centre.y) / d.y;
        const Vec3 p = centre + s * d;
        hit(1, s, p.x, p.z);
      }
      if (d.z > 1e-9) {  // back wall
        const double s = (14.0 - centre.z) / d.z;
        const Vec3 p = centre + s * d;
        hit(2, s, p.x, p.y);
      }
      if (d.x < -1e-9) {  // left wall
        const double s = (-3.0 - centre.x) / d.x;
        const Vec3 p = centre + s * d;
        hit(3, s, p.z, p.y);
      }
      if (d.x > 1e-9) {  // right wall
        const double s = (3.0 - centre.x) / d.x;
        const Vec3 p = centre + s * d;
        hit(4, s, p.z, p.y);
      }
      const double fog = std::exp(-0.04 * std::min(best, 100.0));  // distance darkening for depth cues
      uint8_t* out = img.pixel(px, py);
      const double c[3] = {colour.x, colour.y, colour.z};
      for (int ch = 0; ch < 3; ++ch)
        out[ch] = static_cast<uint8_t>(std::clamp(std::lround(255.0 * fog * c[ch]), 0L, 255L));
    }
  }
  return img;
}

}  // namespace lingbot
