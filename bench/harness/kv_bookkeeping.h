#pragma once
// Bookkeeping-only KV-cache steps for memory and occupancy studies at real shapes (`bench kv
// --attention off`, the GPU memory study, 10,000-frame cache tests): frames are appended and evicted,
// page ids move and memory grows exactly as in a real step, but no K/V is written or attended, so the
// cache contents are unspecified afterwards. Harness code: it only drives the public KVCache protocol
// (begin_step, mark_block_written in place of store, end_step).
#include "kvcache/kv_cache.h"

namespace lingbot::bench {

inline void bookkeeping_step(KVCache& cache, FrameMode mode, int n_frames) {
  cache.begin_step(mode, n_frames);
  if (mode != FrameMode::NonKeyframe)
    for (int b = 0; b < cache.options().num_blocks; ++b) cache.mark_block_written(b);
  cache.end_step();
}

}  // namespace lingbot::bench
