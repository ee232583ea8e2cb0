#include "run_checks.h"

#include <algorithm>
#include <cstdio>
#include <span>

#include "core/error.h"
#include "io/output_validity.h"

namespace lingbot::cli {

namespace {

std::string gib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1024.0 * 1024 * 1024));
  return buf;
}

std::span<const float> values(const Tensor& t) {
  return t.empty() ? std::span<const float>() : std::span<const float>(t.f32(), static_cast<size_t>(t.numel()));
}

}  // namespace

MemoryEstimate estimate_run_memory(const ModelConfig& cfg, const MemoryInputs& in) {
  MemoryEstimate e;
  const int64_t p = cfg.encoder.patch_size;
  const int64_t patches = (in.height / p) * (in.width / p);
  const int64_t tokens = cfg.aggregator.num_special_tokens + patches;  // per frame
  const int64_t C = cfg.aggregator.embed_dim;
  // Every weight is stored in at least the weights dtype's bytes (the block linears in it, the rest f32).
  e.weights = cfg.parameter_count() * static_cast<int64_t>(dtype_size(in.weights_dtype));
  // Frames the aggregator cache holds: the paged cache reserves its whole pool (scale frames +
  // window) up front; dense grows to at most that (fewer in a shorter run); dense-full keeps all.
  std::optional<int64_t> all_stored;
  if (in.frames) {
    const int64_t after = std::max<int64_t>(0, *in.frames - in.scale_frames);
    all_stored = std::min<int64_t>(*in.frames, in.scale_frames) + (after + in.keyframe_interval - 1) / in.keyframe_interval;
  }
  int64_t stored = static_cast<int64_t>(in.scale_frames) + in.kv_window;
  if (in.backend == KVBackend::Dense && all_stored) stored = std::min(stored, *all_stored);
  if (in.backend == KVBackend::DenseFull && all_stored) stored = *all_stored;
  e.kv_cache = cfg.aggregator.depth * 2 * stored * tokens * C * static_cast<int64_t>(dtype_size(in.kv_dtype));
  e.kv_f32 = in.kv_dtype == DType::F32;
  const int64_t camera_frames = all_stored.value_or(stored);
  e.camera_cache = cfg.camera.trunk_depth * cfg.camera.num_iterations * 2 * camera_frames * cfg.camera.dim_in * 4;
  const int64_t mlp = std::max(cfg.encoder.mlp_hidden, cfg.aggregator.mlp_hidden);
  const int64_t selected = static_cast<int64_t>(cfg.aggregator.selected_layers.size());
  e.activations = static_cast<int64_t>(in.scale_frames) * tokens * (mlp + selected * 2 * C) * 4 +
                  static_cast<int64_t>(in.height) * in.width * (cfg.dpt.features + cfg.dpt.head_features_2) * 4;
  return e;
}

void check_memory_feasible(const MemoryEstimate& e, int64_t available_bytes) {
  if (available_bytes <= 0 || e.total() <= available_bytes) return;
  // Name the option that lowers the largest part.
  const std::pair<int64_t, const char*> parts[] = {
      {e.kv_cache, e.kv_f32 ? "lower --kv-window (frames kept in the KV cache), use --kv-dtype bf16 (half the bytes), "
                              "or lower --image-size"
                            : "lower --kv-window (frames kept in the KV cache) or --image-size"},
      {e.camera_cache, "process fewer frames (--first-k, --stride, --fps) or a larger --keyframe-interval"},
      {e.activations, "lower --image-size or --scale-frames"},
      {e.weights, "the model's weights alone do not fit: use a machine with more memory"}};
  const auto* largest = std::max_element(std::begin(parts), std::end(parts),
                                         [](const auto& a, const auto& b) { return a.first < b.first; });
  throw Error(detail::concat("the run needs at least ", gib(e.total()), " of memory (weights ", gib(e.weights),
                             ", KV cache ", gib(e.kv_cache), ", camera cache ", gib(e.camera_cache), ", activations ",
                             gib(e.activations), ") but ", gib(available_bytes), " are available: ", largest->second));
}

FrameCheck check_frame_result(const FrameResult& r) {
  FrameCheck c;
  const std::pair<const char*, const Tensor*> fields[] = {
      {"pose_enc", &r.pose_enc},       {"extrinsic", &r.extrinsic},   {"intrinsic", &r.intrinsic},
      {"depth", &r.depth},             {"depth_conf", &r.depth_conf}, {"world_points", &r.world_points}};
  for (const auto& [name, t] : fields) {
    const int64_t n = io::count_non_finite(values(*t));
    if (n > 0) c.non_finite.emplace_back(name, n);
  }
  c.geometry_valid = io::has_valid_geometry(values(r.pose_enc), values(r.extrinsic), values(r.intrinsic));
  return c;
}

void RunWarnings::add(nlohmann::json entry, const std::string& line) {
  if (count_ < kMaxLogged) std::fprintf(stderr, "warning: %s\n", line.c_str());
  if (count_ == kMaxLogged) std::fprintf(stderr, "warning: further warnings only in summary.json\n");
  ++count_;
  if (list_.size() < kMaxListed) list_.push_back(std::move(entry));
}

void RunWarnings::add_frame(int64_t frame, const FrameCheck& c) {
  if (c.non_finite.empty() && c.geometry_valid) return;
  nlohmann::json fields = nlohmann::json::object();
  std::string names;
  for (const auto& [name, n] : c.non_finite) {
    fields[name] = n;
    names += (names.empty() ? "" : ", ") + name + " (" + std::to_string(n) + ")";
  }
  add({{"kind", "non_finite"}, {"frame", frame}, {"fields", fields}, {"geometry", c.geometry_valid}},
      "frame " + std::to_string(frame) + ": non-finite values in " + names +
          (c.geometry_valid ? "; those pixels are invalid (0 in PNGs, no points)"
                            : "; the frame has no geometry: poses.json marks it \"valid\": false, no TUM line, no points"));
}

void RunWarnings::add_damage(const io::StreamDamage& d) {
  if (!d.any()) return;
  nlohmann::json lost = nlohmann::json::array(), damaged = nlohmann::json::array();
  for (const auto& p : d.lost) lost.push_back({{"position", p.position}, {"timestamp", p.timestamp_s}});
  for (const auto& p : d.damaged) damaged.push_back({{"position", p.position}, {"timestamp", p.timestamp_s}});
  nlohmann::json entry = {{"kind", "input_damaged"},    {"decode_errors", d.decode_errors},
                          {"lost_frames", d.lost_frames}, {"lost", lost},
                          {"damaged_frames", d.damaged_frames}, {"damaged", damaged},
                          {"truncated", d.truncated}};
  if (d.truncated) entry["truncation"] = d.truncation;
  add(std::move(entry), "input damaged: " + d.describe());
}

void RunWarnings::add_unaligned_windows(const std::vector<int64_t>& windows, int64_t overlap_frames) {
  if (windows.empty()) return;
  std::string names;
  for (const int64_t w : windows) names += (names.empty() ? "" : ", ") + std::to_string(w);
  const bool no_overlap = overlap_frames == 0;
  add({{"kind", "windows_not_aligned"},
       {"windows", windows},
       {"reason", no_overlap ? "no overlap" : "no finite pose in the overlap"}},
      "window" + std::string(windows.size() > 1 ? "s " : " ") + names + " not aligned to window 0 (" +
          (no_overlap ? "--overlap-size 0: no shared frames" : "no overlap frame has a finite pose in both windows") +
          "); each keeps its own world frame, so poses and points of different windows are not in one frame");
}

}  // namespace lingbot::cli
