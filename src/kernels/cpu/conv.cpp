#include "kernels/cpu/conv.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/gemm_dnnl.h"
#include "kernels/cpu/ops.h"

namespace lingbot::kernels {

namespace {

// im2col scratch budget in floats (32 MiB). The band height derives from shapes only.
constexpr int64_t kIm2colBudget = int64_t{8} << 20;

void check_f32_rank(const Tensor& t, int rank, const char* op, const char* what) {
  LINGBOT_CHECK(t.dtype() == DType::F32, op, ": ", what, " must be f32, got ", dtype_name(t.dtype()));
  LINGBOT_CHECK(t.ndim() == rank, op, ": ", what, " must have ", rank, " dimensions, got ", shape_str(t.shape()));
}

void check_params(int stride, int padding, const char* op) {
  LINGBOT_CHECK(stride >= 1, op, ": stride must be >= 1, got ", stride);
  LINGBOT_CHECK(padding >= 0, op, ": padding must be >= 0, got ", padding);
}

void check_bias(const Tensor* bias, int64_t c_out, const char* op) {
  if (!bias) return;
  LINGBOT_CHECK(bias->dtype() == DType::F32, op, ": bias must be f32, got ", dtype_name(bias->dtype()));
  LINGBOT_CHECK(bias->ndim() == 1 && bias->dim(0) == c_out, op, ": bias shape ", shape_str(bias->shape()),
                " does not match ", c_out, " output channels");
}

int threads_of(int n) { return std::max(1, n); }

void check_weight_rank(const Tensor& t, const char* op) {
  LINGBOT_CHECK(t.ndim() == 4, op, ": weight must have 4 dimensions, got ", shape_str(t.shape()));
}

// One band of the im2col matrix: rows (ci, a, b) of K = C_in·kh·kw, columns = `rows` output rows × wo
// (zero outside the input). T is float, or uint16_t for inputs already rounded to bf16/f16 (zero is 0).
template <typename T>
void im2col_band(const T* xd, int64_t h, int64_t w, int64_t kh, int64_t kw, int s, int p, int64_t r0, int64_t rows,
                 int64_t wo, int64_t K, T* col, int nt) {
  const int64_t ncols = rows * wo;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && K > 1)
  for (int64_t krow = 0; krow < K; ++krow) {
    const int64_t ci = krow / (kh * kw), a = (krow / kw) % kh, b = krow % kw;
    const T* xc = xd + ci * h * w;
    T* dst = col + krow * ncols;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t iy = (r0 + r) * s - p + a;
      T* drow = dst + r * wo;
      if (iy < 0 || iy >= h) {
        std::fill(drow, drow + wo, T{0});
        continue;
      }
      const T* xrow = xc + iy * w;
      if (s == 1) {
        // A shifted copy of the input row: ix = ox - p + b is inside [0, w) for ox in [lo, hi).
        const int64_t lo = std::clamp<int64_t>(p - b, 0, wo), hi = std::clamp<int64_t>(w + p - b, lo, wo);
        std::fill(drow, drow + lo, T{0});
        std::copy(xrow + (lo - p + b), xrow + (hi - p + b), drow + lo);
        std::fill(drow + hi, drow + wo, T{0});
        continue;
      }
      for (int64_t ox = 0; ox < wo; ++ox) {
        const int64_t ix = ox * s - p + b;
        drow[ox] = (ix >= 0 && ix < w) ? xrow[ix] : T{0};
      }
    }
  }
}

// Output rows per im2col band: bounded scratch, from the shapes only.
int64_t im2col_band_rows(int64_t K, int64_t wo, int64_t ho) {
  return std::clamp<int64_t>(kIm2colBudget / std::max<int64_t>(1, K * wo), 1, ho);
}

