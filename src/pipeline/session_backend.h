#pragma once
// The session's compute backend and the KV cache that lives in its memory: the one place that maps
// a Device to an implementation (the model itself only sees compute::Backend).
#include <memory>

#include "compute/backend.h"
#include "kvcache/kv_cache.h"
#include "lingbot/device.h"

namespace lingbot {

// device: Cpu or Cuda (resolved; see resolve_device). threads: the CPU backend's OpenMP threads.
std::unique_ptr<compute::Backend> make_session_backend(Device device, int threads);

// A KV cache of `kind` in be's memory: host caches allocate from `host`; a device backend gets its
// device cache (only KVBackend::Paged exists on CUDA; others throw naming the backend).
std::unique_ptr<KVCache> make_session_kv_cache(compute::Backend& be, KVBackend kind, const CacheOptions& options,
                                               Allocator& host);

}  // namespace lingbot
