#pragma once
// The input check both sessions make before a frame reaches the model.
#include <cstdint>

namespace lingbot::pipeline {

// Frame `index` (of the sequence) holds n values that must be RGB in [0, 1] (a 1 % margin): throws
// Error when one is NaN or inf (every output would be NaN) or lies outside (8-bit or mean/std
// normalised values give a confidently wrong reconstruction).
void check_frame_values(const float* image, int64_t n, int64_t index);

}  // namespace lingbot::pipeline
