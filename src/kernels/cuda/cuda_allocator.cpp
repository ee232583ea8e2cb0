#include "kernels/cuda/cuda_allocator.h"

#include "kernels/cuda/cuda_check.h"

namespace lingbot::cuda {

int device_count(std::string* why_none) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the "no device / no driver" error
    if (why_none) *why_none = detail::concat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    return 0;
  }
  if (why_none) *why_none = n > 0 ? "" : "it reports 0 devices";
  return n;
}

void require_device(std::string_view who) {
  std::string why;
  if (device_count(&why) == 0)
    throw Error(detail::concat(who, ": no CUDA device is visible (cudaGetDeviceCount: ", why, ")"));
}

ComputeCapability compute_capability(int device) {
  cudaDeviceProp prop{};
  LINGBOT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return {prop.major, prop.minor};
}

CudaAllocator::CudaAllocator(int device) : device_(device) {
  LINGBOT_CHECK(device >= 0, "CudaAllocator: device must be >= 0, got ", device);
}

void* CudaAllocator::allocate(size_t bytes) {
  LINGBOT_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  const size_t n = bytes == 0 ? 1 : bytes;  // a unique, freeable pointer even for 0 bytes
  const cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(detail::concat("device allocation of ", bytes, " bytes on CUDA device ", device_,
                               " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
  }
  const cudaError_t zero = cudaMemset(p, 0, n);
  if (zero != cudaSuccess) {
    (void)cudaFree(p);
    throw_cuda_error(zero, "cudaMemset(p, 0, bytes)");
  }
  bytes_ += bytes;
  ++count_;
  return p;
}

void CudaAllocator::deallocate(void* p, size_t bytes) noexcept {
  if (!p) return;
  (void)cudaSetDevice(device_);
  (void)cudaFree(p);  // an error here (e.g. driver shutting down) cannot be reported from noexcept
  bytes_ -= bytes;
}

}  // namespace lingbot::cuda
