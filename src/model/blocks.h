#pragma once
// Shared transformer pieces of the encoder and the aggregator: weights taken out of a state_dict
// (converted once, at load: Linear weights to the model's weights dtype, everything else to f32) and
// the pre-norm block
//   x += ls1 · proj(attn(qk_norm/rope(qkv(norm1(x)))));  x += ls2 · fc2(gelu(fc1(norm2(x))))
// with the attention itself and the position rotation supplied by the caller (intra-frame dense
// attention, or the KV cache's attention for global blocks).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "io/tensor_map.h"
#include "lingbot/tensor.h"

namespace lingbot::model {

struct Linear {
  Tensor weight;  // [out, in] (PyTorch layout), f32 / f16 / bf16 (the weights dtype)
  Tensor bias;    // [out] f32
  int64_t in = 0, out = 0;

  // "<prefix>weight" [out, in] (stored in weights_dtype) and "<prefix>bias" [out].
  static Linear take(io::TensorMap& weights, const std::string& prefix, int64_t in, int64_t out,
                     DType weights_dtype = DType::F32);
  // y[n, out] = x[n, in] W^T + b (backend memory); row strides default to in / out.
  void forward(compute::Backend& be, const float* x, int64_t n, float* y, int64_t x_stride = 0,
               int64_t y_stride = 0) const;
};

struct LayerNormW {
  Tensor weight, bias;  // [dim] each, or empty for no affine
  int64_t dim = 0;
  float eps = 1e-5f;

  static LayerNormW take(io::TensorMap& weights, const std::string& prefix, int64_t dim, float eps);
  void forward(compute::Backend& be, const float* x, int64_t n, float* y, int64_t x_stride = 0,
               int64_t y_stride = 0) const;
};

struct BlockWeights {
  int64_t dim = 0, heads = 0, head_dim = 0, mlp_hidden = 0;
  LayerNormW norm1, norm2;
  Linear qkv, proj, fc1, fc2;
  bool qk_norm = false;
  LayerNormW q_norm, k_norm;  // over head_dim, when qk_norm
  Tensor ls1, ls2;            // LayerScale gammas [dim], or empty (no LayerScale)

  // Keys under `prefix` ("aggregator.frame_blocks.3."): norm1, attn.qkv, attn.q_norm/k_norm (if
  // qk_norm), attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma.
  // qkv / proj / fc1 / fc2 weights are kept in `weights_dtype`; norms, biases and LayerScale in f32.
  static BlockWeights take(io::TensorMap& weights, const std::string& prefix, int64_t dim, int64_t heads,
                           int64_t mlp_hidden, float ln_eps, bool qk_norm, bool layer_scale = true,
                           DType weights_dtype = DType::F32);
};

// The intra-frame attention precision of a block: Bf16 when its linears hold bf16 weights (the bf16
// recipe, as upstream's autocast runs the aggregator's attention in bf16), else F32.
compute::AttentionPrecision attention_precision(const BlockWeights& w);

// Reusable activations of one block call (backend memory); grows, never shrinks.
struct BlockScratch {
  compute::Scratch normed, qkv, attn, branch, hidden;
  void reserve(compute::Backend& be, int64_t n_tokens, const BlockWeights& w);
};

// Rotates q and k in place after QK-norm. Rows are `token_stride` floats apart, heads contiguous.
using RotateFn = std::function<void(float* q, float* k, int64_t n_tokens, int64_t token_stride)>;
// Attention of q over kv (the current tokens' own K/V; a cache may add its own): out [n, heads*head_dim].
// Scale 1/sqrt(head_dim).
using AttendFn = std::function<void(const kernels::QueryView& q, const kernels::KVSpan& kv, float* out)>;

// Runs one block on x [n_tokens, dim] (backend memory) in place.
void block_forward(compute::Backend& be, const BlockWeights& w, float* x, int64_t n_tokens, BlockScratch& scratch,
                   const RotateFn& rotate, const AttendFn& attend);

}  // namespace lingbot::model
