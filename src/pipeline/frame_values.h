#pragma once
// The input check both sessions make before a frame reaches the model.
#include <cstdint>

namespace lingbot::pipeline {

// The accepted range of a frame's values: RGB in [0, 1] with a 1 % margin (a resampled or
// colour-converted frame may overshoot slightly; 8-bit or mean/std-normalised values do not fit).
inline constexpr float kFrameValueLow = -0.01f;
inline constexpr float kFrameValueHigh = 1.01f;

// Frame `index` (of the sequence) holds n values that must lie in [kFrameValueLow, kFrameValueHigh]: throws
// Error when one is NaN or inf (every output would be NaN) or lies outside (8-bit or mean/std
// normalised values give a confidently wrong reconstruction).
void check_frame_values(const float* image, int64_t n, int64_t index);

}  // namespace lingbot::pipeline
