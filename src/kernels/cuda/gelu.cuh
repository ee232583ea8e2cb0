#pragma once
// The erf GELU of one value, shared by the plain GELU kernel (ops.cu) and the fused bias + GELU
// epilogue (model_ops.cu), so both round identically: x · 0.5 · (1 + erf(x / sqrt(2))).
namespace lingbot::cuda {

__device__ __forceinline__ float gelu_erf_value(float x) { return x * 0.5f * (1.0f + erff(x * 0.70710678118654752f)); }

}  // namespace lingbot::cuda
