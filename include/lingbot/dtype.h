#pragma once
// Storage dtypes and scalar conversions. Compute is always f32; f16/bf16 are storage formats.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lingbot {

enum class DType : uint8_t { F32, F16, BF16 };

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
std::string_view dtype_name(DType t);            // "f32", "f16", "bf16"
inline bool dtype_known(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
DType parse_dtype(std::string_view name);        // throws Error naming the bad value

// IEEE half <-> float, round-to-nearest-even; handles subnormals, inf, nan.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// bfloat16 <-> float, round-to-nearest-even (nan stays nan).
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  // Round to nearest even; NaN stays a (quiet) NaN. Branch-free, so conversion loops vectorise.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Convert n floats into dst of dtype t (dst holds n * dtype_size(t) bytes), and back.
void convert_from_f32(const float* src, void* dst, DType t, size_t n);
void convert_to_f32(const void* src, DType t, float* dst, size_t n);

}  // namespace lingbot
