// `lingbot-map bench gpu` (tools/bench_gpu.h): the reports live in bench/cuda (lingbot_cuda_bench,
// CUDA builds only), shared with the bundle's standalone lingbot-gpu-bench.
#include "bench_gpu.h"

#include <cstdio>

#include "core/error.h"

#ifdef LINGBOT_HAVE_CUDA
#include "bench/cuda/gpu_report.h"
#include "kernels/cuda/cuda_allocator.h"
#endif

namespace lingbot::bench {

GpuBench parse_gpu_bench(const std::string& name) {
  if (name == "attention") return GpuBench::Attention;
  if (name == "memory") return GpuBench::Memory;
  if (name == "all") return GpuBench::All;
  throw Error(detail::concat("bench gpu: the measurement must be attention, memory or all, got '", name, "'"));
}

void run_bench_gpu(const BenchGpuArgs& a) {
  LINGBOT_CHECK(a.frames > 8, "bench gpu: --frames must be > 8, got ", a.frames);
#ifdef LINGBOT_HAVE_CUDA
  cuda::require_device("bench gpu");
  bool ok = true;
  if (a.what != GpuBench::Memory) {
    std::printf("== paged vs contiguous attention (streaming shape)\n");
    std::fflush(stdout);
    ok = cuda::report_paged_vs_contiguous(stdout) && ok;
  }
  if (a.what != GpuBench::Attention) {
    std::printf("== %lld-frame device memory run\n", static_cast<long long>(a.frames));
    std::fflush(stdout);
    ok = cuda::report_device_memory(stdout, a.frames) && ok;
  }
  std::fflush(stdout);
  LINGBOT_CHECK(ok, "bench gpu: a check failed (see CHECK FAILED above)");
#else
  throw Error("bench gpu: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)");
#endif
}

}  // namespace lingbot::bench
