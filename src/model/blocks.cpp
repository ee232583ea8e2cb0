#include "model/blocks.h"

#include <cmath>

#include "core/error.h"
#include "model/take_weight.h"

namespace lingbot::model {

Linear Linear::take(io::TensorMap& weights, const std::string& prefix, int64_t in, int64_t out,
                    DType weights_dtype) {
  Linear l;
  l.in = in;
  l.out = out;
  l.weight = take_weight(weights, prefix + "weight", {out, in}, weights_dtype);
  l.bias = take_weight(weights, prefix + "bias", {out});
  return l;
}

void Linear::forward(compute::Backend& be, const float* x, int64_t n, float* y, int64_t x_stride,
                     int64_t y_stride) const {
  be.linear(x, n, weight, bias.empty() ? nullptr : &bias, y, x_stride, y_stride);
}

LayerNormW LayerNormW::take(io::TensorMap& weights, const std::string& prefix, int64_t dim, float eps) {
  LayerNormW n;
  n.dim = dim;
  n.eps = eps;
  n.weight = take_weight(weights, prefix + "weight", {dim});
  n.bias = take_weight(weights, prefix + "bias", {dim});
  return n;
}

void LayerNormW::forward(compute::Backend& be, const float* x, int64_t n, float* y, int64_t x_stride,
                         int64_t y_stride) const {
  be.layer_norm(x, n, dim, weight.empty() ? nullptr : &weight, bias.empty() ? nullptr : &bias, eps, y, x_stride,
                y_stride);
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
  b.qkv = Linear::take(weights, prefix + "attn.qkv.", dim, 3 * dim, weights_dtype);
  b.qk_norm = qk_norm;
  if (qk_norm) {
    b.q_norm = LayerNormW::take(weights, prefix + "attn.q_norm.", b.head_dim, ln_eps);
    b.k_norm = LayerNormW::take(weights, prefix + "attn.k_norm.", b.head_dim, ln_eps);
  }
  b.proj = Linear::take(weights, prefix + "attn.proj.", dim, dim, weights_dtype);
  b.norm2 = LayerNormW::take(weights, prefix + "norm2.", dim, ln_eps);
  b.fc1 = Linear::take(weights, prefix + "mlp.fc1.", dim, mlp_hidden, weights_dtype);
  b.fc2 = Linear::take(weights, prefix + "mlp.fc2.", mlp_hidden, dim, weights_dtype);
  if (layer_scale) {
    b.ls1 = take_weight(weights, prefix + "ls1.gamma", {dim});
    b.ls2 = take_weight(weights, prefix + "ls2.gamma", {dim});
  }
  return b;
}

compute::AttentionPrecision attention_precision(const BlockWeights& w) {
  return w.qkv.weight.dtype() == DType::BF16 ? compute::AttentionPrecision::Bf16 : compute::AttentionPrecision::F32;
}

void BlockScratch::reserve(compute::Backend& be, int64_t n_tokens, const BlockWeights& w) {
  normed.reserve(be, n_tokens * w.dim);
  qkv.reserve(be, n_tokens * 3 * w.dim);
  attn.reserve(be, n_tokens * w.dim);
  branch.reserve(be, n_tokens * w.dim);
  hidden.reserve(be, n_tokens * w.mlp_hidden);
}

void block_forward(compute::Backend& be, const BlockWeights& w, float* x, int64_t n_tokens, BlockScratch& s,
                   const RotateFn& rotate, const AttendFn& attend) {
  s.reserve(be, n_tokens, w);
  const int64_t C = w.dim, C3 = 3 * w.dim;
  // Attention branch.
  w.norm1.forward(be, x, n_tokens, s.normed.data());
  w.qkv.forward(be, s.normed.data(), n_tokens, s.qkv.data());
  float* q = s.qkv.data();
  float* k = s.qkv.data() + C;
  float* v = s.qkv.data() + 2 * C;
  if (w.qk_norm) {
    // Each (token, head) row of q and k is normalised over head_dim.
    const auto norm = [&](float* p, const LayerNormW& n) {
      be.head_norm(p, n_tokens, static_cast<int>(w.heads), static_cast<int>(w.head_dim), C3,
                   n.weight.empty() ? nullptr : &n.weight, n.bias.empty() ? nullptr : &n.bias, n.eps);
    };
    norm(q, w.q_norm);
    norm(k, w.k_norm);
  }
  if (rotate) rotate(q, k, n_tokens, C3);
  const kernels::QueryView qv{q, static_cast<int>(n_tokens), static_cast<int>(w.heads), static_cast<int>(w.head_dim),
                              C3};
  const kernels::KVSpan kv{k, v, DType::F32, static_cast<int>(n_tokens), C3};
  attend(qv, kv, s.attn.data());
  // x += ls1 · proj(attn), then x += ls2 · fc2(gelu(fc1(norm2(x)))): fused epilogues (compute/backend.h).
  const auto bias = [](const Linear& l) { return l.bias.empty() ? nullptr : &l.bias; };
  be.linear_scale_add(s.attn.data(), n_tokens, w.proj.weight, bias(w.proj), w.ls1.empty() ? nullptr : &w.ls1,
                      s.branch.data(), x);
  // MLP branch.
  w.norm2.forward(be, x, n_tokens, s.normed.data());
  be.linear_gelu(s.normed.data(), n_tokens, w.fc1.weight, bias(w.fc1), s.hidden.data());
  be.linear_scale_add(s.hidden.data(), n_tokens, w.fc2.weight, bias(w.fc2), w.ls2.empty() ? nullptr : &w.ls2,
                      s.branch.data(), x);
}

}  // namespace lingbot::model
