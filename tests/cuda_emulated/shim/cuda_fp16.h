#pragma once
// Host emulation of the cuda_fp16.h subset the kernels use: __half as its 16 bits, conversions
// rounding to nearest even (lingbot/dtype.h, the CPU kernels' conversions). Test code only.
#include <cstdint>

#include "lingbot/dtype.h"

struct __half {
  uint16_t bits;
};
struct __half2 {
  __half x, y;  // x in the low 16 bits
};
inline __half __float2half_rn(float f) { return {lingbot::f32_to_f16(f)}; }
inline float __half2float(__half h) { return lingbot::f16_to_f32(h.bits); }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__float2half_rn(lo), __float2half_rn(hi)}; }