// conv2d with weights in a reduced-precision dtype that has a native oneDNN matmul: the input rounded to
// that dtype once, then im2col + GEMM as the f32 path (y already holds the bias when accumulate).
void conv2d_native_lowp(const MapView& x, const Tensor& weight, bool accumulate, int s, int p, int64_t ho, int64_t wo,
                        float* yd, int nt) {
  const DType t = weight.dtype();
  const int64_t c_in = x.channels, h = x.height, w = x.width;
  const int64_t c_out = weight.dim(0), kh = weight.dim(2), kw = weight.dim(3);
  const int64_t K = c_in * kh * kw, plane = ho * wo;
  const auto* wd = static_cast<const uint16_t*>(weight.raw());
  // Scratch is written before it is read: no zero fill (the fill and its page faults cost more than
  // the GEMM for small output channel counts).
  const auto xr = std::make_unique_for_overwrite<uint16_t[]>(static_cast<size_t>(c_in * h * w));
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && c_in > 1)
  for (int64_t ci = 0; ci < c_in; ++ci)
    convert_from_f32(x.data + ci * h * w, xr.get() + ci * h * w, t, static_cast<size_t>(h * w));
  if (kh == 1 && kw == 1 && s == 1 && p == 0) {
    dnnl_gemm::gemm(wd, K, xr.get(), plane, yd, plane, c_out, plane, K, t, accumulate, nt);
    return;
  }
  const int64_t band = im2col_band_rows(K, wo, ho);
  const auto col = std::make_unique_for_overwrite<uint16_t[]>(static_cast<size_t>(K * band * wo));
  for (int64_t r0 = 0; r0 < ho; r0 += band) {
    const int64_t rows = std::min(band, ho - r0);
    im2col_band(xr.get(), h, w, kh, kw, s, p, r0, rows, wo, K, col.get(), nt);
    dnnl_gemm::gemm(wd, K, col.get(), rows * wo, yd + r0 * wo, plane, c_out, rows * wo, K, t, accumulate, nt);
  }
}

}  // namespace

int64_t conv2d_out_size(int64_t in, int64_t kernel, int stride, int padding) {
  return (in + 2 * int64_t{padding} - kernel) / stride + 1;
}

int64_t conv_transpose2d_out_size(int64_t in, int64_t kernel, int stride, int padding) {
  return (in - 1) * stride - 2 * int64_t{padding} + kernel;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params) {
  check_f32_rank(x, 3, "conv2d", "input");
  check_weight_rank(weight, "conv2d");
  check_params(params.stride, params.padding, "conv2d");
  const int64_t ho = conv2d_out_size(x.dim(1), weight.dim(2), params.stride, params.padding);
  const int64_t wo = conv2d_out_size(x.dim(2), weight.dim(3), params.stride, params.padding);
  LINGBOT_CHECK(ho >= 1 && wo >= 1, "conv2d: kernel ", weight.dim(2), "x", weight.dim(3), " does not fit input ",
                shape_str(x.shape()), " with padding ", params.padding);
  Tensor y({weight.dim(0), ho, wo});
  conv2d(MapView{x.f32(), x.dim(0), x.dim(1), x.dim(2)}, weight, bias, params, y.f32());
  return y;
}

ConvOutSize check_conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, int stride, int padding,
                         const float* y) {
  constexpr const char* op = "conv2d";
  check_weight_rank(weight, op);
  check_params(stride, padding, op);
  const int64_t c_in = x.channels, h = x.height, w = x.width;
  const int64_t kh = weight.dim(2), kw = weight.dim(3);
  LINGBOT_CHECK(x.data != nullptr && y != nullptr, op, ": null input or output");
  LINGBOT_CHECK(weight.dim(1) == c_in, op, ": weight ", shape_str(weight.shape()), " expects ", weight.dim(1),
                " input channels, input is ", shape_str({c_in, h, w}));
  check_bias(bias, weight.dim(0), op);
  const int64_t ho = conv2d_out_size(h, kh, stride, padding), wo = conv2d_out_size(w, kw, stride, padding);
  LINGBOT_CHECK(ho >= 1 && wo >= 1, op, ": kernel ", kh, "x", kw, " does not fit input ", shape_str({c_in, h, w}),
                " with padding ", padding);
  return {ho, wo};
}

