#pragma once
// Host emulation of the CUDA runtime subset that src/compute/cuda and the launch wrappers of
// src/kernels/cuda/model_ops.cu use, so the CUDA backend's host logic and kernel bodies run (and are
// tested against the CPU backend) on machines without a GPU: one emulated device whose memory is
// host memory (the shim remembers which allocations are "device" and "pinned host", so passing
// host memory where device memory is due fails as it does on a device), synchronous copies, and kernels
// whose launches are checked like a device's (emulated_launch.h: limits, device pointers) and then
// run as whole grids of threads (emulated_grid.h, in the kernels' translation units, built with
// LINGBOT_EMULATED_GRID). Test code only.
#define LINGBOT_CUDA_RUNTIME_SHIM 1  // tests that read the emulation's own counters test for it
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

typedef void* cudaStream_t;
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorNotReady = 600
};
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost, cudaMemoryTypeDevice, cudaMemoryTypeManaged };
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
};
struct cudaDeviceProp {
  char name[256];
  int major, minor;
  size_t totalGlobalMem;
};

inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess             ? "cudaSuccess"
         : e == cudaErrorInvalidValue ? "cudaErrorInvalidValue"
         : e == cudaErrorNoDevice     ? "cudaErrorNoDevice"
         : e == cudaErrorNoKernelImageForDevice ? "cudaErrorNoKernelImageForDevice"
                                      : "cudaErrorMemoryAllocation";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess             ? "no error"
         : e == cudaErrorInvalidValue ? "invalid argument"
         : e == cudaErrorNoDevice     ? "no CUDA-capable device is detected"
         : e == cudaErrorNoKernelImageForDevice ? "no kernel image is available for execution on the device"
                                      : "out of memory";
}

// The emulated allocations: base address -> (bytes, kind). Pointers inside none are plain host memory.
struct EmulatedAllocations {
  std::mutex m;
  std::map<const char*, std::pair<size_t, cudaMemoryType>> blocks;
};
inline EmulatedAllocations& emulated_allocations() {
  static EmulatedAllocations a;
  return a;
}
// New allocations hold 0xff bytes (NaN as f32 / f16 / bf16): cudaMalloc, pools and cudaHostAlloc
// hand out uninitialised memory, which malloc's fresh pages would otherwise show as zeros.
inline cudaError_t emulated_alloc(void** p, size_t n, cudaMemoryType t) {
  *p = std::malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xff, n);
  EmulatedAllocations& a = emulated_allocations();
  std::lock_guard<std::mutex> lock(a.m);
  a.blocks[static_cast<const char*>(*p)] = {n, t};
  return cudaSuccess;
}
inline cudaError_t emulated_free(void* p, cudaMemoryType t) {
  if (!p) return cudaSuccess;
  EmulatedAllocations& a = emulated_allocations();
  {
    std::lock_guard<std::mutex> lock(a.m);
    const auto it = a.blocks.find(static_cast<const char*>(p));
    if (it == a.blocks.end() || it->second.second != t) return cudaErrorInvalidValue;
    a.blocks.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}
inline cudaMemoryType emulated_memory_type(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  EmulatedAllocations& a = emulated_allocations();
  std::lock_guard<std::mutex> lock(a.m);
  auto it = a.blocks.upper_bound(p);
  if (it == a.blocks.begin()) return cudaMemoryTypeUnregistered;
  --it;
  return p < it->first + (it->second.first ? it->second.first : 1) ? it->second.second : cudaMemoryTypeUnregistered;
}
inline bool emulated_is_device(const void* p) { return emulated_memory_type(p) == cudaMemoryTypeDevice; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
// As the runtime: CUDA_VISIBLE_DEVICES set to "" (or "-1") hides every device, so the no-device
// paths run here too (tests/CMakeLists.txt registers them with it).
inline cudaError_t cudaGetDeviceCount(int* n) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool hidden = visible != nullptr && (visible[0] == '\0' || std::strcmp(visible, "-1") == 0);
  *n = hidden ? 0 : 1;
  return hidden ? cudaErrorNoDevice : cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t n) { return emulated_alloc(p, n, cudaMemoryTypeDevice); }
inline cudaError_t cudaFree(void* p) { return emulated_free(p, cudaMemoryTypeDevice); }
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (n == 0) return cudaSuccess;
  if (!emulated_is_device(p)) return cudaErrorInvalidValue;
  std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) { return cudaMemset(p, v, n); }
