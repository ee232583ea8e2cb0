#include "pipeline/memory_estimate.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/format_bytes.h"

namespace lingbot {

MemoryInputs memory_inputs(const ModelConfig& cfg, const SessionOptions& so, DType weights_dtype,
                           const std::optional<WindowedOptions>& window, std::optional<int64_t> frames) {
  MemoryInputs mi;
  mi.frames = frames;
  mi.scale_frames = so.scale_frames;
  mi.kv_window = so.kv_window;
  mi.keyframe_interval = so.keyframe_policy ? so.keyframe_policy->max_keyframe_spacing() : std::max(so.keyframe_interval, 1);
  mi.max_special_frames = so.max_special_frames;
  mi.camera_iterations = so.camera_iterations;
  if (window) {
    mi.kv_window = windowed_kv_window(so.kv_window, cfg.kv_cache.include_scale_frames ? so.scale_frames : 0, *window);
    if (mi.frames) mi.frames = std::min(*mi.frames, windowed_span(so.scale_frames, window->window_size, mi.keyframe_interval));
  }
  mi.kv_backend = so.kv_backend;
  mi.kv_dtype = so.kv_dtype;
  mi.weights_dtype = weights_dtype;
  return mi;
}

MemoryEstimate estimate_run_memory(const ModelConfig& cfg, const MemoryInputs& in) {
  MemoryEstimate e;
  const int64_t p = cfg.encoder.patch_size;
  const int64_t patches = (in.height / p) * (in.width / p);
  const int64_t tokens = cfg.aggregator.num_special_tokens + patches;  // per frame
  const int64_t C = cfg.aggregator.embed_dim;
  // Every weight is stored in at least the weights dtype's bytes (the block linears in it, the rest f32).
  e.weights = cfg.parameter_count() * static_cast<int64_t>(dtype_size(in.weights_dtype));
  // Frames stored (scale frames and keyframes): at least one in every keyframe_interval streamed frames.
  std::optional<int64_t> all_stored;
  if (in.frames) {
    const int64_t after = std::max<int64_t>(0, *in.frames - in.scale_frames);
    const int64_t every = in.keyframe_interval;
    all_stored = std::min<int64_t>(*in.frames, in.scale_frames) + (every > 0 ? (after + every - 1) / every : 0);
  }
  // Frames the aggregator cache holds whole: the paged cache reserves its whole pool (scale frames +
  // window) up front, but a page becomes resident only when a frame is written into it; dense grows
  // to at most that; so both hold fewer in a shorter run. Dense-full keeps all.
  int64_t stored = static_cast<int64_t>(in.scale_frames) + in.kv_window;
  const int64_t pool = stored;
  if (all_stored) stored = in.kv_backend == KVBackend::DenseFull ? *all_stored : std::min(stored, *all_stored);
  const int64_t kv_bytes = static_cast<int64_t>(dtype_size(in.kv_dtype));
  const int64_t frame_bytes = cfg.aggregator.depth * 2 * tokens * C * kv_bytes;
  // The frames that left the window keep their special tokens (all of them, or the newest
  // max_special_frames); the camera head keeps the pinned frames and the newest kv_window +
  // max_special_frames stored frames (Session's history bound).
  const int64_t pinned = cfg.kv_cache.include_scale_frames ? in.scale_frames : 0;
  int64_t evicted = all_stored ? std::max<int64_t>(0, *all_stored - stored) : 0;
  int64_t camera_frames = all_stored.value_or(stored);
  if (in.max_special_frames > 0) {
    const int64_t kept = std::min(in.max_special_frames, camera_frames);  // no overflow for a huge bound
    evicted = std::min(evicted, kept);
    camera_frames = std::min(camera_frames, pinned + in.kv_window + kept);
  }
  // Paged: the special stream keeps every stored frame's specials (a rule may hide some from attention);
  // dense: the side buffer keeps the visible ones (kept_specials_per_evicted_frame).
  CacheOptions co;
  co.num_special_tokens = static_cast<int>(cfg.aggregator.num_special_tokens);
  co.cross_frame_special = cfg.kv_cache.cross_frame_special;
  co.camera_only = cfg.kv_cache.camera_only;
  const int64_t specials = in.kv_backend == KVBackend::Paged ? co.num_special_tokens : kept_specials_per_evicted_frame(co);
  const int64_t special_bytes = cfg.aggregator.depth * 2 * specials * C * kv_bytes;
  e.kv_special = evicted * special_bytes;
  e.kv_cache = stored * frame_bytes + e.kv_special;
  e.kv_reserved = in.kv_backend == KVBackend::Paged ? pool * frame_bytes : e.kv_cache;
  e.kv_f32 = in.kv_dtype == DType::F32;
  const int64_t iterations = in.camera_iterations > 0 ? in.camera_iterations : cfg.camera.num_iterations;
  e.camera_cache = cfg.camera.trunk_depth * iterations * 2 * camera_frames * cfg.camera.dim_in * 4;
  const int64_t mlp = std::max(cfg.encoder.mlp_hidden, cfg.aggregator.mlp_hidden);
  const int64_t selected = static_cast<int64_t>(cfg.aggregator.selected_layers.size());
  e.activations = static_cast<int64_t>(in.scale_frames) * tokens * (mlp + selected * 2 * C) * 4 +
                  static_cast<int64_t>(in.height) * in.width * (cfg.dpt.features + cfg.dpt.head_features_2) * 4;
  return e;
}

void check_memory_feasible(const MemoryEstimate& e, int64_t available_bytes, const MemoryAdvice& advice,
                           int64_t reservable_bytes) {
  // The paged pool is reserved whole at the start, even where a short run makes few of its pages resident.
  if (reservable_bytes > 0 && e.weights + e.kv_reserved > reservable_bytes)
    throw Error(detail::concat(advice.subject, " needs at least ", format_bytes(e.weights + e.kv_reserved),
                               " of memory to reserve its KV cache up front (weights ", format_bytes(e.weights), ", KV cache pool ",
                               format_bytes(e.kv_reserved), ") but the machine has ", format_bytes(reservable_bytes),
                               " of memory and swap: ", e.kv_f32 ? advice.kv_cache_f32 : advice.kv_cache));
  if (available_bytes <= 0 || e.total() <= available_bytes) return;
  // Name the options that lower the largest part.
  // A KV cache mostly of special tokens past the window (a long stream) is lowered by bounding them.
  const std::string* kv_advice = e.kv_special > e.kv_cache - e.kv_special ? &advice.special_tokens
                                 : e.kv_f32                               ? &advice.kv_cache_f32
                                                                          : &advice.kv_cache;
  const std::pair<int64_t, const std::string*> parts[] = {
      {e.kv_cache, kv_advice},
      {e.camera_cache, &advice.camera_cache},
      {e.activations, &advice.activations}};
  const auto* largest = std::max_element(std::begin(parts), std::end(parts),
                                         [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::string what = e.weights > largest->first
                               ? "the model's weights alone do not fit: use a machine with more memory"
                               : *largest->second;
  throw Error(detail::concat(advice.subject, " needs at least ", format_bytes(e.total()), " of memory (weights ", format_bytes(e.weights),
                             ", KV cache ", format_bytes(e.kv_cache), ", camera cache ", format_bytes(e.camera_cache), ", activations ",
                             format_bytes(e.activations), ") but ", format_bytes(available_bytes), " are available: ", what));
}

}  // namespace lingbot
