#include "bench/harness/calibration.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/phase_clock.h"
#include "kernels/cpu/ops.h"

namespace lingbot::bench {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool wait_for_quiet_process(int limit_ms) {
  constexpr int kProbeMs = 50;
  for (int waited = 0; waited < limit_ms; waited += kProbeMs) {
    const double c0 = PhaseClock::cpu_now();
    std::this_thread::sleep_for(std::chrono::milliseconds(kProbeMs));
    if (PhaseClock::cpu_now() - c0 < 0.05 * kProbeMs * 1e-3) return true;
  }
  return false;
}

SgemmCalibration calibrate_sgemm(int n, int threads, int repeats) {
  LINGBOT_CHECK(n >= 16, "calibrate_sgemm: n must be >= 16, got ", n);
  LINGBOT_CHECK(threads >= 1, "calibrate_sgemm: threads must be >= 1, got ", threads);
  LINGBOT_CHECK(repeats >= 1, "calibrate_sgemm: repeats must be >= 1, got ", repeats);
  // Same model as kernels::gemm: OpenMP threads, each calling single-threaded OpenBLAS.
  openblas_set_num_threads(1);
  wait_for_quiet_process();
  const size_t nn = static_cast<size_t>(n) * n;
  // One A, B, C per thread so threads never share cache lines; values are arbitrary but finite.
  std::vector<std::vector<float>> a(threads), b(threads), c(threads);
  for (int t = 0; t < threads; ++t) {
    a[t].resize(nn);
    b[t].resize(nn);
    c[t].assign(nn, 0.0f);
    for (size_t i = 0; i < nn; ++i) {
      a[t][i] = static_cast<float>((i * 7 + t) % 13) * 0.01f;
      b[t][i] = static_cast<float>((i * 5 + t) % 11) * 0.01f;
    }
  }
  SgemmCalibration r;
  r.n = n;
  r.threads = threads;
  r.blas = kernels::blas_description();
  double best = 0.0;
  // One untimed warm-up pass (page faults, frequency ramp), then `repeats` timed passes.
  for (int rep = 0; rep <= repeats; ++rep) {
    const double t0 = now_seconds();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a[t].data(), n, b[t].data(), n, 0.0f,
                  c[t].data(), n);
    }
    const double dt = now_seconds() - t0;
    if (rep == 0 || dt <= 0) continue;
    const double gflops = 2.0 * n * static_cast<double>(n) * n * threads / dt * 1e-9;
    if (gflops > best) {
      best = gflops;
      r.seconds = dt;
    }
  }
  r.gflops = best;
  return r;
}

BandwidthCalibration calibrate_bandwidth(size_t bytes_per_array, int threads, int repeats) {
  LINGBOT_CHECK(bytes_per_array >= 4096, "calibrate_bandwidth: bytes_per_array must be >= 4096, got ",
                bytes_per_array);
  LINGBOT_CHECK(threads >= 1, "calibrate_bandwidth: threads must be >= 1, got ", threads);
  LINGBOT_CHECK(repeats >= 1, "calibrate_bandwidth: repeats must be >= 1, got ", repeats);
  const int64_t n = static_cast<int64_t>(bytes_per_array / sizeof(float));
  std::vector<float> a(n), b(n), c(n);
  // First touch in the same static partition as the timed loop (NUMA placement).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  BandwidthCalibration r;
  r.bytes_per_array = static_cast<size_t>(n) * sizeof(float);
  r.threads = threads;
  const float s = 0.5f;
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  double best = 0.0;
  for (int rep = 0; rep <= repeats; ++rep) {
    const double t0 = now_seconds();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    const double dt = now_seconds() - t0;
    if (rep == 0 || dt <= 0) continue;
    const double gbps = 3.0 * static_cast<double>(r.bytes_per_array) / dt * 1e-9;
    if (gbps > best) {
      best = gbps;
      r.seconds = dt;
    }
  }
  // Keep the triad observable so it is not optimised away.
  volatile float sink = pa[n / 2];
  (void)sink;
  r.gbps = best;
  return r;
}

LinearCalibration calibrate_linear(DType weights, int64_t rows, int64_t in, int64_t out, int threads, int repeats) {
  LINGBOT_CHECK(rows >= 1 && in >= 1 && out >= 1, "calibrate_linear: shape must be positive, got ", rows, "x", in,
                "x", out);
  LINGBOT_CHECK(threads >= 1 && repeats >= 1, "calibrate_linear: threads and repeats must be >= 1");
  wait_for_quiet_process();
  std::vector<float> x(static_cast<size_t>(rows * in)), w(static_cast<size_t>(in * out)), y(static_cast<size_t>(rows * out));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 5) % 11) * 0.01f - 0.05f;
  std::vector<uint16_t> w16(weights == DType::F32 ? 0 : w.size());
  if (weights != DType::F32) convert_from_f32(w.data(), w16.data(), weights, w.size());
  const kernels::WeightView view{weights == DType::F32 ? static_cast<const void*>(w.data()) : w16.data(), weights};
  LinearCalibration r;
  r.weights = weights;
  r.rows = rows;
  r.in = in;
  r.out = out;
  r.threads = threads;
  r.path = kernels::gemm_path_description(weights);
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  for (int rep = 0; rep <= repeats; ++rep) {
    const double c0 = PhaseClock::cpu_now(), t0 = now_seconds();
    kernels::linear(x.data(), rows, in, view, nullptr, out, y.data(), threads);
    const double dt = now_seconds() - t0, cpu = PhaseClock::cpu_now() - c0;
    if (rep == 0 || dt <= 0 || cpu <= 0) continue;
    r.gflops = std::max(r.gflops, flops / dt * 1e-9);
    r.gflops_per_cpu_s = std::max(r.gflops_per_cpu_s, flops / cpu * 1e-9);
  }
  return r;
}

}  // namespace lingbot::bench
