#pragma once
// `lingbot-map bench gpu`: the GPU acceptance measurements of scripts/gpu_check.sh (bench/cuda/
// gpu_report.h): paged vs contiguous attention at the streaming shape, and the 10,000-frame device
// memory study. Needs a -DLINGBOT_CUDA=ON build and a visible GPU (else it throws Error saying so).
#include <cstdint>
#include <string>

namespace lingbot::bench {

enum class GpuBench : uint8_t { Attention, Memory, All };
GpuBench parse_gpu_bench(const std::string& name);  // "attention" | "memory" | "all"; throws naming the value

struct BenchGpuArgs {
  GpuBench what = GpuBench::All;
  int64_t frames = 10000;  // memory study: keyframes streamed (> 8)
};

// Prints the reports to stdout; throws Error when a report's correctness / memory-shape check fails.
void run_bench_gpu(const BenchGpuArgs& args);

}  // namespace lingbot::bench
