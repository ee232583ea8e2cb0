#include "kernels/cuda/stream_pool_allocator.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace lingbot::cuda {

StreamPoolAllocator::StreamPoolAllocator(int device, cudaStream_t stream) : device_(device), stream_(stream) {
  LINGBOT_CHECK(device >= 0, "StreamPoolAllocator: device must be >= 0, got ", device);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  LINGBOT_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
  // Keep freed memory in the pool across synchronisations: steady-state steps then never call the driver.
  uint64_t threshold = UINT64_MAX;
  const cudaError_t err = cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (err != cudaSuccess) {
    (void)cudaMemPoolDestroy(pool_);
    throw_cuda_error(err, "cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold)");
  }
}

StreamPoolAllocator::~StreamPoolAllocator() {
  (void)cudaStreamSynchronize(stream_);  // pending frees complete first
  (void)cudaMemPoolDestroy(pool_);
}

void* StreamPoolAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  const size_t n = bytes == 0 ? 1 : bytes;  // a unique, freeable pointer even for 0 bytes
  const cudaError_t err = cudaMallocFromPoolAsync(&p, n, pool_, stream_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(detail::concat("device allocation of ", bytes, " bytes on CUDA device ", device_,
                               " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
  }
  const cudaError_t zero = cudaMemsetAsync(p, 0, n, stream_);
  if (zero != cudaSuccess) {
    (void)cudaFreeAsync(p, stream_);
    throw_cuda_error(zero, "cudaMemsetAsync(p, 0, bytes, stream)");
  }
  bytes_ += bytes;
  peak_ = std::max(peak_, bytes_);
  ++count_;
  return p;
}

void StreamPoolAllocator::deallocate(void* p, size_t bytes) noexcept {
  if (!p) return;
  (void)cudaFreeAsync(p, stream_);  // an error here cannot be reported from noexcept
  bytes_ -= bytes;
}

}  // namespace lingbot::cuda
