// lingbot-gpu-bench: the GPU measurements of `lingbot-map bench gpu` without the CLI's dependencies
// (FFmpeg and the rest), for the bundle scripts/gpu_bundle.sh builds for a bare CUDA machine.
//   lingbot-gpu-bench attention|memory|all [--frames N]
// Exit status: 0 when every check holds, 1 when one fails or on an error, 2 on bad usage.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "bench/cuda/gpu_report.h"
#include "core/error.h"
#include "kernels/cuda/cuda_allocator.h"

int main(int argc, char** argv) {
  const char* usage = "usage: lingbot-gpu-bench attention|memory|all [--frames N]\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  const std::string what = argv[1];
  long long frames = 10000;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    char* end = nullptr;
    if (arg == "--frames" && i + 1 < argc && (frames = std::strtoll(argv[i + 1], &end, 10), *end == '\0') &&
        frames > 8) {
      ++i;
      continue;
    }
    std::fprintf(stderr, "error: bad argument '%s' (--frames takes an integer > 8)\n%s", arg.c_str(), usage);
    return 2;
  }
  if (what != "attention" && what != "memory" && what != "all") {
    std::fprintf(stderr, "error: the measurement must be attention, memory or all, got '%s'\n%s", what.c_str(), usage);
    return 2;
  }
  try {
    LINGBOT_CHECK(lingbot::cuda::device_count() > 0, "no CUDA device is visible");
    bool ok = true;
    if (what != "memory") ok = lingbot::cuda::report_paged_vs_contiguous(stdout) && ok;
    if (what != "attention") ok = lingbot::cuda::report_device_memory(stdout, frames) && ok;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
