// The model ops of model_ops_cuda.h. Grid-stride loops over one thread per output element; the
// arithmetic spells out every rounding (__fmul_rn / __fadd_rn / __fdiv_rn) in the CPU kernels'
// order so nvcc cannot contract it into FMAs the CPU does not use.
#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/grid.h"
#include "kernels/cuda/model_ops_cuda.h"

namespace lingbot::cuda {
namespace {

using grid::blocks_for;
using grid::kThreads;

__device__ __forceinline__ int64_t first_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

#define LINGBOT_GRID_LOOP(i, n) for (int64_t i = first_index(); i < (n); i += grid_step())

void check_launch() { LINGBOT_CUDA_CHECK(cudaGetLastError()); }

__global__ void silu_kernel(float* x, int64_t n) {
  LINGBOT_GRID_LOOP(i, n) {
    const float v = x[i];
    x[i] = __fdiv_rn(v, __fadd_rn(1.0f, expf(-v)));
  }
}

__global__ void relu_kernel(float* x, int64_t n) {
  LINGBOT_GRID_LOOP(i, n) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  LINGBOT_GRID_LOOP(i, n) y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void layer_scale_add_kernel(float* y, const float* x, const float* gamma, int64_t total, int64_t dim) {
  LINGBOT_GRID_LOOP(i, total) y[i] = __fadd_rn(y[i], __fmul_rn(gamma[i % dim], x[i]));
}

// y [cols, rows] += x^T: one thread per y element (coalesced writes; the reads stride by cols).
__global__ void add_transposed_kernel(float* y, const float* x, int64_t rows, int64_t cols) {
  LINGBOT_GRID_LOOP(i, rows * cols) {
    const int64_t c = i / rows, r = i % rows;
    y[i] = __fadd_rn(x[r * cols + c], y[i]);
  }
}

// One thread per y element; the tables are small and stay in cache.
__global__ void add_axis_tables_kernel(float* y, int64_t channels, int64_t h, int64_t w, const float* columns,
                                       const float* rows) {
  const int64_t half = channels / 2, plane = h * w;
  LINGBOT_GRID_LOOP(i, channels * plane) {
    const int64_t c = i / plane, r = (i % plane) / w, x = i % w;
    y[i] = __fadd_rn(y[i], c < half ? columns[c * w + x] : rows[(c - half) * h + r]);
  }
}

__global__ void normalize_channels_kernel(const float* x, int64_t channels, int64_t plane, const float* mean,
                                          const float* stdev, float* y) {
  LINGBOT_GRID_LOOP(i, channels * plane) {
    const int64_t c = i / plane;
    y[i] = __fdiv_rn(__fsub_rn(x[i], mean[c]), stdev[c]);
  }
}

__global__ void modulate_kernel(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim) {
  LINGBOT_GRID_LOOP(i, n * dim) {
    const int64_t r = i / dim, c = i % dim;
    const float* shift = mod + r * 3 * dim;
    const float scale = shift[dim + c], gate = shift[2 * dim + c];
    x[i] = __fadd_rn(__fmul_rn(gate, __fadd_rn(__fmul_rn(a[i], __fadd_rn(1.0f, scale)), shift[c])), t[i]);
  }
}

__global__ void add_bias_rows_kernel(float* y, const float* b, int64_t n, int64_t cols, int64_t y_stride) {
  LINGBOT_GRID_LOOP(i, n * cols) {
    const int64_t r = i / cols, c = i % cols;
    y[r * y_stride + c] = __fadd_rn(y[r * y_stride + c], b[c]);
  }
}

__global__ void bias_gelu_kernel(float* y, const float* b, int64_t n, int64_t cols) {
  LINGBOT_GRID_LOOP(i, n * cols) y[i] = gelu_erf_value(b ? __fadd_rn(y[i], b[i % cols]) : y[i]);
}

__global__ void bias_scale_add_kernel(float* res, const float* y, const float* b, const float* gamma, int64_t n,
                                      int64_t cols) {
  LINGBOT_GRID_LOOP(i, n * cols) {
    const int64_t c = i % cols;
    const float v = b ? __fadd_rn(y[i], b[c]) : y[i];
    res[i] = __fadd_rn(res[i], gamma ? __fmul_rn(gamma[c], v) : v);
  }
}

__global__ void fill_channels_kernel(float* y, const float* b, int64_t channels, int64_t plane) {
  LINGBOT_GRID_LOOP(i, channels * plane) y[i] = b ? b[i / plane] : 0.0f;
}

// One thread per rotated pair: (token, head, direction d, i < head_dim/4).
__global__ void rope2d_kernel(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
                              const float* cos, const float* sin) {
  const int half = head_dim / 2, quarter = head_dim / 4;
  LINGBOT_GRID_LOOP(p, n_tokens * heads * half) {
    const int64_t n = p / (static_cast<int64_t>(heads) * half);
    const int rem = static_cast<int>(p % (static_cast<int64_t>(heads) * half));
    const int h = rem / half, d = (rem % half) / quarter, i = rem % quarter;
    float* xd = x + n * token_stride + static_cast<int64_t>(h) * head_dim + d * half;
    const float cv = cos[n * half + d * quarter + i], sv = sin[n * half + d * quarter + i];
    const float a = xd[i], b = xd[quarter + i];
    xd[i] = __fadd_rn(__fmul_rn(a, cv), __fmul_rn(-b, sv));
    xd[quarter + i] = __fadd_rn(__fmul_rn(b, cv), __fmul_rn(a, sv));
  }
}

// One thread per interleaved pair: (token, head, i < head_dim/2).
__global__ void rope3d_kernel(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
                              const float* cos, const float* sin) {
  const int half = head_dim / 2;
  LINGBOT_GRID_LOOP(p, n_tokens * heads * half) {
    const int64_t n = p / (static_cast<int64_t>(heads) * half);
    const int rem = static_cast<int>(p % (static_cast<int64_t>(heads) * half));
    const int h = rem / half, i = rem % half;
    float* xh = x + n * token_stride + static_cast<int64_t>(h) * head_dim;
    const float c = cos[n * half + i], s = sin[n * half + i];
    const float a = xh[2 * i], b = xh[2 * i + 1];
    xh[2 * i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    xh[2 * i + 1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
  }
}

__global__ void im2col_kernel(const float* x, int64_t h, int64_t w, int64_t kh, int64_t kw, int stride, int padding,
                              int64_t row0, int64_t rows, int64_t wo, int64_t K, float* col) {
  const int64_t ncols = rows * wo;
  LINGBOT_GRID_LOOP(i, K * ncols) {
    const int64_t krow = i / ncols, rc = i % ncols;
    const int64_t ci = krow / (kh * kw), a = (krow / kw) % kh, b = krow % kw;
    const int64_t r = rc / wo, ox = rc % wo;
    const int64_t iy = (row0 + r) * stride - padding + a, ix = ox * stride - padding + b;
    col[i] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[(ci * h + iy) * w + ix] : 0.0f;
  }
}

__global__ void col2im_transposed_kernel(const float* cols, int64_t c_out, int64_t kh, int64_t kw, int64_t h,
                                         int64_t w, int stride, int padding, int64_t ho, int64_t wo,
                                         const float* bias, float* y) {
  const int64_t hw = h * w;
  LINGBOT_GRID_LOOP(idx, c_out * ho * wo) {
    const int64_t co = idx / (ho * wo), oy = (idx / wo) % ho, ox = idx % wo;
    float acc = bias ? bias[co] : 0.0f;
    for (int64_t a = 0; a < kh; ++a) {
      const int64_t ty = oy + padding - a;  // = i·stride
      if (ty < 0 || ty % stride != 0 || ty / stride >= h) continue;
      const int64_t i = ty / stride;
      for (int64_t b = 0; b < kw; ++b) {
        const int64_t tx = ox + padding - b;
        if (tx < 0 || tx % stride != 0 || tx / stride >= w) continue;
        acc = __fadd_rn(acc, cols[((co * kh + a) * kw + b) * hw + i * w + tx / stride]);
      }
    }
    y[idx] = acc;
  }
}

__global__ void resize_bilinear_kernel(const float* x, int64_t channels, int64_t h, int64_t w, BilinearAxis ty,
                                       BilinearAxis tx, int64_t out_h, int64_t out_w, float* y) {
  LINGBOT_GRID_LOOP(idx, channels * out_h * out_w) {
    const int64_t ch = idx / (out_h * out_w), oy = (idx / out_w) % out_h, ox = idx % out_w;
    const float* r0 = x + (ch * h + ty.i0[oy]) * w;
    const float* r1 = x + (ch * h + ty.i1[oy]) * w;
    const int64_t x0 = tx.i0[ox], x1 = tx.i1[ox];
    const float wx0 = tx.w0[ox], wx1 = tx.w1[ox];
    const float top = __fadd_rn(__fmul_rn(wx0, r0[x0]), __fmul_rn(wx1, r0[x1]));
    const float bot = __fadd_rn(__fmul_rn(wx0, r1[x0]), __fmul_rn(wx1, r1[x1]));
    y[idx] = __fadd_rn(__fmul_rn(ty.w0[oy], top), __fmul_rn(ty.w1[oy], bot));
  }
}

// Σ_j w[j] · s[j·step] from j = 0 upward, as kernels/cpu/resize_aa.cpp's tap_sum.
__device__ __forceinline__ float tap_sum(const float* s, int64_t step, const float* w, int n) {
  if (n == 0) return 0.0f;
  float acc = __fmul_rn(s[0], w[0]);
  for (int j = 1; j < n; ++j) acc = __fadd_rn(acc, __fmul_rn(s[j * step], w[j]));
  return acc;
}

__global__ void resample_rows_kernel(const float* in, int64_t lines, int64_t in_w, ResampleAxis a, int64_t out_w,
                                     float* out) {
  LINGBOT_GRID_LOOP(idx, lines * out_w) {
    const int64_t l = idx / out_w, o = idx % out_w;
    out[idx] = tap_sum(in + l * in_w + a.first[o], 1, a.w + o * a.max_taps, a.count[o]);
  }
}

__global__ void resample_columns_kernel(const float* in, int64_t channels, int64_t in_h, int64_t width,
                                        ResampleAxis a, int64_t out_h, float* out) {
  LINGBOT_GRID_LOOP(idx, channels * out_h * width) {
    const int64_t c = idx / (out_h * width), o = (idx / width) % out_h, xx = idx % width;
    out[idx] = tap_sum(in + (c * in_h + a.first[o]) * width + xx, width, a.w + o * a.max_taps, a.count[o]);
  }
}

__global__ void patchify_kernel(const float* image, int64_t channels, int64_t H, int64_t W, int64_t k, float* cols) {
  const int64_t gw = W / k, row = channels * k * k, patches = (H / k) * gw;
  LINGBOT_GRID_LOOP(idx, patches * row) {
    const int64_t p = idx / row, e = idx % row;
    const int64_t c = e / (k * k), ky = (e / k) % k, kx = e % k;
    const int64_t py = p / gw, px = p % gw;
    cols[idx] = image[(c * H + py * k + ky) * W + px * k + kx];
  }
}

}  // namespace

void silu(float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  silu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n);
  check_launch();
}

void relu(float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  relu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n);
  check_launch();
}

void add(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n);
  check_launch();
}

void layer_scale_add(float* y, const float* x, const float* gamma, int64_t rows, int64_t dim, cudaStream_t stream) {
  if (!gamma) return add(y, x, rows * dim, stream);
  if (rows <= 0 || dim <= 0) return;
  layer_scale_add_kernel<<<blocks_for(rows * dim), kThreads, 0, stream>>>(y, x, gamma, rows * dim, dim);
  check_launch();
}

void add_transposed(float* y, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  add_transposed_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, x, rows, cols);
  check_launch();
}

