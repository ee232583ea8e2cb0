#pragma once
// The GPU acceptance measurements as printed reports, for `lingbot-map bench gpu` and the bundle's
// standalone `lingbot-gpu-bench` (scripts/gpu_check.sh runs one of them). Each prints a table and one
// machine-readable `RESULT ...` line to `out`, asserts only correctness and memory shape (never
// timing: gpu_check.sh judges the time ratio) and returns true when those checks hold. Both need a
// CUDA device and throw lingbot::Error when none is visible.
#include <cstdint>
#include <cstdio>

namespace lingbot::cuda {

// Paged vs contiguous attention at the 518x378 streaming shape (1005 queries, 72 frames of 999 patch
// tokens + specials) for bf16 / f16 / padded pages / the SIMT kernel / f32. RESULT streaming_bf16
// contiguous_over_paged_time=R paged_tflops=T peak_tflops=P. Check: the outputs agree (< 1e-3).
bool report_paged_vs_contiguous(std::FILE* out);

// `frames` keyframes through a CudaPagedKVCache (one block) with real K/V writes and attention,
// device memory sampled every 1000 frames (CSV rows). RESULT memory frames=N patch_bytes_flat=yes|no
// special_growth_bytes=S device_used_growth_bytes=D. Checks: patch memory flat; allocator growth
// beyond the special stream within 64 KiB (the device copy of the special-run table).
bool report_device_memory(std::FILE* out, int64_t frames);

}  // namespace lingbot::cuda
