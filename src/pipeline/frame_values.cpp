#include "pipeline/frame_values.h"

#include <cmath>

#include "core/error.h"

namespace lingbot::pipeline {

void check_frame_values(const float* image, int64_t n, int64_t index) {
  int64_t non_finite = 0;
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = image[i];
    if (!std::isfinite(v)) ++non_finite;
    else if (v < lo) lo = v;
    else if (v > hi) hi = v;
  }
  LINGBOT_CHECK(non_finite == 0, "frame ", index, ": ", non_finite, " of its ", n,
                " values are not finite (NaN or inf); frames are RGB in [0, 1]");
  LINGBOT_CHECK(lo >= kFrameValueLow && hi <= kFrameValueHigh, "frame ", index, ": values from ", lo, " to ", hi,
                " are outside [0, 1], the range of RGB frames", hi > 2.0f ? " (8-bit values? divide by 255)" : "");
}

}  // namespace lingbot::pipeline