void add_axis_tables(float* y, int64_t channels, int64_t h, int64_t w, const float* columns, const float* rows,
                     cudaStream_t stream) {
  if (channels <= 0 || h <= 0 || w <= 0) return;
  add_axis_tables_kernel<<<blocks_for(channels * h * w), kThreads, 0, stream>>>(y, channels, h, w, columns, rows);
  check_launch();
}

void normalize_channels(const float* x, int64_t channels, int64_t plane, const float* mean, const float* stdev,
                        float* y, cudaStream_t stream) {
  if (channels <= 0 || plane <= 0) return;
  normalize_channels_kernel<<<blocks_for(channels * plane), kThreads, 0, stream>>>(x, channels, plane, mean, stdev,
                                                                                   y);
  check_launch();
}

void modulate(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim,
              cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  modulate_kernel<<<blocks_for(n * dim), kThreads, 0, stream>>>(x, a, t, mod, n, dim);
  check_launch();
}

void add_bias_rows(float* y, const float* b, int64_t n, int64_t cols, int64_t y_stride, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  add_bias_rows_kernel<<<blocks_for(n * cols), kThreads, 0, stream>>>(y, b, n, cols, y_stride);
  check_launch();
}

void bias_gelu(float* y, const float* b, int64_t n, int64_t cols, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  bias_gelu_kernel<<<blocks_for(n * cols), kThreads, 0, stream>>>(y, b, n, cols);
  check_launch();
}

