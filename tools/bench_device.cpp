#include "bench_device.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "lingbot/device.h"
#include "bench/harness/calibration.h"
#include "cli_util.h"

namespace lingbot::bench {
namespace {

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "unknown CPU";
}

class CpuBenchDevice final : public BenchDevice {
 public:
  explicit CpuBenchDevice(int threads) : threads_(threads) {}
  BenchDeviceKind kind() const override { return BenchDeviceKind::Cpu; }
  std::string description() const override {
    return detail::concat(cpu_model_name(), " (", threads_, " threads)");
  }
  double memory_bytes() const override {
    return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  }
  std::unique_ptr<Allocator> make_allocator() const override { return std::make_unique<HostAllocator>(); }
  std::unique_ptr<KVCache> make_cache(KVBackend backend, const CacheOptions& options,
                                      Allocator& allocator) const override {
    return make_kv_cache(backend, options, allocator);
  }
  void attention(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out) override {
    kernels::attention(q, keys, out, {1.0f / std::sqrt(static_cast<float>(q.head_dim)), threads_});
  }
  void attention_with_compute(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
                              kernels::AttentionCompute compute) override {
    kernels::attention(q, keys, out, {1.0f / std::sqrt(static_cast<float>(q.head_dim)), threads_, compute});
  }
  const float* stage(int /*slot*/, const float* host, int64_t /*n*/) override { return host; }
  float* output(int64_t n) override {
    if (static_cast<int64_t>(out_.size()) < n) out_.resize(static_cast<size_t>(n));
    return out_.data();
  }
  void synchronize() override {}
  DeviceCalibration calibrate(int threads) const override {
    DeviceCalibration c;
    const auto sg = bench::calibrate_sgemm(1024, threads, 5);
    c.gemm_gflops = sg.gflops;
    c.gemm_n = sg.n;
    c.gemm_library = sg.blas;
    c.bandwidth_gbps = bench::calibrate_bandwidth(size_t{64} << 20, threads, 5).gbps;
    return c;
  }

 private:
  int threads_;
  std::vector<float> out_;
};

}  // namespace

void BenchDevice::attention_with_compute(const kernels::QueryView&, const kernels::VisibleKV&, float*,
                                         kernels::AttentionCompute) {
  throw Error(detail::concat("attention compute choice is not available on device '", bench_device_name(kind()), "'"));
}

const char* bench_device_name(BenchDeviceKind kind) { return kind == BenchDeviceKind::Cuda ? "cuda" : "cpu"; }

BenchDeviceKind parse_bench_device(const std::string& name) {
  Device d = parse_device(name);
  if (d == Device::Auto) d = cli::resolve_device_option(name);  // an explicit cuda is checked where the device opens
  return d == Device::Cuda ? BenchDeviceKind::Cuda : BenchDeviceKind::Cpu;
}

std::unique_ptr<BenchDevice> make_cpu_bench_device(int threads) { return std::make_unique<CpuBenchDevice>(threads); }

std::unique_ptr<BenchDevice> make_bench_device(BenchDeviceKind kind, int threads) {
  return kind == BenchDeviceKind::Cuda ? make_cuda_bench_device() : make_cpu_bench_device(threads);
}

}  // namespace lingbot::bench
