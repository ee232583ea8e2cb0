#pragma once
// Device memory from a stream-ordered pool (cudaMallocFromPoolAsync / cudaFreeAsync on one stream),
// for the activations of a CUDA compute backend: allocation and release are ordered with the work on
// that stream, so a buffer may be freed while kernels that read it are still pending (the memory is
// reused only by later work on the stream) and freeing never waits for the device. The pool keeps
// released memory (release threshold: unlimited), so after the first frames a steady-state step gets
// every allocation from the pool without a driver call. New memory is zeroed on the stream
// (cudaMemsetAsync), so work on the stream sees zeros. Work on any other stream must synchronise with
// this stream before touching its buffers. Exact byte accounting and a peak, as CudaAllocator.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"

namespace lingbot::cuda {

class StreamPoolAllocator final : public Allocator {
 public:
  // A pool on `device` whose allocations are ordered on `stream` (which must outlive the allocator).
  StreamPoolAllocator(int device, cudaStream_t stream);
  // Releases the pool (buffers still outstanding keep it alive in the driver until they are freed).
  ~StreamPoolAllocator() override;
  StreamPoolAllocator(const StreamPoolAllocator&) = delete;
  StreamPoolAllocator& operator=(const StreamPoolAllocator&) = delete;

  // Throws lingbot::Error naming the size and the CUDA error on failure (e.g. out of memory).
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  MemoryKind kind() const override { return MemoryKind::Device; }
  size_t bytes_allocated() const override { return bytes_; }
  uint64_t allocation_count() const override { return count_; }
  size_t peak_bytes() const { return peak_; }  // most bytes_allocated() ever held at once
  cudaStream_t stream() const { return stream_; }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  size_t bytes_ = 0, peak_ = 0;
  uint64_t count_ = 0;
};

}  // namespace lingbot::cuda
