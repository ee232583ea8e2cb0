#include "model/encoder.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/take_weight.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/patch_embed.h"
#include "kernels/cpu/resize_aa.h"

namespace lingbot::model {

Encoder::Encoder(const EncoderConfig& config, const ImageNormConfig& norm, io::TensorMap& weights,
                 DType weights_dtype, const std::string& prefix)
    : config_(config), norm_(norm) {
  const int64_t C = config.embed_dim, p = config.patch_size, M = config.pos_grid();
  const int64_t R = config.num_register_tokens;
  LINGBOT_CHECK(config.interpolate_offset == 0.0f && config.interpolate_antialias,
                "encoder: only interpolate_offset 0 with antialiased resampling is supported, got offset ",
                config.interpolate_offset, ", antialias ", config.interpolate_antialias ? "true" : "false");
  patch_w_ = take_weight(weights, prefix + "patch_embed.proj.weight", {C, 3, p, p});
  patch_b_ = take_weight(weights, prefix + "patch_embed.proj.bias", {C});
  cls_token_ = take_weight(weights, prefix + "cls_token", {1, 1, C});
  cls_token_.reshape({C});
  pos_embed_ = take_weight(weights, prefix + "pos_embed", {1, 1 + M * M, C});
  pos_embed_.reshape({1 + M * M, C});
  if (R > 0) {
    register_tokens_ = take_weight(weights, prefix + "register_tokens", {1, R, C});
    register_tokens_.reshape({R, C});
  }
  weights.erase(prefix + "mask_token");  // training-only (masked image modelling)
  for (int64_t i = 0; i < config.depth; ++i)
    blocks_.push_back(BlockWeights::take(weights, prefix + "blocks." + std::to_string(i) + ".", C, config.num_heads,
                                         config.mlp_hidden, config.ln_eps, /*qk_norm=*/false, /*layer_scale=*/true,
                                         weights_dtype));
  final_norm_ = LayerNormW::take(weights, prefix + "norm.", C, config.ln_eps);
}

Tensor Encoder::position_embedding(int64_t H, int64_t W, int num_threads) const {
  const int64_t C = config_.embed_dim, p = config_.patch_size, M = config_.pos_grid();
  const int64_t gh = H / p, gw = W / p;
  // The stored table is used as is only when the grid matches and the image is square.
  if (gh * gw == M * M && H == W) return pos_embed_.clone();
  Tensor out({1 + gh * gw, C});
  std::memcpy(out.f32(), pos_embed_.f32(), static_cast<size_t>(C) * sizeof(float));  // cls row
  // [M*M, C] -> channel-major [C, M, M], resample, back to [gh*gw, C].
  std::vector<float> src(static_cast<size_t>(C * M * M)), dst(static_cast<size_t>(C * gh * gw));
  const float* table = pos_embed_.f32() + C;
  for (int64_t t = 0; t < M * M; ++t)
    for (int64_t c = 0; c < C; ++c) src[static_cast<size_t>(c * M * M + t)] = table[t * C + c];
  kernels::resize_bicubic_aa(src.data(), C, M, M, dst.data(), gh, gw, num_threads);
  float* o = out.f32() + C;
  for (int64_t t = 0; t < gh * gw; ++t)
    for (int64_t c = 0; c < C; ++c) o[t * C + c] = dst[static_cast<size_t>(c * gh * gw + t)];
  return out;
}

void Encoder::forward(const float* image, int64_t H, int64_t W, const Tensor& pos_embed, float* out,
                      EncoderScratch& s, int num_threads) const {
  const int64_t C = config_.embed_dim, p = config_.patch_size, R = config_.num_register_tokens;
  const int64_t n_patch = (H / p) * (W / p);
  pos_embed.check_shape({1 + n_patch, C}, "encoder position embedding");
  // ImageNet normalisation, (x - mean) / std per channel as the reference computes it.
  s.image.resize(static_cast<size_t>(3 * H * W));
  for (int64_t c = 0; c < 3; ++c) {
    const float m = norm_.mean[static_cast<size_t>(c)], sd = norm_.std[static_cast<size_t>(c)];
    const float* src = image + c * H * W;
    float* dst = s.image.data() + c * H * W;
    for (int64_t i = 0; i < H * W; ++i) dst[i] = (src[i] - m) / sd;
  }
  // Token layout: [cls, registers..., patches...]; patch embedding goes straight into place.
  const int64_t n_tok = 1 + R + n_patch;
  s.tokens.resize(static_cast<size_t>(n_tok * C));
  s.cols.resize(static_cast<size_t>(n_patch * 3 * p * p));
  float* tok = s.tokens.data();
  kernels::patch_embed(s.image.data(), 3, H, W, p, patch_w_.f32(), patch_b_.f32(), C, s.cols.data(),
                       tok + (1 + R) * C, num_threads);
  const float* pe = pos_embed.f32();
  for (int64_t c = 0; c < C; ++c) tok[c] = cls_token_.f32()[c] + pe[c];
  if (R > 0) std::memcpy(tok + C, register_tokens_.f32(), static_cast<size_t>(R * C) * sizeof(float));
  kernels::add_inplace(tok + (1 + R) * C, pe + C, n_patch * C, num_threads);

  const AttendFn attend = [&](const kernels::QueryView& q, const kernels::KVSpan& kv, float* o) {
    grouped_self_attention(q, kv, q.n_tokens, o, num_threads);
  };
  for (const BlockWeights& b : blocks_) block_forward(b, tok, n_tok, s.block, RotateFn{}, attend, num_threads);
  final_norm_.forward(tok + (1 + R) * C, n_patch, out, num_threads);
}

}  // namespace lingbot::model
