#include "pipeline/session_backend.h"

#include "compute/cpu/cpu_backend.h"
#include "core/error.h"

#if LINGBOT_HAVE_CUDA
#include "compute/cuda/cuda_backend.h"
#include "kvcache/cuda/kv_cache_cuda.h"
#endif

namespace lingbot {

std::unique_ptr<compute::Backend> make_session_backend(Device device, int threads) {
  switch (device) {
    case Device::Cpu: return std::make_unique<compute::CpuBackend>(threads);
    case Device::Cuda:
#if LINGBOT_HAVE_CUDA
      return std::make_unique<compute::CudaBackend>();
#else
      break;
#endif
    case Device::Auto: break;
  }
  throw Error(detail::concat("session backend: device ", device_name(device),
                             device == Device::Auto ? " must be resolved first" : " is not in this build"));
}

std::unique_ptr<KVCache> make_session_kv_cache(compute::Backend& be, KVBackend kind, const CacheOptions& options,
                                               Allocator& host) {
  if (be.allocator().kind() == MemoryKind::Host) return make_kv_cache(kind, options, host);
#if LINGBOT_HAVE_CUDA
  if (auto* cuda = dynamic_cast<compute::CudaBackend*>(&be))
    return cuda::make_cuda_kv_cache(kind, options, be.allocator(), cuda->stream());
#endif
  throw Error(detail::concat("no KV cache for the memory of backend ", be.description()));
}

}  // namespace lingbot