ConvOutSize check_conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, int stride,
                                   int padding, const float* y) {
  constexpr const char* op = "conv_transpose2d";
  check_f32_rank(weight, 4, op, "weight");
  check_params(stride, padding, op);
  const int64_t c_in = x.channels, h = x.height, w = x.width;
  const int64_t kh = weight.dim(2), kw = weight.dim(3);
  LINGBOT_CHECK(x.data != nullptr && y != nullptr, op, ": null input or output");
  LINGBOT_CHECK(weight.dim(0) == c_in, op, ": weight ", shape_str(weight.shape()), " expects ", weight.dim(0),
                " input channels, input is ", shape_str({c_in, h, w}));
  check_bias(bias, weight.dim(1), op);
  const int64_t ho = conv_transpose2d_out_size(h, kh, stride, padding);
  const int64_t wo = conv_transpose2d_out_size(w, kw, stride, padding);
  LINGBOT_CHECK(ho >= 1 && wo >= 1, op, ": output size ", ho, "x", wo, " is empty for input ",
                shape_str({c_in, h, w}));
  return {ho, wo};
}

void conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params, float* yd) {
  const ConvOutSize out = check_conv2d(x, weight, bias, params.stride, params.padding, yd);
  const int64_t ho = out.height, wo = out.width;
  const int64_t c_in = x.channels, h = x.height, w = x.width;
  const int64_t c_out = weight.dim(0), kh = weight.dim(2), kw = weight.dim(3);
  const int s = params.stride, p = params.padding;

  const int64_t plane = ho * wo;
  const int nt = threads_of(params.num_threads);
  float beta = 0.0f;
  if (bias) {
    const float* bd = bias->f32();
    for (int64_t co = 0; co < c_out; ++co) std::fill(yd + co * plane, yd + (co + 1) * plane, bd[co]);
    beta = 1.0f;
  }
  if (weight.dtype() != DType::F32) {
    if (dnnl_gemm::native(weight.dtype())) {
      conv2d_native_lowp(x, weight, bias != nullptr, s, p, ho, wo, yd, nt);
      return;
    }
    // No native kernel for this dtype: the weights widened to f32 (the activations stay f32).
    const Tensor wide = weight.to(DType::F32);
    conv2d(x, wide, bias, params, yd);
    return;
  }

  const float* xd = x.data;
  const float* wd = weight.f32();
  const int64_t K = c_in * kh * kw;
  if (kh == 1 && kw == 1 && s == 1 && p == 0) {
    // 1x1: the input planes already are the im2col matrix [C_in, H·W].
    gemm(wd, K, xd, plane, /*trans_b=*/false, yd, plane, c_out, plane, K, beta, nt);
    return;
  }

  const int64_t band = im2col_band_rows(K, wo, ho);
  const auto col = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(K * band * wo));
  for (int64_t r0 = 0; r0 < ho; r0 += band) {
    const int64_t rows = std::min(band, ho - r0);
    im2col_band(xd, h, w, kh, kw, s, p, r0, rows, wo, K, col.get(), nt);
    gemm(wd, K, col.get(), rows * wo, /*trans_b=*/false, yd + r0 * wo, plane, c_out, rows * wo, K, beta, nt);
  }
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params) {
  check_f32_rank(x, 3, "conv_transpose2d", "input");
  check_f32_rank(weight, 4, "conv_transpose2d", "weight");
  check_params(params.stride, params.padding, "conv_transpose2d");
  const int64_t ho = conv_transpose2d_out_size(x.dim(1), weight.dim(2), params.stride, params.padding);
  const int64_t wo = conv_transpose2d_out_size(x.dim(2), weight.dim(3), params.stride, params.padding);
  LINGBOT_CHECK(ho >= 1 && wo >= 1, "conv_transpose2d: output size ", ho, "x", wo, " is empty for input ",
                shape_str(x.shape()));
  Tensor y({weight.dim(1), ho, wo});
  conv_transpose2d(MapView{x.f32(), x.dim(0), x.dim(1), x.dim(2)}, weight, bias, params, y.f32());
  return y;
}

void conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, const Conv2dParams& params,
                      float* yd) {
  const ConvOutSize out = check_conv_transpose2d(x, weight, bias, params.stride, params.padding, yd);
  const int64_t ho = out.height, wo = out.width;
  const int64_t c_in = x.channels, h = x.height, w = x.width;
  const int64_t c_out = weight.dim(1), kh = weight.dim(2), kw = weight.dim(3);
  const int s = params.stride, p = params.padding;
  const int nt = threads_of(params.num_threads);

  // cols[(co, a, b), (i, j)] = Σ_ci w[ci, co, a, b] · x[ci, i, j]: GEMM with the weight transposed to
  // [C_out·kh·kw, C_in] (small), then a scatter (col2im) per output channel in a fixed order.
  const int64_t M = c_out * kh * kw, HW = h * w;
  const auto wt = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(M * c_in));
  const float* wd = weight.f32();
  for (int64_t ci = 0; ci < c_in; ++ci)
    for (int64_t m = 0; m < M; ++m) wt[m * c_in + ci] = wd[ci * M + m];
  const auto cols = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(M * HW));
  gemm(wt.get(), c_in, x.data, HW, /*trans_b=*/false, cols.get(), HW, M, HW, c_in, 0.0f, nt);

  const float* bd = bias ? bias->f32() : nullptr;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && c_out > 1)
  for (int64_t co = 0; co < c_out; ++co) {
    float* yc = yd + co * ho * wo;
    std::fill(yc, yc + ho * wo, bd ? bd[co] : 0.0f);  // y is caller memory: no zeros assumed
    for (int64_t a = 0; a < kh; ++a) {
      for (int64_t b = 0; b < kw; ++b) {
        const float* src = cols.get() + ((co * kh + a) * kw + b) * HW;
        for (int64_t i = 0; i < h; ++i) {
          const int64_t oy = i * s - p + a;
          if (oy < 0 || oy >= ho) continue;
          for (int64_t j = 0; j < w; ++j) {
            const int64_t ox = j * s - p + b;
            if (ox >= 0 && ox < wo) yc[oy * wo + ox] += src[i * w + j];
          }
        }
      }
    }
  }
}

Tensor resize_bilinear_align_corners(const Tensor& x, int64_t out_h, int64_t out_w, int num_threads) {
  check_f32_rank(x, 3, "resize_bilinear_align_corners", "input");
  LINGBOT_CHECK(out_h >= 1 && out_w >= 1, "resize_bilinear_align_corners: output size ", out_h, "x", out_w,
                " must be positive");
  Tensor y({x.dim(0), out_h, out_w});
  resize_bilinear_align_corners(MapView{x.f32(), x.dim(0), x.dim(1), x.dim(2)}, out_h, out_w, y.f32(), num_threads);
  return y;
}

std::vector<BilinearTap> bilinear_align_corners_taps(int64_t in, int64_t out) {
  // As PyTorch computes them: a float scale, the source position and its fraction in float.
  const float scale = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  std::vector<BilinearTap> t(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const float src = scale * static_cast<float>(o);
    const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
    const float lambda = std::clamp(src - static_cast<float>(i0), 0.0f, 1.0f);
    t[static_cast<size_t>(o)] = {i0, i0 + (i0 < in - 1 ? 1 : 0), 1.0f - lambda, lambda};
  }
  return t;
}

void resize_bilinear_align_corners(const MapView& x, int64_t out_h, int64_t out_w, float* yd, int num_threads) {
  constexpr const char* op = "resize_bilinear_align_corners";
  LINGBOT_CHECK(out_h >= 1 && out_w >= 1, op, ": output size ", out_h, "x", out_w, " must be positive");
  const int64_t c = x.channels, h = x.height, w = x.width;
  LINGBOT_CHECK(x.data != nullptr && yd != nullptr, op, ": null input or output");
  LINGBOT_CHECK(h >= 1 && w >= 1, op, ": input ", shape_str({c, h, w}), " is empty");

  const std::vector<BilinearTap> ty = bilinear_align_corners_taps(h, out_h), tx = bilinear_align_corners_taps(w, out_w);

  const float* xd = x.data;
  const int nt = threads_of(num_threads);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && c > 1)
  for (int64_t ch = 0; ch < c; ++ch) {
    const float* xc = xd + ch * h * w;
    float* yc = yd + ch * out_h * out_w;
    for (int64_t oy = 0; oy < out_h; ++oy) {
      const BilinearTap& vy = ty[oy];
      const float* r0 = xc + vy.i0 * w;
      const float* r1 = xc + vy.i1 * w;
      for (int64_t ox = 0; ox < out_w; ++ox) {
        const BilinearTap& vx = tx[ox];
        yc[oy * out_w + ox] = vy.w0 * (vx.w0 * r0[vx.i0] + vx.w1 * r0[vx.i1]) +
                              vy.w1 * (vx.w0 * r1[vx.i0] + vx.w1 * r1[vx.i1]);
      }
    }
  }
}

}  // namespace lingbot::kernels
