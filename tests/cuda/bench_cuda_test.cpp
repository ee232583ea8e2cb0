// GPU acceptance measurements for scripts/gpu_check.sh. DISABLED_ by default (they take tens of
// seconds on a GPU and are measurements, not unit tests); run with
//   test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaBench.*'
// They print tables; the only assertions are on correctness and memory shape (paged and contiguous
// outputs agree; patch memory does not grow), never on timing. gpu_check.sh judges the time ratio.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_test_util.h"
#include "bench/cuda/cuda_bench.h"

using namespace lingbot;
using namespace lingbot::cuda;

TEST(CudaBench, DISABLED_PagedVsContiguousStreamingShape) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  const DeviceDescription d = describe_device();
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB, spec bandwidth %.0f GB/s)\n", d.name.c_str(), d.sm_major,
              d.sm_minor, d.sm_count, d.memory_bytes / 1073741824.0, d.spec_bandwidth_gbps);
  const MeasuredPeaks peaks = measure_peaks(DType::BF16);
  std::printf("measured peaks: cuBLAS bf16 GEMM %.1f TFLOP/s, device copy %.0f GB/s\n", peaks.gemm_tflops,
              peaks.copy_gbps);
  std::printf("%-6s %-11s %-9s %7s %10s %10s %8s %9s %9s %8s %8s %9s\n", "dtype", "kernel", "page_size", "keys",
              "paged_ms", "contig_ms", "ratio", "paged_TF", "contig_TF", "%peakTF", "paged_GB", "max_diff");
  struct Row {
    DType dtype;
    AttentionImpl impl;
    int page_size;
  };
  const Row rows[] = {{DType::BF16, AttentionImpl::Auto, 0},  {DType::F16, AttentionImpl::Auto, 0},
                      {DType::BF16, AttentionImpl::Auto, 1024}, {DType::BF16, AttentionImpl::Simt, 0},
                      {DType::F32, AttentionImpl::Auto, 0}};
  for (const Row& row : rows) {
    AttentionBenchConfig c;
    c.dtype = row.dtype;
    c.impl = row.impl;
    c.page_size = row.page_size;
    if (row.impl == AttentionImpl::Simt || row.dtype == DType::F32) c.iterations = 4;
    const AttentionBenchResult r = bench_paged_vs_contiguous(c);
    const double ratio = r.contiguous_ms / r.paged_ms;  // >= 0.9: paged no more than ~11% slower
    std::printf("%-6s %-11s %-9d %7lld %10.3f %10.3f %8.3f %9.1f %9.1f %7.1f%% %8.0f %9.2g\n",
                std::string(dtype_name(row.dtype)).c_str(), attention_impl_name(r.impl),
                row.page_size ? row.page_size : c.patch_tokens, static_cast<long long>(r.keys), r.paged_ms,
                r.contiguous_ms, ratio, r.paged_tflops, r.contiguous_tflops, 100.0 * r.paged_tflops / peaks.gemm_tflops,
                r.paged_gbps, r.max_abs_diff);
    if (row.dtype == DType::BF16 && row.impl == AttentionImpl::Auto && row.page_size == 0)
      std::printf("RESULT streaming_bf16 contiguous_over_paged_time=%.4f paged_tflops=%.2f peak_tflops=%.2f\n", ratio,
                  r.paged_tflops, peaks.gemm_tflops);
    EXPECT_LT(r.max_abs_diff, 1e-3) << "paged and contiguous outputs differ";
  }
}

TEST(CudaBench, DISABLED_TenThousandFrameDeviceMemory) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  MemoryStudyConfig c;
  if (const char* f = std::getenv("LINGBOT_MEMORY_FRAMES")) c.frames = std::atoll(f);
  c.num_blocks = 1;
  const auto samples = run_memory_study(c);
  std::printf("frame,visible_tokens,patch_bytes,special_bytes,allocator_bytes,device_used_bytes,ms_per_frame\n");
  for (const MemorySample& s : samples)
    std::printf("%lld,%lld,%lld,%lld,%lld,%lld,%.3f\n", static_cast<long long>(s.frame),
                static_cast<long long>(s.visible_tokens), static_cast<long long>(s.patch_bytes_reserved),
                static_cast<long long>(s.special_bytes_reserved), static_cast<long long>(s.allocator_bytes),
                static_cast<long long>(s.device_used_bytes), s.ms_per_frame);
  ASSERT_GE(samples.size(), 2u);
  for (const MemorySample& s : samples) EXPECT_EQ(s.patch_bytes_reserved, samples.front().patch_bytes_reserved);
  // Growth beyond the patch pool is the special stream (6 tokens per frame) plus the device copy of
  // the special-run table (32 bytes per run, a few KiB).
  const MemorySample &a = samples.front(), &b = samples.back();
  const int64_t other = (b.allocator_bytes - a.allocator_bytes) - (b.special_bytes_reserved - a.special_bytes_reserved);
  EXPECT_GE(other, 0);
  EXPECT_LE(other, 64 * 1024);
  std::printf("RESULT memory frames=%lld patch_bytes_flat=%s special_growth_bytes=%lld device_used_growth_bytes=%lld\n",
              static_cast<long long>(b.frame), b.patch_bytes_reserved == a.patch_bytes_reserved ? "yes" : "no",
              static_cast<long long>(b.special_bytes_reserved - a.special_bytes_reserved),
              static_cast<long long>(b.device_used_bytes - a.device_used_bytes));
}
