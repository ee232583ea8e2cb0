#pragma once
// Device memory through the lingbot::Allocator interface: plain cudaMalloc (no managed memory),
// zeroed with cudaMemset, exact byte accounting. Pointers it returns are device pointers: never
// dereference them on the host.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/allocator.h"

namespace lingbot::cuda {

// Number of visible CUDA devices; 0 when the runtime finds none (never throws), and then, when
// why_none is given, cudaGetDeviceCount's error: "cudaErrorNoDevice: no CUDA-capable device is
// detected", or "cudaErrorInsufficientDriver: ..." on a machine without an NVIDIA driver or with one
// older than this build's CUDA runtime (nvidia-smi then still lists the GPU).
int device_count(std::string* why_none = nullptr);
// Throws Error("<who>: no CUDA device is visible (cudaGetDeviceCount: <why_none>)") when device_count() is 0.
void require_device(std::string_view who);

// Compute capability of `device` (e.g. {9, 0} for an H100/H200); throws Error naming the device when
// it cannot be queried.
struct ComputeCapability {
  int major = 0, minor = 0;
};
ComputeCapability compute_capability(int device);

class CudaAllocator final : public Allocator {
 public:
  // Allocates on `device` (the calling thread's current device is switched to it for each call).
  explicit CudaAllocator(int device = 0);
  // Returns zeroed device memory (cudaMalloc alignment is 256 bytes); throws lingbot::Error with the
  // CUDA error string (e.g. out of memory) on failure.
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  MemoryKind kind() const override { return MemoryKind::Device; }
  size_t bytes_allocated() const override { return bytes_; }
  uint64_t allocation_count() const override { return count_; }
  int device() const { return device_; }

 private:
  int device_ = 0;
  size_t bytes_ = 0;
  uint64_t count_ = 0;
};

}  // namespace lingbot::cuda
