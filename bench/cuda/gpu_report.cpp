#include "bench/cuda/gpu_report.h"

#include <string>

#include "bench/cuda/cuda_bench.h"
#include "core/error.h"

namespace lingbot::cuda {

bool report_paged_vs_contiguous(std::FILE* out) {
  const DeviceDescription d = describe_device();
  std::fprintf(out, "device: %s (sm_%d%d, %d SMs, %.1f GiB, spec bandwidth %.0f GB/s)\n", d.name.c_str(), d.sm_major,
               d.sm_minor, d.sm_count, static_cast<double>(d.memory_bytes) / 1073741824.0, d.spec_bandwidth_gbps);
  const MeasuredPeaks peaks = measure_peaks(DType::BF16);
  std::fprintf(out, "measured peaks: cuBLAS bf16 GEMM %.1f TFLOP/s, device copy %.0f GB/s\n", peaks.gemm_tflops,
               peaks.copy_gbps);
  std::fprintf(out, "%-6s %-17s %-9s %7s %10s %10s %8s %9s %9s %8s %8s %9s\n", "dtype", "kernel", "page_size", "keys",
               "paged_ms", "contig_ms", "ratio", "paged_TF", "contig_TF", "%peakTF", "paged_GB", "max_diff");
  struct Row {
    DType dtype;
    AttentionImpl impl;
    int page_size;
    int rows_per_warp = 0;
    int kv_splits = 0;  // 0 = auto
  };
  // The tensor-core shapes side by side: rows_per_warp 16 / 32, keys unsplit / auto-split. They decide
  // kDefaultRowsPerWarp and whether Auto's key splits pay.
  const Row rows[] = {{DType::BF16, AttentionImpl::Auto, 0},
                      {DType::BF16, AttentionImpl::TensorCore, 0, 16, 1},
                      {DType::BF16, AttentionImpl::TensorCore, 0, 16, 0},
                      {DType::BF16, AttentionImpl::TensorCore, 0, 32, 1},
                      {DType::BF16, AttentionImpl::TensorCore, 0, 32, 0},
                      {DType::F16, AttentionImpl::Auto, 0},
                      {DType::BF16, AttentionImpl::Auto, 1024},
                      {DType::BF16, AttentionImpl::Simt, 0},
                      {DType::F32, AttentionImpl::Auto, 0}};
  bool ok = true;
  double tc_ms[2][2] = {{0, 0}, {0, 0}};  // paged ms by [rows_per_warp 16, 32][unsplit, auto]
  int tc_splits[2] = {1, 1};             // auto's key ranges by rows_per_warp
  for (const Row& row : rows) {
    AttentionBenchConfig c;
    c.dtype = row.dtype;
    c.impl = row.impl;
    c.page_size = row.page_size;
    c.rows_per_warp = row.rows_per_warp;
    c.kv_splits = row.kv_splits;
    if (row.impl == AttentionImpl::Simt || row.dtype == DType::F32) c.iterations = 4;
    const AttentionBenchResult r = bench_paged_vs_contiguous(c);
    const double ratio = r.contiguous_ms / r.paged_ms;  // >= 0.9: paged no more than ~11% slower
    const std::string kernel = std::string(attention_impl_name(r.impl)) +
                               (row.rows_per_warp ? "/" + std::to_string(row.rows_per_warp) : std::string()) +
                               (r.impl == AttentionImpl::TensorCore ? "/s" + std::to_string(r.kv_splits) : std::string());
    if (row.rows_per_warp) {
      tc_ms[row.rows_per_warp == 32][row.kv_splits == 0] = r.paged_ms;
      if (row.kv_splits == 0) tc_splits[row.rows_per_warp == 32] = r.kv_splits;
    }
    std::fprintf(out, "%-6s %-17s %-9d %7lld %10.3f %10.3f %8.3f %9.1f %9.1f %7.1f%% %8.0f %9.2g\n",
                 std::string(dtype_name(row.dtype)).c_str(), kernel.c_str(),
                 row.page_size ? row.page_size : c.patch_tokens, static_cast<long long>(r.keys), r.paged_ms,
                 r.contiguous_ms, ratio, r.paged_tflops, r.contiguous_tflops,
                 100.0 * r.paged_tflops / peaks.gemm_tflops, r.paged_gbps, r.max_abs_diff);
    if (row.dtype == DType::BF16 && row.impl == AttentionImpl::Auto && row.page_size == 0)
      std::fprintf(out, "RESULT streaming_bf16 contiguous_over_paged_time=%.4f paged_tflops=%.2f peak_tflops=%.2f\n",
                   ratio, r.paged_tflops, peaks.gemm_tflops);
    if (!(r.max_abs_diff < 1e-3)) {
      std::fprintf(out, "CHECK FAILED: paged and contiguous outputs differ by %g (%s, page_size %d)\n", r.max_abs_diff,
                   std::string(dtype_name(row.dtype)).c_str(), row.page_size);
      ok = false;
    }
  }
  std::fprintf(out, "RESULT tensor_core_kv_splits auto_16=%d time_auto_over_unsplit_16=%.4f auto_32=%d "
               "time_auto_over_unsplit_32=%.4f\n",
               tc_splits[0], tc_ms[0][1] / tc_ms[0][0], tc_splits[1], tc_ms[1][1] / tc_ms[1][0]);
  std::fprintf(out, "RESULT tensor_core_rows_per_warp default=%d time_32_over_16=%.4f\n", kDefaultRowsPerWarp,
               tc_ms[1][1] / tc_ms[0][1]);  // both with auto splits, as they run
  return ok;
}

bool report_device_memory(std::FILE* out, int64_t frames) {
  MemoryStudyConfig c;
  c.frames = frames;
  c.num_blocks = 1;
  const std::vector<MemorySample> samples = run_memory_study(c);
  std::fprintf(out, "frame,visible_tokens,patch_bytes,special_bytes,allocator_bytes,device_used_bytes,ms_per_frame\n");
  for (const MemorySample& s : samples)
    std::fprintf(out, "%lld,%lld,%lld,%lld,%lld,%lld,%.3f\n", static_cast<long long>(s.frame),
                 static_cast<long long>(s.visible_tokens), static_cast<long long>(s.patch_bytes_reserved),
                 static_cast<long long>(s.special_bytes_reserved), static_cast<long long>(s.allocator_bytes),
                 static_cast<long long>(s.device_used_bytes), s.ms_per_frame);
  LINGBOT_CHECK(samples.size() >= 2, "report_device_memory: the study returned ", samples.size(), " samples");
  const MemorySample &a = samples.front(), &b = samples.back();
  bool flat = true;
  for (const MemorySample& s : samples) flat = flat && s.patch_bytes_reserved == a.patch_bytes_reserved;
  // Growth beyond the patch pool is the special stream (6 tokens per frame) plus the device copy of
  // the special-run table (32 bytes per run, a few KiB).
  const int64_t other = (b.allocator_bytes - a.allocator_bytes) - (b.special_bytes_reserved - a.special_bytes_reserved);
  const bool other_ok = other >= 0 && other <= 64 * 1024;
  if (!other_ok)
    std::fprintf(out, "CHECK FAILED: allocator growth beyond the special stream is %lld bytes (expected 0..65536)\n",
                 static_cast<long long>(other));
  std::fprintf(out, "RESULT memory frames=%lld patch_bytes_flat=%s special_growth_bytes=%lld device_used_growth_bytes=%lld\n",
               static_cast<long long>(b.frame), flat ? "yes" : "no",
               static_cast<long long>(b.special_bytes_reserved - a.special_bytes_reserved),
               static_cast<long long>(b.device_used_bytes - a.device_used_bytes));
  return flat && other_ok;
}

}  // namespace lingbot::cuda
