#pragma once
// 2-D convolution, transposed convolution and bilinear resize on single feature maps (CPU, f32).
//
// Layouts (PyTorch's, row-major, one image at a time; callers loop over frames):
//   feature map  x        [C, H, W]
//   conv2d weight         [C_out, C_in, kh, kw]          (nn.Conv2d)
//   conv_transpose2d wt   [C_in, C_out, kh, kw]          (nn.ConvTranspose2d)
//   bias                  [C_out] or nullptr
// conv2d runs as im2col + GEMM (kernels::gemm, BLAS on fixed tiles); 1x1 stride-1 convolutions skip
// im2col. Large inputs are processed in row bands whose size depends only on the shapes, so memory
// stays bounded (about 32 MiB of im2col scratch) and results are bit-identical for any thread count.
// Groups and dilation are not supported (the model does not use them).
// conv2d also takes bf16/f16 weights: where oneDNN has a native matmul for the dtype (bf16 on
// AVX512_BF16/AMX CPUs) the input is rounded to it and multiplied with f32 accumulation
// (y = round(x) ⊛ W + b, the contract of kernels::linear's DnnlNative path); elsewhere the weights are
// widened to f32 per call and x stays f32. Feature maps and bias are always f32.
#include "kernels/feature_map.h"
#include "lingbot/tensor.h"

namespace lingbot::kernels {

struct Conv2dParams {
  int stride = 1;
  int padding = 0;   // zero padding on every side
  int num_threads = 1;
};

// Output size of a convolution along one axis: (in + 2·padding − kernel) / stride + 1.
int64_t conv2d_out_size(int64_t in, int64_t kernel, int stride, int padding);
// Output size of a transposed convolution: (in − 1)·stride − 2·padding + kernel.
int64_t conv_transpose2d_out_size(int64_t in, int64_t kernel, int stride, int padding);

// The output size {H_out, W_out} of conv2d / conv_transpose2d on these arguments, after the checks
// both kernels make (4-D weight, f32 for conv_transpose2d, stride >= 1, padding >= 0, non-null x and y, matching input
// channels, bias f32 [C_out] or nullptr, a non-empty output); throws Error naming the mismatch.
// Shared with device backends, so every backend rejects bad arguments with the same messages.
struct ConvOutSize {
  int64_t height = 0, width = 0;
};
ConvOutSize check_conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, int stride, int padding,
                         const float* y);
ConvOutSize check_conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, int stride,
                                   int padding, const float* y);

// y[co, oy, ox] = bias[co] + Σ_{ci,a,b} w[co, ci, a, b] · x[ci, oy·s − p + a, ox·s − p + b] (zero outside).
// x: f32 [C_in, H, W]; weight: f32, bf16 or f16 [C_out, C_in, kh, kw]; bias: f32 [C_out] or nullptr.
// Returns f32 [C_out, H_out, W_out]. Throws Error naming the shape on mismatches.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params);
// The same into caller memory y [C_out, H_out, W_out] (which must not overlap x).
void conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params, float* y);

// The adjoint of conv2d: y[co, i·s − p + a, j·s − p + b] += Σ_ci x[ci, i, j] · w[ci, co, a, b], plus bias.
// x: f32 [C_in, H, W]; weight: f32 [C_in, C_out, kh, kw]; bias: f32 [C_out] or nullptr.
// Returns f32 [C_out, H_out, W_out]. Overlapping taps (kernel > stride) are summed in a fixed order.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params);
void conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params,
                      float* y);

// Bilinear resize with align_corners=True (PyTorch F.interpolate(mode="bilinear", align_corners=True)):
// output pixel (oy, ox) samples the input at (oy·(H−1)/(H_out−1), ox·(W−1)/(W_out−1)) (0 when the
// output size is 1), with the scale and weights computed in float as PyTorch does.
// x: f32 [C, H, W]; returns f32 [C, out_h, out_w]. Threaded over channels.
Tensor resize_bilinear_align_corners(const Tensor& x, int64_t out_h, int64_t out_w, int num_threads);
void resize_bilinear_align_corners(const MapView& x, int64_t out_h, int64_t out_w, float* y, int num_threads);

// The source indices and weights of that resize along one axis of `in` samples resized to `out`:
// output o = w0·in[i0] + w1·in[i1] (i1 = i0 at the last sample). Shared with device backends, so
// every backend samples the same positions with the same float weights.
struct BilinearTap {
  int64_t i0, i1;
  float w0, w1;
};
std::vector<BilinearTap> bilinear_align_corners_taps(int64_t in, int64_t out);

}  // namespace lingbot::kernels
