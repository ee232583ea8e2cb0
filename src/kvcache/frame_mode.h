#pragma once
// FrameMode: what a forward step does with its frames, shared by the caches that hold past frames
// (the aggregator's KV cache, kv_cache.h, which says how each mode is stored and attends, and the
// camera head's causal cache).
#include <cstdint>

namespace lingbot {

enum class FrameMode : uint8_t {
  ScalePhase,   // n_frames >= 1 frames attend bidirectionally to each other, then are stored
  Keyframe,     // one frame: stored, eviction runs, then it attends (it counts in its own window)
  NonKeyframe,  // one frame: attends to the cache + its own tokens; the cache is left exactly as it was
  Deferred,     // one frame: stored without eviction, attends; then commit_deferred() or rollback_deferred()
};

}  // namespace lingbot
