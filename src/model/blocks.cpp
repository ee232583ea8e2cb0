#include "model/blocks.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/take_weight.h"

namespace lingbot::model {

Linear Linear::take(io::TensorMap& weights, const std::string& prefix, int64_t in, int64_t out, bool bias,
                    DType weights_dtype) {
  Linear l;
  l.in = in;
  l.out = out;
  l.weight = take_weight(weights, prefix + "weight", {out, in}, weights_dtype);
  if (bias) l.bias = take_weight(weights, prefix + "bias", {out});
  return l;
}

void Linear::forward(const float* x, int64_t n, float* y, int num_threads, int64_t x_stride, int64_t y_stride) const {
  kernels::linear(x, n, in, kernels::WeightView{weight.raw(), weight.dtype()}, bias.empty() ? nullptr : bias.f32(), out, y, num_threads, x_stride,
                  y_stride);
}

LayerNormW LayerNormW::take(io::TensorMap& weights, const std::string& prefix, int64_t dim, float eps) {
  LayerNormW n;
  n.dim = dim;
  n.eps = eps;
  n.weight = take_weight(weights, prefix + "weight", {dim});
  n.bias = take_weight(weights, prefix + "bias", {dim});
  return n;
}

void LayerNormW::forward(const float* x, int64_t n, float* y, int num_threads, int64_t x_stride,
                         int64_t y_stride) const {
  kernels::layer_norm(x, n, dim, weight.empty() ? nullptr : weight.f32(), bias.empty() ? nullptr : bias.f32(), eps, y,
                      num_threads, x_stride, y_stride);
}

BlockWeights BlockWeights::take(io::TensorMap& weights, const std::string& prefix, int64_t dim, int64_t heads,
                                int64_t mlp_hidden, float ln_eps, bool qk_norm, bool layer_scale,
                                DType weights_dtype) {
  LINGBOT_CHECK(heads > 0 && dim % heads == 0, prefix, ": embed dim ", dim, " is not divisible by ", heads, " heads");
  BlockWeights b;
  b.dim = dim;
  b.heads = heads;
  b.head_dim = dim / heads;
  b.mlp_hidden = mlp_hidden;
  b.norm1 = LayerNormW::take(weights, prefix + "norm1.", dim, ln_eps);
  b.qkv = Linear::take(weights, prefix + "attn.qkv.", dim, 3 * dim, true, weights_dtype);
  b.qk_norm = qk_norm;
  if (qk_norm) {
    b.q_norm = LayerNormW::take(weights, prefix + "attn.q_norm.", b.head_dim, ln_eps);
    b.k_norm = LayerNormW::take(weights, prefix + "attn.k_norm.", b.head_dim, ln_eps);
  }
  b.proj = Linear::take(weights, prefix + "attn.proj.", dim, dim, true, weights_dtype);
  b.norm2 = LayerNormW::take(weights, prefix + "norm2.", dim, ln_eps);
  b.fc1 = Linear::take(weights, prefix + "mlp.fc1.", dim, mlp_hidden, true, weights_dtype);
  b.fc2 = Linear::take(weights, prefix + "mlp.fc2.", mlp_hidden, dim, true, weights_dtype);
  if (layer_scale) {
    b.ls1 = take_weight(weights, prefix + "ls1.gamma", {dim});
    b.ls2 = take_weight(weights, prefix + "ls2.gamma", {dim});
  }
  return b;
}

void BlockScratch::reserve(int64_t n_tokens, const BlockWeights& w) {
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(normed, n_tokens * w.dim);
  grow(qkv, n_tokens * 3 * w.dim);
  grow(attn, n_tokens * w.dim);
  grow(branch, n_tokens * w.dim);
  grow(hidden, n_tokens * w.mlp_hidden);
}

void block_forward(const BlockWeights& w, float* x, int64_t n_tokens, BlockScratch& s, const RotateFn& rotate,
                   const AttendFn& attend, int num_threads) {
  s.reserve(n_tokens, w);
  const int64_t C = w.dim, C3 = 3 * w.dim;
  // Attention branch.
  w.norm1.forward(x, n_tokens, s.normed.data(), num_threads);
  w.qkv.forward(s.normed.data(), n_tokens, s.qkv.data(), num_threads);
  float* q = s.qkv.data();
  float* k = s.qkv.data() + C;
  float* v = s.qkv.data() + 2 * C;
  if (w.qk_norm) {
    // Each (token, head) row of q and k is normalised over head_dim: n_tokens*heads rows of head_dim,
    // which for a packed [token][q|k|v][head][head_dim] buffer means head rows are head_dim apart
    // within a token and 3C apart across tokens; normalise token by token.
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) \
    if (n_tokens > 1 && num_threads > 1 && n_tokens * C >= (1 << 15))
    for (int64_t t = 0; t < n_tokens; ++t) {
      w.q_norm.forward(q + t * C3, w.heads, q + t * C3, 1, w.head_dim, w.head_dim);
      w.k_norm.forward(k + t * C3, w.heads, k + t * C3, 1, w.head_dim, w.head_dim);
    }
  }
  if (rotate) rotate(q, k, n_tokens, C3);
  const kernels::QueryView qv{q, static_cast<int>(n_tokens), static_cast<int>(w.heads), static_cast<int>(w.head_dim),
                              C3};
  const kernels::KVSpan kv{k, v, DType::F32, static_cast<int>(n_tokens), C3};
  attend(qv, kv, s.attn.data());
  w.proj.forward(s.attn.data(), n_tokens, s.branch.data(), num_threads);
  kernels::layer_scale_add(x, s.branch.data(), w.ls1.empty() ? nullptr : w.ls1.f32(), n_tokens, C, num_threads);
  // MLP branch.
  w.norm2.forward(x, n_tokens, s.normed.data(), num_threads);
  w.fc1.forward(s.normed.data(), n_tokens, s.hidden.data(), num_threads);
  kernels::gelu_erf(s.hidden.data(), n_tokens * w.mlp_hidden, num_threads);
  w.fc2.forward(s.hidden.data(), n_tokens, s.branch.data(), num_threads);
  kernels::layer_scale_add(x, s.branch.data(), w.ls2.empty() ? nullptr : w.ls2.f32(), n_tokens, C, num_threads);
}

void grouped_self_attention(const kernels::QueryView& q, const kernels::KVSpan& kv, int64_t group, float* out,
                            int num_threads) {
  LINGBOT_CHECK(group > 0 && q.n_tokens % group == 0, "grouped attention: ", q.n_tokens,
                " tokens are not a multiple of the group size ", group);
  const int64_t groups = q.n_tokens / group;
  const int64_t kv_elem = static_cast<int64_t>(dtype_size(kv.dtype));
  const kernels::AttentionParams params{1.0f / std::sqrt(static_cast<float>(q.head_dim)), num_threads};
  for (int64_t g = 0; g < groups; ++g) {
    kernels::QueryView qg = q;
    qg.data = q.data + g * group * q.token_stride;
    qg.n_tokens = static_cast<int>(group);
    kernels::KVSpan kg = kv;
    kg.k = static_cast<const char*>(kv.k) + g * group * kv.token_stride * kv_elem;
    kg.v = static_cast<const char*>(kv.v) + g * group * kv.token_stride * kv_elem;
    kg.n_tokens = static_cast<int>(group);
    kernels::dense_attention(qg, std::span<const kernels::KVSpan>(&kg, 1), out + g * group * q.heads * q.head_dim,
                             params);
  }
}

}  // namespace lingbot::model
