#pragma once
// The feature-map view shared by the CPU kernels (kernels/cpu/conv.h) and the compute interface
// (compute::MapView), device-neutral: the pointer is in whichever memory the caller's backend uses.

#include <cstdint>

namespace lingbot::kernels {

// A read-only feature map [channels, height, width] f32 (row-major, packed), borrowed.
struct MapView {
  const float* data = nullptr;
  int64_t channels = 0, height = 0, width = 0;
};

}  // namespace lingbot::kernels
