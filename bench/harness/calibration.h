#pragma once
// Machine calibration for benchmarks: what this CPU can do at best, measured in the same process
// and with the same thread count as the code being judged, so results are reported as ratios.
// Harness code (library lingbot_harness, beside the tools): not part of the core libraries.
//
// sgemm: every OpenMP thread runs its own n×n×n cblas_sgemm with OpenBLAS single-threaded (the
// threading model of kernels::gemm), best of `repeats`; GFLOP/s = threads · 2n³ / wall time.
// Memory bandwidth: a STREAM-style triad a[i] = b[i] + s·c[i] over three f32 arrays of
// `bytes_per_array` each, threaded with OpenMP, best of `repeats`; GB/s counts 3 arrays (2 read,
// 1 written) per pass, 1 GB = 1e9 bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "lingbot/dtype.h"

namespace lingbot::bench {

struct SgemmCalibration {
  int n = 0;
  int threads = 0;
  double gflops = 0.0;        // best aggregate GFLOP/s over all threads
  double seconds = 0.0;       // wall time of the best repeat
  std::string blas;           // kernels::blas_description()
};

struct BandwidthCalibration {
  size_t bytes_per_array = 0;
  int threads = 0;
  double gbps = 0.0;          // best triad GB/s
  double seconds = 0.0;       // wall time of the best repeat
};

// kernels::linear at one layer shape with weights in `weights` (the model's own GEMM path, threaded
// as in the model): y[rows, out] = x[rows, in] · W^T. Best of `repeats` after one warm-up.
struct LinearCalibration {
  DType weights = DType::F32;
  int64_t rows = 0, in = 0, out = 0;
  int threads = 0;
  double gflops = 0.0;          // 2·rows·in·out / best wall time
  double gflops_per_cpu_s = 0.0;  // 2·rows·in·out / process CPU seconds of the same repeat (busy-machine proof)
  std::string path;             // gemm_path_description(weights)
};
LinearCalibration calibrate_linear(DType weights, int64_t rows, int64_t in, int64_t out, int threads, int repeats);

// OpenBLAS's worker threads, started with the library, busy-wait for about a second after they start
// (or last worked) before they sleep, so process CPU time taken meanwhile counts a core that does no
// work of ours (a calibration read half its GFLOP per CPU-second with --threads 1). Waits, at most
// `limit_ms`, until the process uses under 5% of a core while this thread sleeps; returns whether it
// did. The calibrations call it first; a bench calls it before its first timed step.
bool wait_for_quiet_process(int limit_ms = 3000);

// n >= 16, threads >= 1, repeats >= 1; throws Error naming a bad value.
SgemmCalibration calibrate_sgemm(int n, int threads, int repeats);
// bytes_per_array >= 4096, threads >= 1, repeats >= 1; throws Error naming a bad value.
BandwidthCalibration calibrate_bandwidth(size_t bytes_per_array, int threads, int repeats);

}  // namespace lingbot::bench
