#include "model/encoder.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/take_weight.h"

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

compute::Array Encoder::position_embedding(compute::Backend& be, int64_t H, int64_t W) const {
  const int64_t C = config_.embed_dim, p = config_.patch_size, M = config_.pos_grid();
  const int64_t gh = H / p, gw = W / p;
  // The stored table is used as is only when the grid matches and the image is square.
  if (gh * gw == M * M && H == W) return be.upload_array(pos_embed_);
  Tensor out({1 + gh * gw, C});
  std::memcpy(out.f32(), pos_embed_.f32(), static_cast<size_t>(C) * sizeof(float));  // cls row
  // [M*M, C] -> channel-major [C, M, M], resample, back to [gh*gw, C].
  Tensor src({C, M, M});
  const float* table = pos_embed_.f32() + C;
  for (int64_t t = 0; t < M * M; ++t)
    for (int64_t c = 0; c < C; ++c) src.f32()[c * M * M + t] = table[t * C + c];
  const compute::Array src_b = be.upload_array(src);
  compute::Array dst_b(be, {C, gh, gw});
  be.resize_bicubic_aa({src_b.data(), C, M, M}, gh, gw, dst_b.data());
  const Tensor dst = be.download_array(dst_b);
  float* o = out.f32() + C;
  for (int64_t t = 0; t < gh * gw; ++t)
    for (int64_t c = 0; c < C; ++c) o[t * C + c] = dst.f32()[c * gh * gw + t];
  return be.upload_array(out);
}

void Encoder::forward(compute::Backend& be, const float* image, int64_t H, int64_t W, const compute::Array& pos_embed,
                      float* out, EncoderScratch& s) const {
  const int64_t C = config_.embed_dim, p = config_.patch_size, R = config_.num_register_tokens;
  const int64_t n_patch = (H / p) * (W / p);
  LINGBOT_CHECK(pos_embed.shape() == Shape({1 + n_patch, C}), "encoder position embedding: expected shape ",
                shape_str({1 + n_patch, C}), ", got ", shape_str(pos_embed.shape()));
  // ImageNet normalisation, (x - mean) / std per channel as the reference computes it.
  float* img = s.image.reserve(be, 3 * H * W);
  be.normalize_channels(image, 3, H * W, norm_.mean, norm_.std, img);
  // Token layout: [cls, registers..., patches...]; patch embedding goes straight into place.
  const int64_t n_tok = 1 + R + n_patch;
  float* tok = s.tokens.reserve(be, n_tok * C);
  be.patch_embed({img, 3, H, W}, p, patch_w_, patch_b_, tok + (1 + R) * C);
  const float* pe = pos_embed.data();
  const auto row = static_cast<int64_t>(sizeof(float)) * C;
  be.copy_rows(tok, row, be.resident(cls_token_), row, 1, row);
  be.add(tok, pe, C);  // cls + its position embedding
  if (R > 0) be.copy_rows(tok + C, R * row, be.resident(register_tokens_), R * row, 1, R * row);
  be.add(tok + (1 + R) * C, pe + C, n_patch * C);

  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.embed_dim / config_.num_heads));
  const compute::AttentionPrecision precision = attention_precision(blocks_.front());
  const AttendFn attend = [&](const kernels::QueryView& q, const kernels::KVSpan& kv, float* o) {
    be.attention_grouped(q, kv, q.n_tokens, o, scale, precision);
  };
  for (const BlockWeights& b : blocks_) block_forward(be, b, tok, n_tok, s.block, RotateFn{}, attend);
  final_norm_.forward(be, tok + (1 + R) * C, n_patch, out);
}

}  // namespace lingbot::model
