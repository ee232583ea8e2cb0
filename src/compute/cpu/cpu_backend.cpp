#include "compute/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/patch_embed.h"
#include "kernels/cpu/resize_aa.h"
#include "kernels/cpu/rope.h"

namespace lingbot::compute {

namespace {

const float* f32_or_null(const Tensor* t) { return t == nullptr || t->empty() ? nullptr : t->f32(); }

kernels::RopeTableView rope_view(const RopeTable& t) { return {t.cos.data(), t.sin.data(), t.n_tokens, t.head_dim}; }

}  // namespace

CpuBackend::CpuBackend(int num_threads) : threads_(std::max(1, num_threads)) {}

std::string CpuBackend::description() const {
  return "cpu (" + std::to_string(threads_) + (threads_ == 1 ? " thread)" : " threads)");
}

void CpuBackend::upload(void* dst, const void* host, size_t bytes) {
  if (bytes) std::memcpy(dst, host, bytes);
}

void CpuBackend::download(void* host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host, src, bytes);
}

void CpuBackend::copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                           int64_t row_bytes) {
  LINGBOT_CHECK(rows >= 0 && row_bytes >= 0 && row_bytes <= dst_pitch && row_bytes <= src_pitch,
                "copy_rows: ", rows, " rows of ", row_bytes, " bytes do not fit pitches ", dst_pitch, " / ", src_pitch);
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(d + r * dst_pitch, s + r * src_pitch, static_cast<size_t>(row_bytes));
}

void CpuBackend::linear(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y, int64_t x_stride,
                        int64_t y_stride) {
  LINGBOT_CHECK(W.ndim() == 2, "linear: weight must be [out, in], got ", shape_str(W.shape()));
  kernels::linear(x, n, W.dim(1), kernels::WeightView{W.raw(), W.dtype()}, f32_or_null(b), W.dim(0), y, threads_,
                  x_stride, y_stride);
}

void CpuBackend::layer_norm(const float* x, int64_t n, int64_t dim, const Tensor* gamma, const Tensor* beta,
                            float eps, float* y, int64_t x_stride, int64_t y_stride) {
  kernels::layer_norm(x, n, dim, f32_or_null(gamma), f32_or_null(beta), eps, y, threads_, x_stride, y_stride);
}

void CpuBackend::head_norm(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
                           const Tensor* gamma, const Tensor* beta, float eps) {
  const float* g = f32_or_null(gamma);
  const float* b = f32_or_null(beta);
  // Token by token (one row of heads each): the partition does not depend on the thread count.
#pragma omp parallel for schedule(static) num_threads(threads_) \
    if (n_tokens > 1 && threads_ > 1 && n_tokens * heads * head_dim >= (1 << 15))
  for (int64_t t = 0; t < n_tokens; ++t)
    kernels::layer_norm(x + t * token_stride, heads, head_dim, g, b, eps, x + t * token_stride, 1, head_dim, head_dim);
}

void CpuBackend::gelu_erf(float* x, int64_t n) { kernels::gelu_erf(x, n, threads_); }
void CpuBackend::silu(float* x, int64_t n) { kernels::silu(x, n, threads_); }
void CpuBackend::relu(float* x, int64_t n) { kernels::relu(x, n, threads_); }
void CpuBackend::add(float* y, const float* x, int64_t n) { kernels::add_inplace(y, x, n, threads_); }

void CpuBackend::layer_scale_add(float* y, const float* x, const Tensor* gamma, int64_t rows, int64_t dim) {
  kernels::layer_scale_add(y, x, f32_or_null(gamma), rows, dim, threads_);
}

void CpuBackend::add_transposed(float* y, const float* x, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) y[c * rows + r] = x[r * cols + c] + y[c * rows + r];
}

void CpuBackend::add_axis_tables(float* y, int64_t channels, int64_t h, int64_t w, const float* columns,
                                 const float* rows) {
  LINGBOT_CHECK(channels % 2 == 0, "add_axis_tables: channels must be even, got ", channels);
  const int64_t half = channels / 2;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t r = 0; r < h; ++r) {
      float* row = y + (c * h + r) * w;
      if (c < half) {
        const float* t = columns + c * w;
        for (int64_t x = 0; x < w; ++x) row[x] = row[x] + t[x];
      } else {
        const float t = rows[(c - half) * h + r];
        for (int64_t x = 0; x < w; ++x) row[x] = row[x] + t;
      }
    }
}

