#pragma once
// GPU measurements for `lingbot-map bench kv --device cuda` and scripts/gpu_check.sh. Each call
// needs a CUDA device and prints nothing; callers format the results.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/attention_cuda.h"
#include "lingbot/dtype.h"

namespace lingbot::cuda {

struct DeviceDescription {
  std::string name;
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  size_t memory_bytes = 0;
  double spec_bandwidth_gbps = 0;  // from memory clock x bus width (theoretical)
};
DeviceDescription describe_device(int device = 0);

// Machine peaks measured in the same run: cuBLAS GEMM (f16/bf16 in, f32 accumulate) TFLOP/s and
// device-to-device copy GB/s (read + write bytes).
struct MeasuredPeaks {
  double gemm_tflops = 0;
  double copy_gbps = 0;
};
MeasuredPeaks measure_peaks(DType gemm_dtype = DType::BF16);

// The streaming attention shape: `queries` queries against `frames` resident frames of
// `patch_tokens` patch tokens (one page each, page order shuffled) plus `special_tokens` special keys
// (in their own pages), heads x head_dim, K/V in dtype. Compared with the same kernel over a
// contiguous copy of the same keys in the same order (dense_attention, one span).
struct AttentionBenchConfig {
  int queries = 1005;
  int frames = 72;           // 8 scale + 64 window
  int patch_tokens = 999;
  int page_size = 0;         // 0 = patch_tokens; larger = padded pages
  int64_t special_tokens = 72 * 6;
  int heads = 16;
  int head_dim = 64;
  DType dtype = DType::BF16;
  AttentionImpl impl = AttentionImpl::Auto;
  int rows_per_warp = 0;  // tensor-core kernel: 16 or 32 (0 = kDefaultRowsPerWarp)
  int kv_splits = 0;      // tensor-core kernel: key ranges, 0 = auto (CudaAttentionParams::kv_splits)
  int iterations = 20;
  uint64_t seed = 1;
};
struct AttentionBenchResult {
  AttentionImpl impl = AttentionImpl::Auto;  // resolved kernel
  int kv_splits = 1;                         // key ranges it ran (planned_kv_splits)
  int64_t keys = 0;
  double paged_ms = 0, contiguous_ms = 0;   // mean per call
  double paged_tflops = 0, contiguous_tflops = 0;  // 4 * q * keys * heads * head_dim / time
  double paged_gbps = 0, contiguous_gbps = 0;      // unique K/V bytes / time (a lower bound on traffic)
  double max_abs_diff = 0;                   // paged vs contiguous outputs (same keys: ~0)
};
AttentionBenchResult bench_paged_vs_contiguous(const AttentionBenchConfig& config);

// Streams `frames` keyframes (after a scale phase) through a CudaPagedKVCache with real K/V writes
// and attention, recording device memory every `report_every` frames.
struct MemoryStudyConfig {
  int64_t frames = 10000;
  int report_every = 1000;
  int num_blocks = 2;
  int tokens_per_frame = 1005;
  int heads = 16;
  int head_dim = 64;
  DType dtype = DType::BF16;
  bool attend = true;  // false: bookkeeping steps only (bench::bookkeeping_step), no K/V traffic
  uint64_t seed = 2;
};
struct MemorySample {
  int64_t frame = 0;
  int64_t patch_bytes_reserved = 0;    // cache stats: patch pool (all blocks)
  int64_t special_bytes_reserved = 0;  // cache stats: special pages (all blocks)
  int64_t allocator_bytes = 0;         // everything allocated through the CudaAllocator
  int64_t device_used_bytes = 0;       // cudaMemGetInfo total - free (whole device, all processes)
  int64_t visible_tokens = 0;
  double ms_per_frame = 0;             // mean wall time of the frames since the previous sample
};
std::vector<MemorySample> run_memory_study(const MemoryStudyConfig& config);

}  // namespace lingbot::cuda