void bias_scale_add(float* res, const float* y, const float* b, const float* gamma, int64_t n, int64_t cols,
                    cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  bias_scale_add_kernel<<<blocks_for(n * cols), kThreads, 0, stream>>>(res, y, b, gamma, n, cols);
  check_launch();
}

void fill_channels(float* y, const float* b, int64_t channels, int64_t plane, cudaStream_t stream) {
  if (channels <= 0 || plane <= 0) return;
  fill_channels_kernel<<<blocks_for(channels * plane), kThreads, 0, stream>>>(y, b, channels, plane);
  check_launch();
}

void rope2d_apply(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride, const float* cos,
                  const float* sin, cudaStream_t stream) {
  LINGBOT_CHECK(head_dim > 0 && head_dim % 4 == 0, "rope2d: head_dim must be a positive multiple of 4, got ",
                head_dim);
  if (n_tokens <= 0 || heads <= 0) return;
  rope2d_kernel<<<blocks_for(n_tokens * heads * (head_dim / 2)), kThreads, 0, stream>>>(x, n_tokens, heads, head_dim,
                                                                                       token_stride, cos, sin);
  check_launch();
}

void rope3d_apply(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride, const float* cos,
                  const float* sin, cudaStream_t stream) {
  LINGBOT_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope3d: head_dim must be a positive even number, got ",
                head_dim);
  if (n_tokens <= 0 || heads <= 0) return;
  rope3d_kernel<<<blocks_for(n_tokens * heads * (head_dim / 2)), kThreads, 0, stream>>>(x, n_tokens, heads, head_dim,
                                                                                       token_stride, cos, sin);
  check_launch();
}

