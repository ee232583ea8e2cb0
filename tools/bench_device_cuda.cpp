// The CUDA BenchDevice: device page pools (CudaPagedKVCache), inputs copied to the device before
// each block (outside the timings), timings closed by a device synchronisation.
#include "bench_device.h"

#include "core/error.h"

#ifdef LINGBOT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <array>
#include <cmath>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cuda_allocator.h"
#include "bench/cuda/cuda_bench.h"
#include "kernels/cuda/cuda_check.h"
#include "kvcache/cuda/kv_cache_cuda.h"
#endif

namespace lingbot::bench {

#ifdef LINGBOT_HAVE_CUDA
namespace {

class CudaBenchDevice final : public BenchDevice {
 public:
  CudaBenchDevice() : desc_(cuda::describe_device()) {}
  BenchDeviceKind kind() const override { return BenchDeviceKind::Cuda; }
  std::string description() const override {
    return detail::concat(desc_.name, " (sm_", desc_.sm_major, desc_.sm_minor, ", ", desc_.sm_count, " SMs, ",
                          static_cast<double>(desc_.memory_bytes) / 1073741824.0, " GiB)");
  }
  double memory_bytes() const override { return static_cast<double>(desc_.memory_bytes); }
  std::unique_ptr<Allocator> make_allocator() const override { return std::make_unique<cuda::CudaAllocator>(); }
  std::unique_ptr<KVCache> make_cache(KVBackend backend, const CacheOptions& options,
                                      Allocator& allocator) const override {
    return cuda::make_cuda_kv_cache(backend, options, allocator);
  }
  void attention(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out) override {
    cuda::CudaAttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(q.head_dim));
    cuda::attention(q, keys, out, params);
  }
  const float* stage(int slot, const float* host, int64_t n) override {
    LINGBOT_CHECK(slot >= 0 && slot < static_cast<int>(in_.size()), "stage: slot ", slot, " out of range");
    float* dst = ensure(in_[static_cast<size_t>(slot)], n);
    LINGBOT_CUDA_CHECK(cudaMemcpy(dst, host, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice));
    return dst;
  }
  float* output(int64_t n) override { return ensure(out_, n); }
  void synchronize() override { LINGBOT_CUDA_CHECK(cudaDeviceSynchronize()); }
  DeviceCalibration calibrate(int /*threads*/) const override {
    const cuda::MeasuredPeaks p = cuda::measure_peaks(DType::BF16);
    DeviceCalibration c;
    c.gemm_gflops = p.gemm_tflops * 1e3;
    c.gemm_n = 8192;
    c.bandwidth_gbps = p.copy_gbps;
    c.spec_bandwidth_gbps = desc_.spec_bandwidth_gbps;
    c.gemm_library = detail::concat("cuBLAS ", CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, ".", CUBLAS_VER_PATCH);
    return c;
  }

 private:
  float* ensure(Buffer& b, int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (b.bytes() < bytes) b = Buffer(alloc_, bytes);
    return static_cast<float*>(b.data());
  }

  cuda::DeviceDescription desc_;
  cuda::CudaAllocator alloc_;  // inputs and output only; the caches use their own (capped) allocators
  std::array<Buffer, 4> in_;
  Buffer out_;
};

}  // namespace

std::unique_ptr<BenchDevice> make_cuda_bench_device() {
  cuda::require_device("--device cuda");
  return std::make_unique<CudaBenchDevice>();
}
#else
std::unique_ptr<BenchDevice> make_cuda_bench_device() {
  throw Error("--device cuda: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)");
}
#endif

}  // namespace lingbot::bench
