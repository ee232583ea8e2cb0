#include "pipeline/session_backend.h"

#include "compute/cpu/cpu_backend.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention_rule.h"  // plain C++: also in builds without CUDA

#if LINGBOT_HAVE_CUDA
#include "compute/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kvcache/cuda/kv_cache_cuda.h"
#endif

namespace lingbot {

std::unique_ptr<compute::Backend> make_session_backend(Device device, int threads) {
  switch (device) {
    case Device::Cpu: return std::make_unique<compute::CpuBackend>(threads);
    case Device::Cuda:
#if LINGBOT_HAVE_CUDA
      return std::make_unique<compute::CudaBackend>();
#else
      break;
#endif
    case Device::Auto: break;
  }
  throw Error(detail::concat("session backend: device ", device_name(device),
                             device == Device::Auto ? " must be resolved first" : " is not in this build"));
}

std::unique_ptr<KVCache> make_session_kv_cache(compute::Backend& be, KVBackend kind, const CacheOptions& options,
                                               Allocator& host) {
  if (be.allocator().kind() == MemoryKind::Host) return make_kv_cache(kind, options, host);
#if LINGBOT_HAVE_CUDA
  if (auto* cuda = dynamic_cast<compute::CudaBackend*>(&be))
    return cuda::make_cuda_kv_cache(kind, options, be.allocator(), cuda->stream());
#endif
  throw Error(detail::concat("no KV cache for the memory of backend ", be.description()));
}

DType cuda_auto_weights_dtype(int major, int /*minor*/) { return major >= 8 ? DType::BF16 : DType::F32; }

WeightsDtypeForDevice parse_weights_dtype(std::string_view name, Device device) {
  LINGBOT_CHECK(device != Device::Auto, "parse_weights_dtype: resolve the device first");
  WeightsDtypeForDevice w;
  if (name == "auto") {
    w.dtype = kernels::auto_weights_dtype();
  } else {
    try {
      w.dtype = parse_dtype(name);
    } catch (const Error&) {
      throw Error(detail::concat("unknown weights dtype '", name, "' (expected auto, f32, f16 or bf16)"));
    }
  }
  if (device == Device::Cpu) {
    if (kernels::gemm_path(w.dtype) == kernels::GemmPath::PanelSgemm)
      w.notice = detail::concat("notice: no native ", dtype_name(w.dtype), " GEMM on this CPU: ", dtype_name(w.dtype),
                                " weights halve their memory but each GEMM widens them to f32 (slower than f32)");
    if (name == "auto")
      w.rule = detail::concat("auto: ", dtype_name(w.dtype), w.dtype == DType::F32 ? " (no native bf16 GEMM on this CPU)"
                                                                                     : " (native bf16 GEMM on this CPU)");
    return w;
  }
  resolve_device(device);  // throws naming what is missing
  if (name != "auto") return w;
#if LINGBOT_HAVE_CUDA
  const cuda::ComputeCapability cc = cuda::compute_capability(0);
  w.dtype = cuda_auto_weights_dtype(cc.major, cc.minor);
  w.rule = detail::concat("auto: ", dtype_name(w.dtype), " on sm_", cc.major, cc.minor,
                          " (bf16 tensor cores from sm_80, f32 below)");
#endif
  return w;
}

std::string gemm_path_description(Device device, DType weights) {
  if (device != Device::Cuda) return kernels::gemm_path_description(weights);
  // As CudaBackend::linear: reduced weights round the activations to their dtype (cublasGemmEx).
  return weights == DType::F32 ? "cuBLAS f32 SGEMM (no TF32)"
                               : detail::concat("cuBLAS ", dtype_name(weights),
                                                " tensor cores, activations rounded to it, f32 accumulation");
}

std::string attention_path_description(Device device, DType kv, DType weights, int64_t head_dim) {
#if LINGBOT_HAVE_CUDA
  if (device == Device::Cuda)  // the session's device (CudaBackend's default, device 0)
    return attention_path_description(device, kv, weights, head_dim, cuda::compute_capability(0).major);
#endif
  // No device in this build: what an sm_80+ one runs.
  return attention_path_description(device, kv, weights, head_dim, cuda::kTensorCoreMinSmMajor);
}

std::string attention_path_description(Device device, DType kv, DType weights, int64_t head_dim, int sm_major) {
  if (device == Device::Cuda) {
    // The dispatch's own rule (kernels/cuda/attention_rule.h). The encoder's and the frame blocks'
    // attention takes bf16 K/V with bf16 weights (model/blocks.cpp), f32 otherwise.
    const auto path = [&](DType k) {
      if (cuda::auto_runs_tensor_core_attention(k, static_cast<int>(head_dim), sm_major))
        return detail::concat("tensor cores (Q and P rounded to ", dtype_name(k), ", f32 accumulation)");
      if (k == DType::F32) return std::string("SIMT kernel, f32 math");
      return detail::concat("SIMT kernel on ", dtype_name(k), " K/V, f32 math",
                            cuda::tensor_core_attention_fits(k, static_cast<int>(head_dim))
                                ? detail::concat(" (tensor cores need compute capability 8.0, this GPU is ", sm_major, ".x)")
                                : std::string());
    };
    return detail::concat("CUDA: over the cache ", path(kv), " (", dtype_name(kv), " K/V); encoder and frame blocks ",
                          path(weights == DType::BF16 ? DType::BF16 : DType::F32), " (", dtype_name(weights), " weights)");
  }
  const std::string bf16 =
      kernels::amx_bf16_attention() && head_dim % 32 == 0 ? "bf16 on AMX tiles" : "bf16 (vdpbf16ps)";
  const bool cache_bf16 =
      kernels::resolved_attention_compute(kernels::AttentionCompute::Auto, kv) == kernels::AttentionCompute::Bf16;
  const bool frame_bf16 = weights == DType::BF16 && kernels::native_bf16_attention();
  return detail::concat("over the cache ", cache_bf16 ? bf16 : std::string("f32"), " (", dtype_name(kv),
                        " K/V); encoder and frame blocks ", frame_bf16 ? bf16 : std::string("f32"), " (",
                        dtype_name(weights), " weights); camera head f32");
}

}  // namespace lingbot
