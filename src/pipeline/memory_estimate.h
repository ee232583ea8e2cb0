#pragma once
// A lower bound of the memory a run or a Python reconstruction needs, from the model configuration
// and options, checked before the weights are read: an impossible request fails with one message
// naming the option to lower, not with an allocation failure (or the OOM killer) frames later.
#include <cstdint>
#include <optional>
#include <string>

#include "kvcache/kv_cache.h"
#include "lingbot/dtype.h"
#include "lingbot/model_config.h"
#include "lingbot/session.h"
#include "lingbot/windowed.h"

namespace lingbot {

// A lower bound of the memory a run needs, in bytes, from the model configuration and options.
struct MemoryEstimate {
  int64_t weights = 0;       // the parameters, each at least the weights dtype's size
  // Aggregator K/V: the frames kept (paged: at most the pool of scale frames + window), plus the
  // special tokens of the stored frames beyond them (the append-only special stream; max_special_frames
  // > 0 bounds it).
  int64_t kv_cache = 0;
  int64_t kv_special = 0;    // of kv_cache: the special tokens of the stored frames past the window
  int64_t camera_cache = 0;  // camera head K/V: every stored frame (max_special_frames > 0: the frames it keeps)
  int64_t activations = 0;   // one scale-phase pass: tokens x MLP width, plus the DPT head's maps
  bool kv_f32 = false;       // the K/V dtype is f32 (bf16 / f16 would halve kv_cache)
  // The KV cache's allocation up front, resident or not (paged: its whole pool; dense: kv_cache).
  int64_t kv_reserved = 0;
  int64_t total() const { return weights + kv_cache + camera_cache + activations; }
};
struct MemoryInputs {
  int width = 0, height = 0;                  // preprocessed frame
  std::optional<int64_t> frames;              // frames of the run, when known or estimated
  int scale_frames = 8, kv_window = 64;
  // The most frames from one keyframe to the next (KeyframePolicy::max_keyframe_spacing: the interval,
  // flow keyframes' max_non_keyframe_gap); 0 = unknown: only the scale frames count as stored.
  int keyframe_interval = 1;
  int64_t max_special_frames = 0;  // SessionOptions::max_special_frames (0 = keep all)
  int camera_iterations = 0;       // SessionOptions::camera_iterations (0 = the model's camera.num_iterations)
  KVBackend kv_backend = KVBackend::Paged;
  DType kv_dtype = DType::F32;
  DType weights_dtype = DType::F32;
};
// The inputs of a run of a session with options `so` (sizes resolved: no 0 = model default) and
// weights in `weights_dtype`: its keyframe spacing from so.keyframe_policy (else keyframe_interval),
// and with `window` (windowed mode) what one window holds, since each runs in a fresh cache. The
// frame size is left 0 for the caller (it is known once the input is).
MemoryInputs memory_inputs(const ModelConfig& cfg, const SessionOptions& so, DType weights_dtype,
                           const std::optional<WindowedOptions>& window, std::optional<int64_t> frames);
MemoryEstimate estimate_run_memory(const ModelConfig& cfg, const MemoryInputs& in);
// What check_memory_feasible's error names, in the caller's words (run's flags, the Python module's
// keywords): the pipeline knows the parts of the estimate, the front end the options that lower them.
struct MemoryAdvice {
  std::string subject;       // "the run", "the reconstruction"
  std::string kv_cache;      // how to lower the KV cache
  std::string kv_cache_f32;  // the same when K/V are f32 (a 16-bit K/V dtype halves it)
  std::string camera_cache;  // how to store fewer frames
  std::string activations;   // how to lower one scale-phase pass
  std::string special_tokens;  // how to bound the special tokens past the window (when they outweigh the rest of the KV cache)
};
// Throws Error("<subject> needs at least X GiB of memory (weights ..., KV cache ..., camera cache ...,
// activations ...) but Y GiB are available: <advice for the largest part>") when the estimate
// exceeds `available_bytes`, and Error naming the KV advice when the weights and the KV cache's
// reservation exceed `reservable_bytes` (the machine's memory and swap: no allocation gets more).
// 0 = unknown: no check.
void check_memory_feasible(const MemoryEstimate& e, int64_t available_bytes, const MemoryAdvice& advice,
                           int64_t reservable_bytes = 0);

}  // namespace lingbot
