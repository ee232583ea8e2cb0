#pragma once
// Antialiased bicubic resampling, reproducing torch.nn.functional.interpolate(mode="bicubic",
// antialias=True, align_corners=False, size=...) on f32 CPU tensors: Keys cubic with a = -0.5, support
// widened by the down-scale factor, weights normalised per output sample, separable (width pass first,
// then height), all in f32 with the reference's own index/weight arithmetic. Used to resample the
// DINOv2 position-embedding grid to the input's patch grid.
#include <cstdint>
#include <vector>

namespace lingbot::kernels {

// in: f32 [channels, in_h, in_w]; out: f32 [channels, out_h, out_w] (caller-allocated).
// A dimension whose size does not change is copied unchanged, as in the reference.
void resize_bicubic_aa(const float* in, int64_t channels, int64_t in_h, int64_t in_w, float* out, int64_t out_h,
                       int64_t out_w, int num_threads);

// The per-axis resampling weights of that resize (`in` samples to `out`): output o is
// Σ_{j < count[o]} w[o·max_taps + j] · in[first[o] + j], summed in that order starting from j = 0.
// Shared with device backends, so every backend uses the reference's exact f32 weights.
struct ResampleWeights {
  std::vector<int64_t> first, count;
  std::vector<float> w;  // [out, max_taps], zero past count
  int64_t max_taps = 0;
};
ResampleWeights bicubic_aa_weights(int64_t in, int64_t out);

}  // namespace lingbot::kernels
