#pragma once
// CUDA versions of the remaining model ops of kernels/cpu (elementwise ops, RoPE, convolution
// helpers, resizes, patchify) that the CUDA compute backend (compute/cuda/cuda_backend.h) runs.
// All pointers are DEVICE pointers; every call is asynchronous on `stream` and throws
// lingbot::Error on a launch error. Shapes and semantics are those of the CPU kernels named per
// function; the elementwise arithmetic uses round-to-nearest intrinsics (no FMA contraction) in the
// CPU's operation order, so those results equal the CPU's bit for bit except where a function says
// otherwise.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace lingbot::cuda {

// ---- elementwise (kernels/cpu/ops.h) ----------------------------------------------------------------
// x / (1 + exp(−x)) in place (expf: within 2 ulp of the CPU's std::exp).
void silu(float* x, int64_t n, cudaStream_t stream);
void relu(float* x, int64_t n, cudaStream_t stream);           // max(x, 0) in place
void add(float* y, const float* x, int64_t n, cudaStream_t stream);  // y += x
// y[r, c] += gamma[c] · x[r, c] (gamma nullptr: plain add).
void layer_scale_add(float* y, const float* x, const float* gamma, int64_t rows, int64_t dim, cudaStream_t stream);
// y[c, r] += x[r, c] for x [rows, cols].
void add_transposed(float* y, const float* x, int64_t rows, int64_t cols, cudaStream_t stream);
// y [channels, h, w] += columns[c, x] (c < channels/2) or rows[c − channels/2, r] (the rest).
void add_axis_tables(float* y, int64_t channels, int64_t h, int64_t w, const float* columns, const float* rows,
                     cudaStream_t stream);
// y[c, i] = (x[c, i] − mean[c]) / stdev[c] over [channels, plane] (x == y allowed).
void normalize_channels(const float* x, int64_t channels, int64_t plane, const float* mean, const float* stdev,
                        float* y, cudaStream_t stream);
// x = gate · (a · (1 + scale) + shift) + t, rows of mod [n, 3·dim] = [shift | scale | gate].
void modulate(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim,
              cudaStream_t stream);
// y[r, c] += b[c] for n rows of `cols`, rows `y_stride` floats apart.
void add_bias_rows(float* y, const float* b, int64_t n, int64_t cols, int64_t y_stride, cudaStream_t stream);
// Fused linear epilogues over packed y [n, cols] (b / gamma nullptr: that term left out), the same
// arithmetic as the unfused ops in one pass:
//   bias_gelu:      y = gelu_erf(y + b)                 (= add_bias_rows, then gelu_erf)
//   bias_scale_add: res += gamma · (y + b), res [n, cols] (= add_bias_rows, then layer_scale_add)
void bias_gelu(float* y, const float* b, int64_t n, int64_t cols, cudaStream_t stream);
void bias_scale_add(float* res, const float* y, const float* b, const float* gamma, int64_t n, int64_t cols,
                    cudaStream_t stream);
// y[c, i] = b[c] over [channels, plane].
void fill_channels(float* y, const float* b, int64_t channels, int64_t plane, cudaStream_t stream);

// ---- RoPE (kernels/cpu/rope.h; cos/sin [n_tokens, head_dim/2] device tables) ---------------------
void rope2d_apply(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride, const float* cos,
                  const float* sin, cudaStream_t stream);
void rope3d_apply(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride, const float* cos,
                  const float* sin, cudaStream_t stream);

// ---- convolution helpers (kernels/cpu/conv.h) -------------------------------------------------------
// The im2col matrix of output rows [row0, row0 + rows) of a conv2d: col[(ci, a, b), (r, ox)] =
// x[ci, (row0 + r)·s − p + a, ox·s − p + b] (0 outside), x [c_in, h, w], wo output columns.
void im2col(const float* x, int64_t c_in, int64_t h, int64_t w, int64_t kh, int64_t kw, int stride, int padding,
            int64_t row0, int64_t rows, int64_t wo, float* col, cudaStream_t stream);
// The scatter of a transposed convolution, as a gather in the CPU's summation order: y[co, oy, ox] =
// bias[co] (0 when nullptr) + Σ over taps (a, b) in row-major order of cols[(co, a, b), (i, j)] with
// oy = i·s − p + a, ox = j·s − p + b. cols [c_out·kh·kw, h·w], y [c_out, ho, wo].
void col2im_transposed(const float* cols, int64_t c_out, int64_t kh, int64_t kw, int64_t h, int64_t w, int stride,
                       int padding, int64_t ho, int64_t wo, const float* bias, float* y, cudaStream_t stream);

// ---- resizes ------------------------------------------------------------------------------------------
// One axis of the align_corners bilinear resize (kernels::bilinear_align_corners_taps), [out] each.
struct BilinearAxis {
  const int32_t* i0 = nullptr;
  const int32_t* i1 = nullptr;
  const float* w0 = nullptr;
  const float* w1 = nullptr;
};
// y[c, oy, ox] = wy0·(wx0·x[c,i0y,i0x] + wx1·x[c,i0y,i1x]) + wy1·(wx0·x[c,i1y,i0x] + wx1·x[c,i1y,i1x]).
void resize_bilinear(const float* x, int64_t channels, int64_t h, int64_t w, const BilinearAxis& ty,
                     const BilinearAxis& tx, int64_t out_h, int64_t out_w, float* y, cudaStream_t stream);

// One axis of the antialiased bicubic resize (kernels::bicubic_aa_weights): first, count [out];
// weights [out, max_taps].
struct ResampleAxis {
  const int32_t* first = nullptr;
  const int32_t* count = nullptr;
  const float* w = nullptr;
  int max_taps = 0;
};
// Width pass: out[l, o] = Σ_j w[o, j] · in[l, first[o] + j] over `lines` lines of in_w samples.
void resample_rows(const float* in, int64_t lines, int64_t in_w, const ResampleAxis& a, int64_t out_w, float* out,
                   cudaStream_t stream);
// Height pass: out[c, o, x] = Σ_j w[o, j] · in[c, first[o] + j, x] for in [channels, in_h, width].
void resample_columns(const float* in, int64_t channels, int64_t in_h, int64_t width, const ResampleAxis& a,
                      int64_t out_h, float* out, cudaStream_t stream);

// ---- patch embedding (kernels/cpu/patch_embed.h) ------------------------------------------------
// cols [(H/k)(W/k), channels·k·k], each row ordered (channel, ky, kx); H and W multiples of k.
void patchify(const float* image, int64_t channels, int64_t H, int64_t W, int64_t k, float* cols,
              cudaStream_t stream);

}  // namespace lingbot::cuda
