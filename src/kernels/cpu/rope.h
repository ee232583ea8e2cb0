#pragma once
// Rotary position embeddings applied in place to q or k rows.
// Rotation tables are per token: cos/sin [n_tokens, head_dim/2] f32, built once per frame layout
// and shared by every head and every block that uses the same positions.
//
// 2D RoPE (aggregator frame blocks): the first half of each head is rotated by the token's row
// position, the second half by its column position; each half uses the rotate-half form
// (x1, x2) -> (x1·cos − x2·sin, x2·cos + x1·sin) with inv_freq_i = base^(−2i/(head_dim/2)),
// computed in f32 as the reference does.
// 3D RoPE (global blocks): interleaved pairs (x[2i], x[2i+1]) rotated as complex numbers; the
// frequency vector is [t_dim/2 | h_dim/2 | w_dim/2] bands with theta^(−2j/band_dim) each, applied to
// the token's (t, h, w) position; angles and cos/sin in float64, then cast to f32.
#include <array>
#include <cstdint>
#include <vector>

namespace lingbot::kernels {

struct RopeTable {
  int64_t n_tokens = 0;
  int head_dim = 0;
  std::vector<float> cos;  // [n_tokens, head_dim/2]
  std::vector<float> sin;  // [n_tokens, head_dim/2]
};

// A borrowed table (cos and sin [n_tokens, head_dim/2] each, host memory).
struct RopeTableView {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t n_tokens = 0;
  int head_dim = 0;
};

// pos_row/pos_col: one integer position per token. head_dim must be a multiple of 4.
RopeTable rope2d_table(const int32_t* pos_row, const int32_t* pos_col, int64_t n_tokens, int head_dim, float base);

// pos_t/pos_h/pos_w: one integer position per token. dims = {t_dim, h_dim, w_dim}, each even,
// summing to head_dim.
RopeTable rope3d_table(const int64_t* pos_t, const int32_t* pos_h, const int32_t* pos_w, int64_t n_tokens,
                       int head_dim, std::array<int, 3> dims, double theta);

// x: f32 [n_tokens, heads, head_dim], token t at x + t * token_stride (heads contiguous inside).
void rope2d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& table,
                  int num_threads);
void rope3d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& table,
                  int num_threads);
void rope2d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTableView& table,
                  int num_threads);
void rope3d_apply(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTableView& table,
                  int num_threads);

}  // namespace lingbot::kernels
