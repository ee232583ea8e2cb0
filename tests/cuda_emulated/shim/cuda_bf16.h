#pragma once
// Host emulation of the cuda_bf16.h subset the kernels use (see cuda_fp16.h here). Test code only.
#include <cstdint>

#include "lingbot/dtype.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;  // x in the low 16 bits
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {lingbot::f32_to_bf16(f)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return lingbot::bf16_to_f32(h.bits); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
