#include "model/aggregator.h"

#include <cmath>
#include <cstring>

#include "compute/phase_scope.h"
#include "core/error.h"
#include "model/take_weight.h"

namespace lingbot::model {

Aggregator::Aggregator(const AggregatorConfig& config, io::TensorMap& weights, DType weights_dtype,
                       const std::string& prefix)
    : config_(config) {
  const int64_t C = config.embed_dim, R = config.num_register_tokens;
  LINGBOT_CHECK(config.num_special_tokens == R + 2, "aggregator: num_special_tokens ", config.num_special_tokens,
                " must be camera + ", R, " registers + scale = ", R + 2);
  camera_token_ = take_weight(weights, prefix + "camera_token", {1, 2, 1, C});
  camera_token_.reshape({2, C});
  register_token_ = take_weight(weights, prefix + "register_token", {1, 2, R, C});
  register_token_.reshape({2, R, C});
  scale_token_ = take_weight(weights, prefix + "scale_token", {1, 2, 1, C});
  scale_token_.reshape({2, C});
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string idx = std::to_string(i) + ".";
    frame_blocks_.push_back(BlockWeights::take(weights, prefix + "frame_blocks." + idx, C, config.num_heads,
                                               config.mlp_hidden, config.ln_eps, config.qk_norm, true, weights_dtype));
    global_blocks_.push_back(BlockWeights::take(weights, prefix + "global_blocks." + idx, C, config.num_heads,
                                                config.mlp_hidden, config.ln_eps, config.qk_norm, true, weights_dtype));
  }
  selected_slot_.assign(static_cast<size_t>(config.depth), -1);
  for (size_t j = 0; j < config.selected_layers.size(); ++j) {
    const int64_t d = config.selected_layers[j];
    LINGBOT_CHECK(d >= 0 && d < config.depth, "aggregator: selected layer ", d, " is outside [0, ", config.depth, ")");
    selected_slot_[static_cast<size_t>(d)] = static_cast<int>(j);
  }
}

namespace {

// Copies tokens [n*P, C] into channels [offset, offset+C) of out [n*P, 2C].
void copy_half(compute::Backend& be, const float* tokens, int64_t rows, int64_t C, float* out, int64_t offset) {
  const auto row = static_cast<int64_t>(sizeof(float)) * C;
  be.copy_rows(out + offset, 2 * row, tokens, row, rows, row);
}

}  // namespace

