#include "lingbot/model_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/tensor_map.h"

namespace lingbot {

namespace {

// ---- field table: one entry per settable field, shared by set(), settable_keys() and describe() ----

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

int64_t parse_int(std::string_view key, std::string_view v) {
  const std::string s = trim(v);
  int64_t x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  LINGBOT_CHECK(ec == std::errc() && p == s.data() + s.size() && !s.empty(), "config ", key, ": '", v, "' is not an integer");
  return x;
}

double parse_double(std::string_view key, std::string_view v) {
  const std::string s = trim(v);
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  LINGBOT_CHECK(used == s.size() && !s.empty() && std::isfinite(x), "config ", key, ": '", v, "' is not a number");
  return x;
}

bool parse_bool(std::string_view key, std::string_view v) {
  const std::string s = trim(v);
  if (s == "true" || s == "1" || s == "on") return true;
  if (s == "false" || s == "0" || s == "off") return false;
  throw Error(detail::concat("config ", key, ": '", v, "' is not a boolean (true/false)"));
}

std::vector<int64_t> parse_list(std::string_view key, std::string_view v) {
  std::vector<int64_t> out;
  std::string s = trim(v);
  if (!s.empty() && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parse_int(key, item));
  LINGBOT_CHECK(!out.empty(), "config ", key, ": '", v, "' is not a comma-separated integer list");
  return out;
}

template <size_t N>
std::array<int64_t, N> parse_array(std::string_view key, std::string_view v) {
  const std::vector<int64_t> l = parse_list(key, v);
  LINGBOT_CHECK(l.size() == N, "config ", key, ": expected ", N, " integers, got '", v, "'");
  std::array<int64_t, N> a{};
  std::copy(l.begin(), l.end(), a.begin());
  return a;
}

template <typename C>
std::string list_str(const C& c) {
  std::ostringstream os;
  for (size_t i = 0; i < std::size(c); ++i) os << (i ? "," : "") << c[i];
  return os.str();
}

// A real field's value, always written as a real ("0.0", "10000.0", "1e-06"), so a reader of
// describe() (inspect, the Python module's Model.config) tells it from an integer field.
std::string num_str(double x) {
  std::ostringstream os;
  os << x;
  std::string t = os.str();
  if (t.find_first_of(".eEn") == std::string::npos) t += ".0";  // not "1e-06", "inf" or "nan" already
  return t;
}

struct Field {
  const char* name;
  std::function<std::string(const ModelConfig&)> get;
  std::function<void(ModelConfig&, std::string_view)> set;
};

#define LB_INT(path)                                                                       \
  Field{#path, [](const ModelConfig& c) { return std::to_string(c.path); },               \
        [](ModelConfig& c, std::string_view v) { c.path = parse_int(#path, v); }}
#define LB_BOOL(path)                                                                      \
  Field{#path, [](const ModelConfig& c) { return std::string(c.path ? "true" : "false"); }, \
        [](ModelConfig& c, std::string_view v) { c.path = parse_bool(#path, v); }}
#define LB_REAL(path, T)                                                                   \
  Field{#path, [](const ModelConfig& c) { return num_str(c.path); },                       \
        [](ModelConfig& c, std::string_view v) { c.path = static_cast<T>(parse_double(#path, v)); }}
#define LB_ARR(path, N)                                                                    \
  Field{#path, [](const ModelConfig& c) { return list_str(c.path); },                      \
        [](ModelConfig& c, std::string_view v) { c.path = parse_array<N>(#path, v); }}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      Field{"image_norm.mean", [](const ModelConfig& c) { return list_str(c.image_norm.mean); },
            [](ModelConfig& c, std::string_view v) {
              std::stringstream ss{std::string(v)};
              std::string item;
              for (float& m : c.image_norm.mean) {
                LINGBOT_CHECK(std::getline(ss, item, ','), "config image_norm.mean: expected 3 numbers, got '", v, "'");
                m = static_cast<float>(parse_double("image_norm.mean", item));
              }
            }},
      Field{"image_norm.std", [](const ModelConfig& c) { return list_str(c.image_norm.std); },
            [](ModelConfig& c, std::string_view v) {
              std::stringstream ss{std::string(v)};
              std::string item;
              for (float& m : c.image_norm.std) {
                LINGBOT_CHECK(std::getline(ss, item, ','), "config image_norm.std: expected 3 numbers, got '", v, "'");
                m = static_cast<float>(parse_double("image_norm.std", item));
              }
            }},
      LB_INT(encoder.img_size), LB_INT(encoder.patch_size), LB_INT(encoder.embed_dim), LB_INT(encoder.depth),
      LB_INT(encoder.num_heads), LB_INT(encoder.mlp_hidden), LB_INT(encoder.num_register_tokens),
      LB_REAL(encoder.ln_eps, float), LB_REAL(encoder.interpolate_offset, float), LB_BOOL(encoder.interpolate_antialias),
      LB_INT(aggregator.embed_dim), LB_INT(aggregator.depth), LB_INT(aggregator.num_heads), LB_INT(aggregator.mlp_hidden),
      LB_INT(aggregator.num_register_tokens), LB_INT(aggregator.num_special_tokens),
      Field{"aggregator.selected_layers", [](const ModelConfig& c) { return list_str(c.aggregator.selected_layers); },
            [](ModelConfig& c, std::string_view v) { c.aggregator.selected_layers = parse_list("aggregator.selected_layers", v); }},
      LB_BOOL(aggregator.qk_norm), LB_REAL(aggregator.ln_eps, float), LB_REAL(aggregator.rope2d_frequency, double),
      LB_BOOL(aggregator.enable_3d_rope), LB_REAL(aggregator.rope3d_theta, double), LB_ARR(aggregator.rope3d_fhw, 3),
      LB_INT(aggregator.rope3d_max_frames),
      LB_INT(camera.dim_in), LB_INT(camera.trunk_depth), LB_INT(camera.num_heads), LB_INT(camera.mlp_hidden),
      LB_INT(camera.num_iterations), LB_INT(camera.pose_dim), LB_INT(camera.pose_branch_hidden),
      LB_REAL(camera.ln_eps, float), LB_REAL(camera.adaln_eps, float),
      LB_INT(dpt.dim_in), LB_INT(dpt.patch_size), LB_INT(dpt.features), LB_ARR(dpt.out_channels, 4),
      LB_ARR(dpt.intermediate_layer_idx, 4), LB_INT(dpt.head_features_2), LB_INT(dpt.output_dim),
      LB_REAL(dpt.ln_eps, float), LB_INT(dpt.frames_chunk_size),
      LB_INT(kv_cache.scale_frames), LB_INT(kv_cache.sliding_window), LB_BOOL(kv_cache.cross_frame_special),
      LB_BOOL(kv_cache.include_scale_frames), LB_BOOL(kv_cache.camera_only),
  };
  return table;
}

#undef LB_INT
#undef LB_BOOL
#undef LB_REAL
#undef LB_ARR

// ---- inference helpers ----

const io::TensorInfo* find(const io::TensorInfoMap& w, std::string_view name) {
  auto it = w.find(name);
  return it == w.end() ? nullptr : &it->second;
}

// Dimension `d` of tensor `name` when it exists with `ndim` dimensions.
std::optional<int64_t> dim_of(const io::TensorInfoMap& w, std::string_view name, int ndim, int d) {
  const io::TensorInfo* t = find(w, name);
  if (!t || static_cast<int>(t->shape.size()) != ndim) return std::nullopt;
  return t->shape[static_cast<size_t>(d)];
}

// Number of blocks `prefix`N.* (N = 0, 1, ...): one more than the largest index present. Indices with
// more than 5 digits are ignored (they cannot be a real block count and would explode expected_keys).
std::optional<int64_t> count_blocks(const io::TensorInfoMap& w, const std::string& prefix) {
  int64_t max_idx = -1;
  for (auto it = w.lower_bound(prefix); it != w.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    std::string_view rest = std::string_view(it->first).substr(prefix.size());
    const size_t dot = rest.find('.');
    const std::string_view digits = rest.substr(0, dot);
    if (digits.empty() || digits.size() > 5 || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    max_idx = std::max<int64_t>(max_idx, std::stoll(std::string(digits)));
  }
  if (max_idx < 0) return std::nullopt;
  return max_idx + 1;
}

void assign(int64_t& field, std::optional<int64_t> v) {
  if (v) field = *v;
}

// ---- expected keys ----

struct KeyList {
  std::vector<ExpectedTensor> keys;
  void add(std::string name, Shape shape) { keys.push_back({std::move(name), std::move(shape)}); }
  void add_wb(const std::string& p, Shape w, Shape b) {
    add(p + ".weight", std::move(w));
    add(p + ".bias", std::move(b));
  }
  // A pre-norm transformer block (DINOv2 / aggregator / camera trunk).
  void block(const std::string& p, int64_t dim, int64_t hidden, int64_t head_dim, bool qk_norm) {
    add_wb(p + ".norm1", {dim}, {dim});
    add_wb(p + ".attn.qkv", {3 * dim, dim}, {3 * dim});
    if (qk_norm) {
      add_wb(p + ".attn.q_norm", {head_dim}, {head_dim});
      add_wb(p + ".attn.k_norm", {head_dim}, {head_dim});
    }
    add_wb(p + ".attn.proj", {dim, dim}, {dim});
    add(p + ".ls1.gamma", {dim});
    add_wb(p + ".norm2", {dim}, {dim});
    add_wb(p + ".mlp.fc1", {hidden, dim}, {hidden});
    add_wb(p + ".mlp.fc2", {dim, hidden}, {dim});
    add(p + ".ls2.gamma", {dim});
  }
};

}  // namespace

ModelConfig ModelConfig::infer(const io::TensorMap& w) { return infer(io::index_of(w)); }

ModelConfig ModelConfig::infer(const io::TensorInfoMap& w) {
  ModelConfig c;
  // Patch encoder.
  const std::string pe = "aggregator.patch_embed.";
  assign(c.encoder.embed_dim, dim_of(w, pe + "patch_embed.proj.weight", 4, 0));
  assign(c.encoder.patch_size, dim_of(w, pe + "patch_embed.proj.weight", 4, 3));
  assign(c.encoder.depth, count_blocks(w, pe + "blocks."));
  assign(c.encoder.mlp_hidden, dim_of(w, pe + "blocks.0.mlp.fc1.weight", 2, 0));
  assign(c.encoder.num_register_tokens, dim_of(w, pe + "register_tokens", 3, 1));
  if (auto n = dim_of(w, pe + "pos_embed", 3, 1); n && *n >= 1) {
    const auto m = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(*n - 1))));
    if (m * m == *n - 1) c.encoder.img_size = m * c.encoder.patch_size;
  }
  if (c.encoder.embed_dim % 64 == 0 && c.encoder.embed_dim > 0) c.encoder.num_heads = c.encoder.embed_dim / 64;

  // Aggregator.
  assign(c.aggregator.embed_dim, dim_of(w, "aggregator.camera_token", 4, 3));
  assign(c.aggregator.depth, count_blocks(w, "aggregator.frame_blocks."));
  assign(c.aggregator.mlp_hidden, dim_of(w, "aggregator.frame_blocks.0.mlp.fc1.weight", 2, 0));
  assign(c.aggregator.num_register_tokens, dim_of(w, "aggregator.register_token", 4, 2));
  c.aggregator.num_special_tokens = c.aggregator.num_register_tokens + 2;
  c.aggregator.qk_norm = find(w, "aggregator.frame_blocks.0.attn.q_norm.weight") != nullptr;
  if (auto hd = dim_of(w, "aggregator.frame_blocks.0.attn.q_norm.weight", 1, 0); hd && *hd > 0 && c.aggregator.embed_dim % *hd == 0)
    c.aggregator.num_heads = c.aggregator.embed_dim / *hd;
  const int64_t hd = c.aggregator.num_heads > 0 ? c.aggregator.embed_dim / c.aggregator.num_heads : 0;
  if (hd == 64) {
    c.aggregator.rope3d_fhw = {20, 22, 22};
  } else {
    const int64_t hw = 2 * (hd / 6);
    c.aggregator.rope3d_fhw = {hd - 2 * hw, hw, hw};
  }
  const int64_t depth = c.aggregator.depth;
  const int64_t n_sel = static_cast<int64_t>(c.dpt.intermediate_layer_idx.size());
  if (depth == 24) {
    c.aggregator.selected_layers = {4, 11, 17, 23};
  } else if (depth == n_sel) {
    c.aggregator.selected_layers.clear();
    for (int64_t i = 0; i < depth; ++i) c.aggregator.selected_layers.push_back(i);
  } else if (depth > n_sel) {
    c.aggregator.selected_layers.clear();
    for (int64_t i = 1; i <= n_sel; ++i) c.aggregator.selected_layers.push_back(i * depth / n_sel - 1);
  }

  // Camera head.
  assign(c.camera.dim_in, dim_of(w, "camera_head.token_norm.weight", 1, 0));
  assign(c.camera.trunk_depth, count_blocks(w, "camera_head.trunk."));
  assign(c.camera.mlp_hidden, dim_of(w, "camera_head.trunk.0.mlp.fc1.weight", 2, 0));
  assign(c.camera.pose_dim, dim_of(w, "camera_head.empty_pose_tokens", 3, 2));
  assign(c.camera.pose_branch_hidden, dim_of(w, "camera_head.pose_branch.fc1.weight", 2, 0));

  // DPT head.
  assign(c.dpt.dim_in, dim_of(w, "depth_head.norm.weight", 1, 0));
  c.dpt.patch_size = c.encoder.patch_size;
  assign(c.dpt.features, dim_of(w, "depth_head.scratch.layer1_rn.weight", 4, 0));
  for (size_t i = 0; i < c.dpt.out_channels.size(); ++i)
    assign(c.dpt.out_channels[i], dim_of(w, "depth_head.projects." + std::to_string(i) + ".weight", 4, 0));
  assign(c.dpt.head_features_2, dim_of(w, "depth_head.scratch.output_conv2.0.weight", 4, 0));
  assign(c.dpt.output_dim, dim_of(w, "depth_head.scratch.output_conv2.2.weight", 4, 0));
  return c;
}

void ModelConfig::set(std::string_view key, std::string_view value) {
  for (const Field& f : fields()) {
    if (key == f.name) {
      f.set(*this, value);
      if (key == "aggregator.num_register_tokens") aggregator.num_special_tokens = aggregator.num_register_tokens + 2;
      return;
    }
  }
  throw Error(detail::concat("unknown config key '", key, "' (see `lingbot-map inspect` for the list)"));
}

std::vector<std::string> ModelConfig::settable_keys() {
  std::vector<std::string> out;
  for (const Field& f : fields()) out.emplace_back(f.name);
  return out;
}

std::string ModelConfig::describe() const {
  std::ostringstream os;
  for (const Field& f : fields()) os << f.name << " = " << f.get(*this) << '\n';
  return os.str();
}

void ModelConfig::check() const {
  std::vector<std::string> errs;
  auto need = [&](bool ok, auto&&... parts) {
    if (!ok) errs.push_back(detail::concat(parts...));
  };
  constexpr int64_t kMaxDepth = 1000;  // far beyond any real model; bounds expected_keys()
  need(encoder.patch_size > 0, "encoder.patch_size must be positive, got ", encoder.patch_size);
  need(encoder.img_size > 0 && encoder.patch_size > 0 && encoder.img_size % encoder.patch_size == 0,
       "encoder.img_size ", encoder.img_size, " must be a positive multiple of encoder.patch_size ", encoder.patch_size);
  need(encoder.embed_dim > 0, "encoder.embed_dim must be positive, got ", encoder.embed_dim);
  need(encoder.depth >= 1 && encoder.depth <= kMaxDepth, "encoder.depth ", encoder.depth, " out of range [1, ", kMaxDepth, "]");
  need(encoder.num_heads > 0 && encoder.embed_dim % encoder.num_heads == 0, "encoder.num_heads ", encoder.num_heads,
       " must divide encoder.embed_dim ", encoder.embed_dim);
  need(encoder.mlp_hidden > 0, "encoder.mlp_hidden must be positive, got ", encoder.mlp_hidden);
  need(encoder.num_register_tokens >= 0, "encoder.num_register_tokens must be >= 0");
  need(aggregator.embed_dim > 0, "aggregator.embed_dim must be positive, got ", aggregator.embed_dim);
  need(aggregator.embed_dim == encoder.embed_dim, "aggregator.embed_dim ", aggregator.embed_dim,
       " must equal encoder.embed_dim ", encoder.embed_dim);
  need(aggregator.depth >= 1 && aggregator.depth <= kMaxDepth, "aggregator.depth ", aggregator.depth, " out of range [1, ",
       kMaxDepth, "]");
  const bool heads_ok = aggregator.num_heads > 0 && aggregator.embed_dim % aggregator.num_heads == 0;
  need(heads_ok, "aggregator.num_heads ", aggregator.num_heads, " must divide aggregator.embed_dim ", aggregator.embed_dim);
  need(aggregator.mlp_hidden > 0, "aggregator.mlp_hidden must be positive, got ", aggregator.mlp_hidden);
  need(aggregator.num_register_tokens >= 0, "aggregator.num_register_tokens must be >= 0");
  need(aggregator.num_special_tokens == aggregator.num_register_tokens + 2, "aggregator.num_special_tokens ",
       aggregator.num_special_tokens, " must be num_register_tokens + 2 = ", aggregator.num_register_tokens + 2);
  need(aggregator.selected_layers.size() == dpt.intermediate_layer_idx.size(), "aggregator.selected_layers has ",
       aggregator.selected_layers.size(), " entries, the DPT head needs ", dpt.intermediate_layer_idx.size());
  for (int64_t l : aggregator.selected_layers)
    need(l >= 0 && l < aggregator.depth, "aggregator.selected_layers entry ", l, " out of range [0, ", aggregator.depth, ")");
  for (int64_t i : dpt.intermediate_layer_idx)
    need(i >= 0 && i < static_cast<int64_t>(aggregator.selected_layers.size()), "dpt.intermediate_layer_idx entry ", i,
         " out of range");
  if (heads_ok) {
    const int64_t hd = aggregator.head_dim();
    const auto& f = aggregator.rope3d_fhw;
    need(f[0] + f[1] + f[2] == hd && f[0] % 2 == 0 && f[1] % 2 == 0 && f[2] % 2 == 0 && f[0] > 0 && f[1] > 0 && f[2] > 0,
         "aggregator.rope3d_fhw ", list_str(f), " must be three positive even numbers summing to head_dim ", hd);
    need(hd % 4 == 0, "aggregator head_dim ", hd, " must be a multiple of 4 for 2D RoPE");
  }
  need(aggregator.rope2d_frequency > 0 && aggregator.rope3d_theta > 0, "RoPE frequencies must be positive");
  need(camera.dim_in == 2 * aggregator.embed_dim, "camera.dim_in ", camera.dim_in, " must be 2 x aggregator.embed_dim = ",
       2 * aggregator.embed_dim);
  need(camera.trunk_depth >= 1 && camera.trunk_depth <= kMaxDepth, "camera.trunk_depth ", camera.trunk_depth, " out of range");
  need(camera.num_heads > 0 && camera.dim_in % std::max<int64_t>(camera.num_heads, 1) == 0, "camera.num_heads ", camera.num_heads,
       " must divide camera.dim_in ", camera.dim_in);
  need(camera.mlp_hidden > 0, "camera.mlp_hidden must be positive");
  need(camera.num_iterations >= 1, "camera.num_iterations must be >= 1, got ", camera.num_iterations);
  need(camera.pose_dim == 9, "camera.pose_dim must be 9 (absT_quaR_FoV), got ", camera.pose_dim);
  need(camera.pose_branch_hidden > 0, "camera.pose_branch_hidden must be positive");
  need(dpt.dim_in == 2 * aggregator.embed_dim, "dpt.dim_in ", dpt.dim_in, " must be 2 x aggregator.embed_dim = ",
       2 * aggregator.embed_dim);
  need(dpt.patch_size == encoder.patch_size, "dpt.patch_size ", dpt.patch_size, " must equal encoder.patch_size ", encoder.patch_size);
  need(dpt.features > 0 && dpt.features % 2 == 0, "dpt.features must be positive and even, got ", dpt.features);
  for (int64_t oc : dpt.out_channels) need(oc > 0, "dpt.out_channels entries must be positive, got ", list_str(dpt.out_channels));
  need(dpt.head_features_2 > 0 && dpt.output_dim > 0, "dpt.head_features_2 and dpt.output_dim must be positive");
  need(kv_cache.scale_frames >= 1, "kv_cache.scale_frames must be >= 1, got ", kv_cache.scale_frames);
  need(kv_cache.sliding_window >= 0, "kv_cache.sliding_window must be >= 0, got ", kv_cache.sliding_window);
  if (!errs.empty()) {
    std::string msg = "invalid model config:";
    for (const auto& e : errs) msg += "\n  " + e;
    throw Error(msg);
  }
}

std::vector<ExpectedTensor> ModelConfig::expected_keys() const {
  check();
  KeyList k;
  const int64_t C = aggregator.embed_dim;
  k.add("aggregator.camera_token", {1, 2, 1, C});
  k.add("aggregator.register_token", {1, 2, aggregator.num_register_tokens, C});
  k.add("aggregator.scale_token", {1, 2, 1, C});

  const std::string pe = "aggregator.patch_embed.";
  const int64_t E = encoder.embed_dim, M = encoder.pos_grid(), p = encoder.patch_size;
  k.add(pe + "cls_token", {1, 1, E});
  k.add(pe + "pos_embed", {1, 1 + M * M, E});
  k.add(pe + "register_tokens", {1, encoder.num_register_tokens, E});
  k.add(pe + "mask_token", {1, E});
  k.add_wb(pe + "patch_embed.proj", {E, 3, p, p}, {E});
  for (int64_t i = 0; i < encoder.depth; ++i)
    k.block(pe + "blocks." + std::to_string(i), E, encoder.mlp_hidden, encoder.head_dim(), false);
  k.add_wb(pe + "norm", {E}, {E});

  for (const char* kind : {"frame", "global"})
    for (int64_t i = 0; i < aggregator.depth; ++i)
      k.block(std::string("aggregator.") + kind + "_blocks." + std::to_string(i), C, aggregator.mlp_hidden,
              aggregator.head_dim(), aggregator.qk_norm);

  const int64_t D = camera.dim_in;
  k.add("camera_head.empty_pose_tokens", {1, 1, camera.pose_dim});
  for (int64_t i = 0; i < camera.trunk_depth; ++i)
    k.block("camera_head.trunk." + std::to_string(i), D, camera.mlp_hidden, camera.head_dim(), false);
  k.add_wb("camera_head.token_norm", {D}, {D});
  k.add_wb("camera_head.trunk_norm", {D}, {D});
  k.add_wb("camera_head.embed_pose", {D, camera.pose_dim}, {D});
  k.add_wb("camera_head.poseLN_modulation.1", {3 * D, D}, {3 * D});
  k.add_wb("camera_head.pose_branch.fc1", {camera.pose_branch_hidden, D}, {camera.pose_branch_hidden});
  k.add_wb("camera_head.pose_branch.fc2", {camera.pose_dim, camera.pose_branch_hidden}, {camera.pose_dim});

  const int64_t F = dpt.features;
  const auto& oc = dpt.out_channels;
  k.add_wb("depth_head.norm", {dpt.dim_in}, {dpt.dim_in});
  for (size_t i = 0; i < oc.size(); ++i)
    k.add_wb("depth_head.projects." + std::to_string(i), {oc[i], dpt.dim_in, 1, 1}, {oc[i]});
  k.add_wb("depth_head.resize_layers.0", {oc[0], oc[0], 4, 4}, {oc[0]});  // ConvTranspose k4 s4
  k.add_wb("depth_head.resize_layers.1", {oc[1], oc[1], 2, 2}, {oc[1]});  // ConvTranspose k2 s2
  k.add_wb("depth_head.resize_layers.3", {oc[3], oc[3], 3, 3}, {oc[3]});  // Conv k3 s2 (2 is identity)
  for (size_t i = 0; i < oc.size(); ++i)
    k.add("depth_head.scratch.layer" + std::to_string(i + 1) + "_rn.weight", {F, oc[i], 3, 3});
  for (int r = 1; r <= 4; ++r) {
    const std::string rn = "depth_head.scratch.refinenet" + std::to_string(r);
    k.add_wb(rn + ".out_conv", {F, F, 1, 1}, {F});
    for (int u = (r == 4 ? 2 : 1); u <= 2; ++u) {  // the deepest level has no skip input to refine
      k.add_wb(rn + ".resConfUnit" + std::to_string(u) + ".conv1", {F, F, 3, 3}, {F});
      k.add_wb(rn + ".resConfUnit" + std::to_string(u) + ".conv2", {F, F, 3, 3}, {F});
    }
  }
  k.add_wb("depth_head.scratch.output_conv1", {F / 2, F, 3, 3}, {F / 2});
  k.add_wb("depth_head.scratch.output_conv2.0", {dpt.head_features_2, F / 2, 3, 3}, {dpt.head_features_2});
  k.add_wb("depth_head.scratch.output_conv2.2", {dpt.output_dim, dpt.head_features_2, 1, 1}, {dpt.output_dim});
  return std::move(k.keys);
}

int64_t ModelConfig::parameter_count() const {
  int64_t n = 0;
  for (const auto& e : expected_keys()) n += shape_numel(e.shape);
  return n;
}

bool ModelConfig::is_model_key(std::string_view key) {
  for (std::string_view module : {"aggregator.", "camera_head.", "depth_head."})
    if (key.starts_with(module)) return true;
  return false;
}

std::vector<std::string> ModelConfig::problems(const io::TensorMap& weights) const { return problems(io::index_of(weights)); }

std::vector<std::string> ModelConfig::problems(const io::TensorInfoMap& weights) const {
  std::vector<std::string> missing, misshaped, unexpected;
  const std::vector<ExpectedTensor> expected = expected_keys();
  std::set<std::string_view> expected_names;
  for (const auto& e : expected) {
    expected_names.insert(e.name);
    auto it = weights.find(e.name);
    if (it == weights.end()) {
      missing.push_back(detail::concat("missing ", e.name, " ", shape_str(e.shape)));
    } else if (it->second.shape != e.shape) {
      misshaped.push_back(detail::concat("wrong shape ", e.name, ": expected ", shape_str(e.shape), ", got ",
                                         shape_str(it->second.shape)));
    } else if (!io::is_floating(it->second.dtype)) {
      misshaped.push_back(detail::concat("wrong dtype ", e.name, ": ", io::safetensors_dtype_name(it->second.dtype),
                                         ", expected a floating-point tensor"));
    }
  }
  for (const auto& [name, t] : weights)
    if (is_model_key(name) && !expected_names.count(name))
      unexpected.push_back(detail::concat("unexpected ", name, " ", shape_str(t.shape)));
  std::vector<std::string> out;
  for (auto* v : {&missing, &misshaped, &unexpected}) out.insert(out.end(), v->begin(), v->end());
  return out;
}

void ModelConfig::validate(const io::TensorMap& weights) const { validate(io::index_of(weights)); }

void ModelConfig::validate(const io::TensorInfoMap& weights) const {
  // Not one key of the model (all ignored as other heads' would be): say so instead of listing every
  // key as missing; most often a prefix on every key ("model.aggregator...").
  if (!weights.empty() && std::none_of(weights.begin(), weights.end(), [](const auto& e) { return is_model_key(e.first); })) {
    std::set<std::string> starts;
    for (const auto& [name, t] : weights) {
      starts.insert(name.substr(0, name.find('.') + 1));
      if (starts.size() == 4) break;
    }
    std::string list;
    for (const std::string& s : starts) list += (list.empty() ? "'" : ", '") + s + "'";
    throw Error(detail::concat("checkpoint holds no tensor of this model: no key starts with aggregator., camera_head. or "
                               "depth_head. (its keys start with ", list, starts.size() == 4 ? ", ..." : "",
                               "): a checkpoint of another model, or one whose keys carry a prefix"));
  }
  const std::vector<std::string> p = problems(weights);
  if (p.empty()) return;
  // The first few of each kind: a checkpoint of another size misses every key of a block (144 lines
  // for one block too many), which buried the mis-shaped keys that say why.
  constexpr size_t kShownPerKind = 5;
  struct Kind {
    const char* prefix;
    const char* more;
    std::vector<const std::string*> lines;
  };
  Kind kinds[] = {{"missing ", "missing", {}}, {"wrong ", "mis-shaped", {}}, {"unexpected ", "unexpected", {}}};
  for (const auto& s : p)
    for (Kind& k : kinds)
      if (s.rfind(k.prefix, 0) == 0) k.lines.push_back(&s);
  std::string msg = detail::concat("checkpoint does not match the model config: ", kinds[0].lines.size(), " missing, ",
                                   kinds[1].lines.size(), " mis-shaped, ", kinds[2].lines.size(), " unexpected key(s):");
  bool cut = false;
  for (const Kind& k : kinds) {
    for (size_t i = 0; i < k.lines.size() && i < kShownPerKind; ++i) msg += "\n  " + *k.lines[i];
    if (k.lines.size() > kShownPerKind) {
      msg += detail::concat("\n  ... and ", k.lines.size() - kShownPerKind, " more ", k.more);
      cut = true;
    }
  }
  if (cut) msg += "\n(lingbot-map inspect MODEL lists every key)";
  throw Error(msg);
}

}  // namespace lingbot
