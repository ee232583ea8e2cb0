#pragma once
// The session's compute backend and the KV cache that lives in its memory: the one place that maps
// a Device to an implementation (the model itself only sees compute::Backend).
#include <memory>
#include <string>
#include <string_view>

#include "compute/backend.h"
#include "kvcache/kv_cache.h"
#include "lingbot/device.h"

namespace lingbot {

// device: Cpu or Cuda (resolved; see resolve_device). threads: the CPU backend's OpenMP threads.
std::unique_ptr<compute::Backend> make_session_backend(Device device, int threads);

// A KV cache of `kind` in be's memory: host caches allocate from `host`; a device backend gets its
// device cache (only KVBackend::Paged exists on CUDA; others throw naming the backend).
std::unique_ptr<KVCache> make_session_kv_cache(compute::Backend& be, KVBackend kind, const CacheOptions& options,
                                               Allocator& host);

// The weights dtype `auto` stands for on a CUDA device of compute capability major.minor: bf16 from
// 8.0 on (Ampere and later: bf16 tensor cores, f32 accumulation), f32 below (f16 tensor cores exist
// from 7.0, but f16 weights overflow where bf16 ones do not, and `auto` never trades range for speed).
DType cuda_auto_weights_dtype(int major, int minor);

// A weights dtype as the CLI takes it ("auto" | "f32" | "f16" | "bf16", aliases as parse_dtype) for a
// session on `device` (resolved: Cpu or Cuda). auto: kernels::auto_weights_dtype() on the CPU,
// cuda_auto_weights_dtype() of CUDA device 0 (the device sessions use) on cuda.
struct WeightsDtypeForDevice {
  DType dtype = DType::F32;
  std::string rule;    // auto only: what it chose and why, e.g. "auto: bf16 on sm_90 (bf16 tensor cores from sm_80)"
  std::string notice;  // CPU only: one line when the dtype has no native GEMM here (slower than f32), else ""
};
// Throws Error("unknown weights dtype 'x' (expected auto, f32, f16 or bf16)"), or as resolve_device
// for cuda without support or device.
WeightsDtypeForDevice parse_weights_dtype(std::string_view name, Device device);

// What multiplies the block linears with `weights` on `device`, one phrase for banners and reports:
// kernels::gemm_path_description on the CPU; the cuBLAS path on cuda.
std::string gemm_path_description(Device device, DType weights);

// How the attention computes on `device` with these K/V and weights dtypes and the aggregator's
// head_dim, one phrase for banners: on the CPU the path over the cache
// (kernels::resolved_attention_compute; AMX tiles where head_dim % 32 == 0, else vdpbf16ps) and the
// intra-frame attention (bf16 with bf16 weights where native, compute::AttentionPrecision).
std::string attention_path_description(Device device, DType kv, DType weights, int64_t head_dim);
// The same for a CUDA device of compute capability `cuda_sm_major`.x (the above reads device 0's).
std::string attention_path_description(Device device, DType kv, DType weights, int64_t head_dim, int cuda_sm_major);

}  // namespace lingbot
