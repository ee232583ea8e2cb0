#pragma once
// Where `lingbot-map bench kv` runs its caches: the host (CPU kernels) or a CUDA device. The step loop
// of tools/bench_kv.cpp is the same for both; a BenchDevice supplies the memory, the caches, the
// place the caches read their per-block inputs from, and the machine's own yardsticks.
#include <cstdint>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "kernels/cpu/attention.h"
#include "kvcache/kv_cache.h"

namespace lingbot::bench {

enum class BenchDeviceKind : uint8_t { Cpu, Cuda };
const char* bench_device_name(BenchDeviceKind kind);    // "cpu" | "cuda"
// "cpu", "cuda" or "auto" (cuda where a device exists: lingbot::resolve_device); throws Error otherwise.
BenchDeviceKind parse_bench_device(const std::string& name);

// Machine yardsticks measured in the same run. CPU: per-thread sgemm (GFLOP/s summed) and STREAM
// triad. CUDA: cuBLAS bf16 GEMM with f32 accumulation and device-to-device copy (read + write bytes),
// plus the memory's specification bandwidth.
struct DeviceCalibration {
  double gemm_gflops = 0;       // 0 = not measured
  int gemm_n = 0;               // square GEMM size
  double bandwidth_gbps = 0;    // measured
  double spec_bandwidth_gbps = 0;  // CUDA only: memory clock x bus width
  std::string gemm_library;     // CPU: kernels::blas_description(); CUDA: "cuBLAS <version>"
};

class BenchDevice {
 public:
  virtual ~BenchDevice() = default;
  virtual BenchDeviceKind kind() const = 0;
  // One line naming the hardware, e.g. "AMD EPYC (2 threads)" or "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)".
  virtual std::string description() const = 0;
  // Memory the KV caches can use (host RAM or device memory), bytes; sizes the default --mem-cap-gb.
  virtual double memory_bytes() const = 0;
  // A fresh allocator of this device's memory for one backend (the benchmark caps it).
  virtual std::unique_ptr<Allocator> make_allocator() const = 0;
  // The cache of `backend` over `allocator` (made by make_allocator, possibly wrapped); throws Error
  // naming the backend when this device has none.
  virtual std::unique_ptr<KVCache> make_cache(KVBackend backend, const CacheOptions& options,
                                              Allocator& allocator) const = 0;
  // Attention of q over the keys one of this device's caches handed out (KVCache::store), scale
  // 1/sqrt(head_dim), into `out` (from output()): the kernel the model would run on this device.
  virtual void attention(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out) = 0;
  // The CPU kernel with an explicit compute path (bench kv --attention-ab: the native-bf16 and the
  // f32 path side by side); a device without that choice throws Error.
  virtual void attention_with_compute(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
                                      kernels::AttentionCompute compute);
  // Makes `n` host floats readable by the caches: returns `host` itself on the CPU, a device copy in
  // buffer `slot` (0..3) on CUDA, valid until the next stage() of that slot. Not part of any timing.
  virtual const float* stage(int slot, const float* host, int64_t n) = 0;
  // Output buffer of at least n floats the caches write (device memory on CUDA).
  virtual float* output(int64_t n) = 0;
  // Waits for all queued work: timings bracket cache calls with it, so asynchronous devices are
  // measured to completion. No-op on the CPU.
  virtual void synchronize() = 0;
  virtual DeviceCalibration calibrate(int threads) const = 0;
};

std::unique_ptr<BenchDevice> make_cpu_bench_device(int threads);
// Throws Error when the build has no CUDA support or no CUDA device is visible.
std::unique_ptr<BenchDevice> make_cuda_bench_device();
std::unique_ptr<BenchDevice> make_bench_device(BenchDeviceKind kind, int threads);

}  // namespace lingbot::bench
