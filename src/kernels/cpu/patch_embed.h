#pragma once
// Patch embedding as im2col + GEMM: a k×k convolution with stride k and no padding (the ViT patch
// embed) equals `linear(patchify(image), W.reshape(out, channels*k*k), b)`.
#include <cstdint>

namespace lingbot::kernels {

// image: f32 [channels, H, W] with H, W multiples of k. cols: f32 [(H/k)*(W/k), channels*k*k],
// patches row-major, each row ordered (channel, ky, kx) like a PyTorch conv weight [out, c, k, k].
void patchify(const float* image, int64_t channels, int64_t H, int64_t W, int64_t k, float* cols, int num_threads);

// out: f32 [(H/k)*(W/k), out_channels] = conv2d(image, weight [out_channels, channels, k, k], bias, stride k).
// `cols` is caller scratch of (H/k)*(W/k)*channels*k*k floats.
void patch_embed(const float* image, int64_t channels, int64_t H, int64_t W, int64_t k, const float* weight,
                 const float* bias, int64_t out_channels, float* cols, float* out, int num_threads);

}  // namespace lingbot::kernels
