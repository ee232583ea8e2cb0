#pragma once
// Which CUDA attention kernel AttentionImpl::Auto runs, as a plain rule (no CUDA headers): the one
// place both the dispatch (attention.cu, resolve_attention_impl) and `run`'s banner
// (pipeline/session_backend.cpp) read it, so the banner names the kernel that runs.
#include "lingbot/dtype.h"

namespace lingbot::cuda {

inline constexpr int kTensorCoreHeadDim = 64;  // the tensor-core kernel's only head_dim
inline constexpr int kTensorCoreMinSmMajor = 8;  // mma.sync on bf16 / f16: compute capability 8.0+

// The inputs the tensor-core kernel takes: f16 / bf16 K/V at head_dim kTensorCoreHeadDim.
inline bool tensor_core_attention_fits(DType kv_dtype, int head_dim) {
  return kv_dtype != DType::F32 && head_dim == kTensorCoreHeadDim;
}
// Auto's choice on a device of compute capability `sm_major`.x: the tensor-core kernel where it fits.
inline bool auto_runs_tensor_core_attention(DType kv_dtype, int head_dim, int sm_major) {
  return tensor_core_attention_fits(kv_dtype, head_dim) && sm_major >= kTensorCoreMinSmMajor;
}

}  // namespace lingbot::cuda
