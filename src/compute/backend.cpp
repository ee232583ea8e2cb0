#include "compute/backend.h"

#include "core/error.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/rope.h"

namespace lingbot::compute {

Array::Array(Backend& backend, Shape shape)
    : buf_(backend.allocator(), static_cast<size_t>(shape_numel(shape)) * sizeof(float)), shape_(std::move(shape)) {}

float* Scratch::reserve(Backend& backend, int64_t floats) {
  LINGBOT_CHECK(floats >= 0, "scratch: negative size ", floats);
  if (capacity() < floats || buf_.allocator() != &backend.allocator()) {
    buf_.reset();
    buf_ = Buffer(backend.allocator(), static_cast<size_t>(floats) * sizeof(float));
  }
  return data();
}

namespace {

RopeTable place(Backend& b, const kernels::RopeTable& host) {
  RopeTable t;
  t.n_tokens = host.n_tokens;
  t.head_dim = host.head_dim;
  const Shape shape{host.n_tokens, host.head_dim / 2};
  t.cos = Array(b, shape);
  t.sin = Array(b, shape);
  b.upload(t.cos.data(), host.cos.data(), host.cos.size() * sizeof(float));
  b.upload(t.sin.data(), host.sin.data(), host.sin.size() * sizeof(float));
  return t;
}

}  // namespace

RopeTable Backend::rope2d_table(std::span<const int32_t> pos_row, std::span<const int32_t> pos_col, int head_dim,
                                float base) {
  LINGBOT_CHECK(pos_row.size() == pos_col.size(), "rope2d table: ", pos_row.size(), " row positions but ",
                pos_col.size(), " column positions");
  return place(*this, kernels::rope2d_table(pos_row.data(), pos_col.data(), static_cast<int64_t>(pos_row.size()),
                                            head_dim, base));
}

RopeTable Backend::rope3d_table(std::span<const int64_t> pos_t, std::span<const int32_t> pos_h,
                                std::span<const int32_t> pos_w, int head_dim, std::array<int, 3> dims,
                                double theta) {
  LINGBOT_CHECK(pos_t.size() == pos_h.size() && pos_t.size() == pos_w.size(), "rope3d table: position counts ",
                pos_t.size(), ", ", pos_h.size(), ", ", pos_w.size(), " differ");
  return place(*this, kernels::rope3d_table(pos_t.data(), pos_h.data(), pos_w.data(),
                                            static_cast<int64_t>(pos_t.size()), head_dim, dims, theta));
}

void Backend::linear_gelu(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y) {
  linear(x, n, W, b, y);
  gelu_erf(y, n * W.dim(0));
}

void Backend::linear_scale_add(const float* x, int64_t n, const Tensor& W, const Tensor* b, const Tensor* gamma,
                               float* tmp, float* res) {
  linear(x, n, W, b, tmp);
  layer_scale_add(res, tmp, gamma, n, W.dim(0));
}

Array Backend::upload_array(const Tensor& host) {
  LINGBOT_CHECK(host.dtype() == DType::F32, "upload_array: expected an f32 tensor, got ", dtype_name(host.dtype()));
  Array a(*this, host.shape());
  upload(a.data(), host.raw(), host.nbytes());
  return a;
}

Tensor Backend::download_array(const Array& a) {
  Tensor t(a.shape());
  download(t.raw(), a.data(), t.nbytes());
  return t;
}

void Backend::attention_grouped_by_dense(const kernels::QueryView& q, const kernels::KVSpan& kv, int64_t group,
                                         float* out, float scale) {
  LINGBOT_CHECK(group > 0 && q.n_tokens % group == 0, "grouped attention: ", q.n_tokens,
                " tokens are not a multiple of the group size ", group);
  LINGBOT_CHECK(kv.n_tokens == q.n_tokens, "grouped attention: ", kv.n_tokens, " key tokens for ", q.n_tokens,
                " query tokens (each group attends to its own tokens)");
  const int64_t groups = q.n_tokens / group;
  const int64_t kv_elem = static_cast<int64_t>(dtype_size(kv.dtype));
  for (int64_t g = 0; g < groups; ++g) {
    kernels::QueryView qg = q;
    qg.data = q.data + g * group * q.token_stride;
    qg.n_tokens = static_cast<int>(group);
    kernels::KVSpan kg = kv;
    kg.k = static_cast<const char*>(kv.k) + g * group * kv.token_stride * kv_elem;
    kg.v = static_cast<const char*>(kv.v) + g * group * kv.token_stride * kv_elem;
    kg.n_tokens = static_cast<int>(group);
    attention_dense(qg, std::span<const kernels::KVSpan>(&kg, 1), out + g * group * q.heads * q.head_dim, scale);
  }
}

int64_t conv2d_out_size(int64_t in, int64_t kernel, ConvParams p) {
  return kernels::conv2d_out_size(in, kernel, p.stride, p.padding);
}

int64_t conv_transpose2d_out_size(int64_t in, int64_t kernel, ConvParams p) {
  return kernels::conv_transpose2d_out_size(in, kernel, p.stride, p.padding);
}

void Backend::throw_if_stopped() const {
  if (stop_ != nullptr && stop_->load(std::memory_order_acquire)) throw Stopped("stopped by the caller (SessionOptions::stop)");
}

}  // namespace lingbot::compute
