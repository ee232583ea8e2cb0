#include "kernels/cuda/device_support.h"

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"

namespace lingbot::cuda {

namespace {
__global__ void probe_kernel() {}
}  // namespace

bool kernels_run_on(int device) {
  LINGBOT_CUDA_CHECK(cudaSetDevice(device));
  cudaFuncAttributes attributes{};
  const cudaError_t e = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&probe_kernel));
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();  // not sticky: clear it
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) return false;
  throw_cuda_error(e, "cudaFuncGetAttributes (does this build's code run on the device?)");
}

const char* built_architectures() {
#ifdef LINGBOT_CUDA_ARCHITECTURES
  return LINGBOT_CUDA_ARCHITECTURES;
#else
  return "unknown";
#endif
}

}  // namespace lingbot::cuda