void im2col(const float* x, int64_t c_in, int64_t h, int64_t w, int64_t kh, int64_t kw, int stride, int padding,
            int64_t row0, int64_t rows, int64_t wo, float* col, cudaStream_t stream) {
  const int64_t K = c_in * kh * kw;
  if (K <= 0 || rows <= 0 || wo <= 0) return;
  im2col_kernel<<<blocks_for(K * rows * wo), kThreads, 0, stream>>>(x, h, w, kh, kw, stride, padding, row0, rows,
                                                                    wo, K, col);
  check_launch();
}

void col2im_transposed(const float* cols, int64_t c_out, int64_t kh, int64_t kw, int64_t h, int64_t w, int stride,
                       int padding, int64_t ho, int64_t wo, const float* bias, float* y, cudaStream_t stream) {
  if (c_out <= 0 || ho <= 0 || wo <= 0) return;
  col2im_transposed_kernel<<<blocks_for(c_out * ho * wo), kThreads, 0, stream>>>(cols, c_out, kh, kw, h, w, stride,
                                                                                 padding, ho, wo, bias, y);
  check_launch();
}

void resize_bilinear(const float* x, int64_t channels, int64_t h, int64_t w, const BilinearAxis& ty,
                     const BilinearAxis& tx, int64_t out_h, int64_t out_w, float* y, cudaStream_t stream) {
  if (channels <= 0 || out_h <= 0 || out_w <= 0) return;
  resize_bilinear_kernel<<<blocks_for(channels * out_h * out_w), kThreads, 0, stream>>>(x, channels, h, w, ty, tx,
                                                                                       out_h, out_w, y);
  check_launch();
}

void resample_rows(const float* in, int64_t lines, int64_t in_w, const ResampleAxis& a, int64_t out_w, float* out,
                   cudaStream_t stream) {
  if (lines <= 0 || out_w <= 0) return;
  resample_rows_kernel<<<blocks_for(lines * out_w), kThreads, 0, stream>>>(in, lines, in_w, a, out_w, out);
  check_launch();
}

void resample_columns(const float* in, int64_t channels, int64_t in_h, int64_t width, const ResampleAxis& a,
                      int64_t out_h, float* out, cudaStream_t stream) {
  if (channels <= 0 || out_h <= 0 || width <= 0) return;
  resample_columns_kernel<<<blocks_for(channels * out_h * width), kThreads, 0, stream>>>(in, channels, in_h, width, a,
                                                                                        out_h, out);
  check_launch();
}

void patchify(const float* image, int64_t channels, int64_t H, int64_t W, int64_t k, float* cols,
              cudaStream_t stream) {
  LINGBOT_CHECK(k > 0 && H % k == 0 && W % k == 0, "patchify: image ", H, "x", W, " is not a multiple of patch size ",
                k);
  const int64_t total = (H / k) * (W / k) * channels * k * k;
  if (total <= 0) return;
  patchify_kernel<<<blocks_for(total), kThreads, 0, stream>>>(image, channels, H, W, k, cols);
  check_launch();
}

}  // namespace lingbot::cuda
