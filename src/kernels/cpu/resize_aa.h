#pragma once
// Antialiased bicubic resampling, reproducing torch.nn.functional.interpolate(mode="bicubic",
// antialias=True, align_corners=False, size=...) on f32 CPU tensors: Keys cubic with a = -0.5, support
// widened by the down-scale factor, weights normalised per output sample, separable (width pass first,
// then height), all in f32 with the reference's own index/weight arithmetic. Used to resample the
// DINOv2 position-embedding grid to the input's patch grid.
#include <cstdint>

namespace lingbot::kernels {

// in: f32 [channels, in_h, in_w]; out: f32 [channels, out_h, out_w] (caller-allocated).
// A dimension whose size does not change is copied unchanged, as in the reference.
void resize_bicubic_aa(const float* in, int64_t channels, int64_t in_h, int64_t in_w, float* out, int64_t out_h,
                       int64_t out_w, int num_threads);

}  // namespace lingbot::kernels