void Aggregator::step(compute::Backend& be, const FrameGrid& grid, const StepFrames& frames, FrameMode mode,
                      KVCache& cache, AggregatorScratch& s, std::vector<compute::Array>& selected) const {
  const int64_t C = config_.embed_dim, R = config_.num_register_tokens, S = config_.num_special_tokens;
  const int64_t P = tokens_per_frame(grid), n = frames.n_frames, Pp = grid.patches();
  const int64_t rows = n * P;
  LINGBOT_CHECK(n >= 1, "aggregator step needs at least one frame, got ", n);
  LINGBOT_CHECK(static_cast<int64_t>(frames.camera_variant.size()) == n &&
                    static_cast<int64_t>(frames.register_variant.size()) == n &&
                    static_cast<int64_t>(frames.scale_variant.size()) == n &&
                    static_cast<int64_t>(frames.time_index.size()) == n,
                "aggregator step: per-frame variant/time vectors must have ", n, " entries");
  LINGBOT_CHECK(cache.options().tokens_per_frame == P, "aggregator step: cache was built for ",
                cache.options().tokens_per_frame, " tokens per frame, the frames have ", P);

  // Assemble [camera, registers, scale, patches] per frame.
  float* tokens = s.tokens.reserve(be, rows * C);
  const auto* camera = static_cast<const float*>(be.resident(camera_token_));
  const auto* registers = static_cast<const float*>(be.resident(register_token_));
  const auto* scale = static_cast<const float*>(be.resident(scale_token_));
  const auto row = static_cast<int64_t>(sizeof(float)) * C;
  for (int64_t f = 0; f < n; ++f) {
    float* t = tokens + f * P * C;
    const auto fi = static_cast<size_t>(f);
    be.copy_rows(t, row, camera + frames.camera_variant[fi] * C, row, 1, row);
    be.copy_rows(t + C, R * row, registers + frames.register_variant[fi] * R * C, R * row, 1, R * row);
    be.copy_rows(t + (1 + R) * C, row, scale + frames.scale_variant[fi] * C, row, 1, row);
    be.copy_rows(t + S * C, Pp * row, frames.patch_tokens + f * Pp * C, Pp * row, 1, Pp * row);
  }

  // 2D RoPE positions of one frame: specials (0, 0), patch (r, c) at (r + 1, c + 1).
  const int head_dim = static_cast<int>(config_.head_dim()), heads = static_cast<int>(config_.num_heads);
  if (s.rope2d_grid.rows != grid.rows || s.rope2d_grid.cols != grid.cols || s.rope2d.head_dim != head_dim) {
    std::vector<int32_t> pr(static_cast<size_t>(P), 0), pc(static_cast<size_t>(P), 0);
    for (int64_t i = 0; i < Pp; ++i) {
      pr[static_cast<size_t>(S + i)] = static_cast<int32_t>(i / grid.cols + 1);
      pc[static_cast<size_t>(S + i)] = static_cast<int32_t>(i % grid.cols + 1);
    }
    s.rope2d = be.rope2d_table(pr, pc, head_dim, static_cast<float>(config_.rope2d_frequency));
    s.rope2d_grid = grid;
  }
  // 3D RoPE of the step's frames: special k of frame f at (t_f, k, k), patch (r, c) at (t_f, S + r, S + c).
  compute::RopeTable rope3d;
  if (config_.enable_3d_rope) {
    std::vector<int64_t> pt(static_cast<size_t>(rows));
    std::vector<int32_t> ph(static_cast<size_t>(rows)), pw(static_cast<size_t>(rows));
    for (int64_t f = 0; f < n; ++f)
      for (int64_t i = 0; i < P; ++i) {
        const auto r = static_cast<size_t>(f * P + i);
        pt[r] = frames.time_index[static_cast<size_t>(f)];
        ph[r] = static_cast<int32_t>(i < S ? i : S + (i - S) / grid.cols);
        pw[r] = static_cast<int32_t>(i < S ? i : S + (i - S) % grid.cols);
      }
    const auto& d = config_.rope3d_fhw;
    rope3d = be.rope3d_table(pt, ph, pw, head_dim,
                             {static_cast<int>(d[0]), static_cast<int>(d[1]), static_cast<int>(d[2])},
                             config_.rope3d_theta);
  }

  const RotateFn rotate_frame = [&](float* q, float* k, int64_t n_tok, int64_t stride) {
    for (int64_t f = 0; f < n_tok / P; ++f) {
      be.rope2d(q + f * P * stride, P, heads, stride, s.rope2d);
      be.rope2d(k + f * P * stride, P, heads, stride, s.rope2d);
    }
  };
  const RotateFn rotate_global = config_.enable_3d_rope
                                     ? RotateFn([&](float* q, float* k, int64_t n_tok, int64_t stride) {
                                         be.rope3d(q, n_tok, heads, stride, rope3d);
                                         be.rope3d(k, n_tok, heads, stride, rope3d);
                                       })
                                     : rotate_frame;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const compute::AttentionPrecision frame_precision = attention_precision(frame_blocks_.front());
  const AttendFn attend_frame = [&](const kernels::QueryView& q, const kernels::KVSpan& kv, float* out) {
    be.attention_grouped(q, kv, P, out, attention_scale, frame_precision);
  };

  selected.clear();
  for (size_t j = 0; j < config_.selected_layers.size(); ++j) selected.emplace_back(be, Shape{n, P, 2 * C});

  // Global attention: the cache stores each block's K/V and hands out its visible keys; the backend's
  // attention runs here.
  cache.begin_step(mode, static_cast<int>(n));
  if (frames.after_block) frames.after_block(0);  // the step's start, for an elapsed time from it
  for (int64_t d = 0; d < config_.depth; ++d) {
    const int slot = selected_slot_[static_cast<size_t>(d)];
    {
      const compute::PhaseScope phase(be, s.frame_blocks);
      block_forward(be, frame_blocks_[static_cast<size_t>(d)], tokens, rows, s.block, rotate_frame, attend_frame);
    }
    if (slot >= 0) copy_half(be, tokens, rows, C, selected[static_cast<size_t>(slot)].data(), 0);
    const int block = static_cast<int>(d);
    const AttendFn attend_global = [&](const kernels::QueryView& q, const kernels::KVSpan& kv, float* out) {
      be.attention_cached(q, cache.store(block, kv), out, attention_scale);
    };
    {
      const compute::PhaseScope phase(be, s.global_blocks);
      block_forward(be, global_blocks_[static_cast<size_t>(d)], tokens, rows, s.block, rotate_global, attend_global);
    }
    if (slot >= 0) copy_half(be, tokens, rows, C, selected[static_cast<size_t>(slot)].data(), C);
    if (frames.after_block) frames.after_block(d + 1);
  }
  cache.end_step();
}

}  // namespace lingbot::model