// Stream-ordered pools: plain malloc / free.
typedef struct EmulatedMemPool* cudaMemPool_t;
enum cudaMemAllocationType { cudaMemAllocationTypePinned = 1 };
enum cudaMemAllocationHandleType { cudaMemHandleTypeNone = 0 };
enum cudaMemLocationType { cudaMemLocationTypeDevice = 1 };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
struct cudaMemLocation {
  cudaMemLocationType type;
  int id;
};
struct cudaMemPoolProps {
  cudaMemAllocationType allocType;
  cudaMemAllocationHandleType handleTypes;
  cudaMemLocation location;
};
inline cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps*) {
  static int pool_tag;
  *pool = reinterpret_cast<cudaMemPool_t>(&pool_tag);
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolDestroy(cudaMemPool_t) { return cudaSuccess; }
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
inline cudaError_t cudaMallocFromPoolAsync(void** p, size_t n, cudaMemPool_t, cudaStream_t) {
  return emulated_alloc(p, n, cudaMemoryTypeDevice);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return emulated_free(p, cudaMemoryTypeDevice); }
// A copy whose pointers contradict its kind is undefined behaviour on a device; here it fails.
inline bool emulated_kind_matches(void* d, const void* s, cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToDevice: return emulated_is_device(d) && !emulated_is_device(s);
    case cudaMemcpyDeviceToHost: return !emulated_is_device(d) && emulated_is_device(s);
    case cudaMemcpyDeviceToDevice: return emulated_is_device(d) && emulated_is_device(s);
    case cudaMemcpyDefault: return true;
  }
  return false;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  if (n == 0) return cudaSuccess;
  if (!emulated_kind_matches(d, s, k)) return cudaErrorInvalidValue;
  std::memcpy(d, s, n);
  return cudaSuccess;
}
// Host -> device async copies from pageable memory (not cudaHostAlloc'd), which on a device first wait
// for the stream's queued work (kernels/cuda/pinned_staging.h): tests check the hot paths make none.
inline std::atomic<long>& emulated_pageable_uploads() {
  static std::atomic<long> n{0};
  return n;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t = nullptr) {
  if (n != 0 && k == cudaMemcpyHostToDevice && emulated_memory_type(s) != cudaMemoryTypeHost) ++emulated_pageable_uploads();
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemcpy2DAsync(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h,
                                     cudaMemcpyKind k, cudaStream_t = nullptr) {
  if (w == 0 || h == 0) return cudaSuccess;
  if (!emulated_kind_matches(d, s, k)) return cudaErrorInvalidValue;
  for (size_t r = 0; r < h; ++r) std::memcpy(static_cast<char*>(d) + r * dp, static_cast<const char*>(s) + r * sp, w);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
  static int stream;
  *s = &stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
// Pinned host memory and events (kernels/cuda/pinned_staging, the backend's phase timers): copies
// and kernels are synchronous here, so every event has completed by the time it is queried, and an
// event records the host clock (elapsed time = the host time of the emulated work in between).
struct EmulatedEvent {
  double ms = 0;
};
typedef EmulatedEvent* cudaEvent_t;
constexpr unsigned cudaEventDisableTiming = 2, cudaHostAllocDefault = 0;
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return emulated_alloc(p, n, cudaMemoryTypeHost); }
inline cudaError_t cudaFreeHost(void* p) { return emulated_free(p, cudaMemoryTypeHost); }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new EmulatedEvent;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  e->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = static_cast<float>(end->ms - start->ms);
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  a->type = emulated_memory_type(p);
  return cudaSuccess;
}
// LINGBOT_EMU_NO_KERNEL_IMAGE=1 plays a GPU older than every architecture the kernels were built
// for: the runtime has no image for them (tests/CMakeLists.txt registers the tests of that path).
struct cudaFuncAttributes {
  int maxThreadsPerBlock = 1024;
};
template <typename Kernel>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, Kernel) {
  const char* no_image = std::getenv("LINGBOT_EMU_NO_KERNEL_IMAGE");
  if (no_image != nullptr && std::strcmp(no_image, "1") == 0) return cudaErrorNoKernelImageForDevice;
  *a = cudaFuncAttributes{};
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::strcpy(p->name, "host emulation");
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = size_t{1} << 34;
  return cudaSuccess;
}

inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
// The emulated device reports an H200's sm_90 and 132 SMs, so occupancy-driven choices (the
// attention's key splits) come out as on that device.
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76
};
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
  }
  return cudaSuccess;
}
// Resident blocks per SM: 2 for any kernel of at most 1024 threads (the emulation has no register
// or shared-memory budget to derive it from).
template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int block_size, size_t) {
  if (block_size < 1 || block_size > 1024) return cudaErrorInvalidValue;
  *blocks = 2;
  return cudaSuccess;
}

// ---- device code ----------------------------------------------------------------------------------
#define __global__
#define __device__
#define __forceinline__ inline
#include "emulated_launch.h"  // dim3, the launch configuration, the checks of every launch
#ifdef LINGBOT_EMULATED_GRID
#include "emulated_grid.h"  // the kernels' translation units: threads, barriers, collectives
#endif
// Round-to-nearest f32 arithmetic without contraction (volatile stops the host compiler fusing).
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