void CpuBackend::normalize_channels(const float* x, int64_t channels, int64_t plane, std::span<const float> mean,
                                    std::span<const float> stdev, float* y) {
  LINGBOT_CHECK(static_cast<int64_t>(mean.size()) == channels && static_cast<int64_t>(stdev.size()) == channels,
                "normalize_channels: ", mean.size(), " means and ", stdev.size(), " deviations for ", channels,
                " channels");
  for (int64_t c = 0; c < channels; ++c) {
    const float m = mean[static_cast<size_t>(c)], sd = stdev[static_cast<size_t>(c)];
    const float* src = x + c * plane;
    float* dst = y + c * plane;
    for (int64_t i = 0; i < plane; ++i) dst[i] = (src[i] - m) / sd;
  }
}

void CpuBackend::modulate(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim) {
  for (int64_t r = 0; r < n; ++r) {
    const float* shift = mod + r * 3 * dim;
    const float* scale = shift + dim;
    const float* gate = shift + 2 * dim;
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t i = r * dim + c;
      x[i] = gate[c] * (a[i] * (1.0f + scale[c]) + shift[c]) + t[i];
    }
  }
}

void CpuBackend::rope2d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) {
  kernels::rope2d_apply(x, n_tokens, heads, token_stride, rope_view(t), threads_);
}

void CpuBackend::rope3d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) {
  kernels::rope3d_apply(x, n_tokens, heads, token_stride, rope_view(t), threads_);
}

void CpuBackend::attention_dense(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                                 float scale) {
  kernels::dense_attention(q, kv, out, kernels::AttentionParams{scale, threads_});
}

void CpuBackend::attention_grouped(const kernels::QueryView& q, const kernels::KVSpan& kv, int64_t group, float* out,
                                   float scale, AttentionPrecision precision) {
  if (precision == AttentionPrecision::F32 || kv.dtype != DType::F32 || !kernels::native_bf16_attention()) {
    attention_grouped_by_dense(q, kv, group, out, scale);
    return;
  }
  // K and V rounded to bf16 once, packed [n_tokens, heads * head_dim]; Auto then takes the bf16 path.
  const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim, n = kv.n_tokens;
  if (kv_bf16_.size() < static_cast<size_t>(2 * n * row)) kv_bf16_.resize(static_cast<size_t>(2 * n * row));
  uint16_t* k16 = kv_bf16_.data();
  uint16_t* v16 = k16 + n * row;
  const auto* k = static_cast<const float*>(kv.k);
  const auto* v = static_cast<const float*>(kv.v);
#pragma omp parallel for schedule(static) num_threads(threads_) if (threads_ > 1 && n * row >= (1 << 16))
  for (int64_t t = 0; t < n; ++t) {
    convert_from_f32(k + t * kv.token_stride, k16 + t * row, DType::BF16, static_cast<size_t>(row));
    convert_from_f32(v + t * kv.token_stride, v16 + t * row, DType::BF16, static_cast<size_t>(row));
  }
  const kernels::KVSpan kv16{k16, v16, DType::BF16, kv.n_tokens, row};
  attention_grouped_by_dense(q, kv16, group, out, scale);
}

void CpuBackend::attention_cached(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
                                  float scale) {
  kernels::attention(q, keys, out, kernels::AttentionParams{scale, threads_});
}

void CpuBackend::conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p, float* y) {
  kernels::conv2d(x, weight, bias != nullptr && bias->empty() ? nullptr : bias,
                  kernels::Conv2dParams{p.stride, p.padding, threads_}, y);
}

void CpuBackend::conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p,
                                  float* y) {
  kernels::conv_transpose2d(x, weight, bias != nullptr && bias->empty() ? nullptr : bias,
                            kernels::Conv2dParams{p.stride, p.padding, threads_}, y);
}

void CpuBackend::resize_bilinear(const MapView& x, int64_t out_h, int64_t out_w, float* y) {
  kernels::resize_bilinear_align_corners(x, out_h, out_w, y, threads_);
}

void CpuBackend::resize_bicubic_aa(const MapView& x, int64_t out_h, int64_t out_w, float* y) {
  kernels::resize_bicubic_aa(x.data, x.channels, x.height, x.width, y, out_h, out_w, threads_);
}

void CpuBackend::patch_embed(const MapView& image, int64_t k, const Tensor& weight, const Tensor& bias, float* out) {
  LINGBOT_CHECK(weight.ndim() == 4 && weight.dim(1) == image.channels && weight.dim(2) == k && weight.dim(3) == k,
                "patch_embed: weight ", shape_str(weight.shape()), " does not match ", image.channels,
                " channels and patch size ", k);
  const int64_t n_patch = (image.height / k) * (image.width / k);
  const auto cols = static_cast<size_t>(n_patch * image.channels * k * k);
  if (patch_cols_.size() < cols) patch_cols_.resize(cols);  // every entry is written by patchify
  kernels::patch_embed(image.data, image.channels, image.height, image.width, k, weight.f32(), bias.f32(),
                       weight.dim(0), patch_cols_.data(), out, threads_);
}

}  // namespace lingbot::compute
