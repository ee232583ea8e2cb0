#pragma once
// CUDA error handling: every failing runtime / cuBLAS call becomes a lingbot::Error naming the call
// and the CUDA error string. Host-only header (usable from .cpp and .cu files).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace lingbot::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what) {
  // Read the runtime's last error too: it keeps the failure (a pinned allocation short of memory, a
  // bad copy pitch) until read, and the next launch check would report it again, blamed on that kernel,
  // after the caller recovered. A sticky error (an illegal address) stays with the context regardless.
  (void)cudaGetLastError();
  throw Error(detail::concat(what, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t st, const char* what) {
  throw Error(detail::concat(what, " failed: ", cublasGetStatusName(st), ": ", cublasGetStatusString(st)));
}

}  // namespace lingbot::cuda

// LINGBOT_CUDA_CHECK(cudaMalloc(&p, n)): throws lingbot::Error("cudaMalloc(&p, n) failed: <name>: <string>").
#define LINGBOT_CUDA_CHECK(expr)                                          \
  do {                                                                    \
    const cudaError_t lingbot_cuda_err_ = (expr);                         \
    if (lingbot_cuda_err_ != cudaSuccess) ::lingbot::cuda::throw_cuda_error(lingbot_cuda_err_, #expr); \
  } while (0)

#define LINGBOT_CUBLAS_CHECK(expr)                                        \
  do {                                                                    \
    const cublasStatus_t lingbot_cublas_st_ = (expr);                     \
    if (lingbot_cublas_st_ != CUBLAS_STATUS_SUCCESS) ::lingbot::cuda::throw_cublas_error(lingbot_cublas_st_, #expr); \
  } while (0)
