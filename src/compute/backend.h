#pragma once
// The compute interface of the model: every op the encoder, the aggregator and the heads run
// (linear, norms, activations, RoPE, attention, convolutions, resizes, copies) behind one abstract
// backend, so the model code has no per-backend branch. The CPU implementation is
// compute/cpu/cpu_backend.h (the kernels of src/kernels/cpu); a device backend implements the same
// interface over its own kernels (compute/cuda/, built with -DLINGBOT_CUDA=ON).
//
// Memory rules (the whole contract; every op follows them):
//   * Activations: `float*` pointers into the backend's memory (host memory for the CPU backend,
//     device memory for a device backend), allocated through `allocator()` (Array, Scratch below).
//     Row-major, f32. Strides are in floats; 0 means packed.
//   * Parameters (weights, biases, norm gammas, learned tokens): host Tensors owned by the model.
//     An op takes them by reference; a device backend reads its resident copy of each (uploaded by
//     make_resident(), at the latest on first use), the CPU backend reads the tensor itself. A
//     parameter must outlive every backend that has read it and must not change afterwards.
//   * Host data crosses only through upload() / download() (and the table builders below).
// Ops may run asynchronously on a device backend; download() and synchronize() wait for them.
// A backend instance is used by one thread at a time (one per session); results are identical
// for any thread count of the CPU backend.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/allocator.h"
#include "kernels/attention_views.h"  // QueryView, KVSpan, VisibleKV (device-neutral)
#include "kernels/feature_map.h"      // MapView (device-neutral)
#include "lingbot/device.h"
#include "lingbot/dtype.h"
#include "lingbot/phase_time.h"
#include "lingbot/tensor.h"

namespace lingbot::compute {

// Precision of the intra-frame attention (encoder and frame blocks), the model's counterpart of
// upstream's bf16 autocast. F32: f32 products. Bf16: K/V and q rounded to bf16, both products in
// bf16 with f32 accumulation and softmax (the numeric contract of kernels::AttentionCompute::Bf16),
// where the backend has a native bf16 attention (CPU: AVX512_BF16 or AMX; CUDA: the tensor-core
// kernel, head_dim 64 on sm_80+); a CPU without AVX512_BF16 computes in f32, which is only more
// accurate.
enum class AttentionPrecision : uint8_t { F32, Bf16 };

class Backend;

// An owning f32 array in a backend's memory with a shape. Move-only. Default-constructed = empty.
class Array {
 public:
  Array() = default;
  Array(Backend& backend, Shape shape);  // zero-initialised
  float* data() { return static_cast<float*>(buf_.data()); }
  const float* data() const { return static_cast<const float*>(buf_.data()); }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + static_cast<int>(shape_.size()) : i)); }
  int64_t numel() const { return shape_numel(shape_); }
  bool empty() const { return buf_.data() == nullptr; }

 private:
  Buffer buf_;
  Shape shape_;
};

// Grow-only f32 scratch in a backend's memory (contents are not kept across growth).
class Scratch {
 public:
  float* reserve(Backend& backend, int64_t floats);  // returns data(); allocates only to grow
  void release() { buf_.reset(); }
  float* data() { return static_cast<float*>(buf_.data()); }
  int64_t capacity() const { return static_cast<int64_t>(buf_.bytes() / sizeof(float)); }

 private:
  Buffer buf_;
};

// A read-only feature map [channels, height, width] (one image) in backend memory: the kernels' view.
using MapView = kernels::MapView;

// Rotary tables in backend memory: cos and sin [n_tokens, head_dim/2] each (see the RoPE ops).
struct RopeTable {
  Array cos, sin;
  int64_t n_tokens = 0;
  int head_dim = 0;
};

struct ConvParams {
  int stride = 1;
  int padding = 0;  // zero padding on every side
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual Device device() const = 0;  // Cpu or Cuda (never Auto)
  // One line for banners, e.g. "cpu (2 threads)".
  virtual std::string description() const = 0;

  // ---- memory ---------------------------------------------------------------------------------
  virtual Allocator& allocator() = 0;
  // Most bytes of device memory the backend held at once through allocator() (parameters,
  // activations, scratch, tables, and a KV cache allocating from it); nullopt for a host backend,
  // whose memory is the process's RSS.
  virtual std::optional<size_t> device_peak_bytes() const { return std::nullopt; }
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;  // waits for pending ops
  // rows × row_bytes from src (src_pitch bytes apart) to dst (dst_pitch bytes apart), both in
  // backend memory; the ranges must not overlap.
  virtual void copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                         int64_t row_bytes) = 0;
  virtual void synchronize() = 0;
  // Makes a parameter resident ahead of use (a device backend uploads it once; no-op on the CPU).
  virtual void make_resident(const Tensor& param) = 0;
  // The backend-memory copy of a parameter (the tensor's own data on the CPU), made resident first.
  virtual const void* resident(const Tensor& param) = 0;

  // ---- device time -------------------------------------------------------------------------------
  // Phase times of queued device work (compute/phase_scope.h): device_timer_start() marks the start
  // of a phase on the backend's stream, device_timer_stop(into) its end; collect_device_times() waits
  // for the last marker and adds each start..stop span to its `into.device_s`. Each `into` must stay
  // alive until then. Starts and stops pair up like brackets. Host backends do nothing (their phases
  // have host time only).
  virtual void device_timer_start() {}
  virtual void device_timer_stop(PhaseTime& into) { (void)into; }
  virtual void collect_device_times() {}

  // ---- dense ops (shapes and semantics: kernels/cpu/ops.h) ----------------------------------------
  // y[n, out] = x[n, in] · W^T (+ b): W [out, in] in f32, f16 or bf16 (the weights dtype), b f32 [out]
  // or nullptr.
  virtual void linear(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y, int64_t x_stride = 0,
                      int64_t y_stride = 0) = 0;
  // Fused linear epilogues of a transformer block (n rows; W [out, in], b [out] or nullptr), the same
  // arithmetic as the unfused ops (default implementations); a device backend applies the bias and
  // what follows in one pass over the output:
  //   linear_gelu:      y = gelu_erf(x · Wᵀ + b)           (MLP fc1)
  //   linear_scale_add: res += gamma · (x · Wᵀ + b)        (proj / fc2 with LayerScale and the residual;
  //                     gamma [out] or nullptr = plain add), through `tmp` [n, out] in backend memory.
  virtual void linear_gelu(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y);
  virtual void linear_scale_add(const float* x, int64_t n, const Tensor& W, const Tensor* b, const Tensor* gamma,
                                float* tmp, float* res);
  // LayerNorm over `dim` of n rows; gamma / beta f32 [dim] or nullptr; x == y allowed.
  virtual void layer_norm(const float* x, int64_t n, int64_t dim, const Tensor* gamma, const Tensor* beta, float eps,
                          float* y, int64_t x_stride = 0, int64_t y_stride = 0) = 0;
  // LayerNorm over head_dim of every (token, head) row of x [n_tokens, heads, head_dim], in place;
  // tokens `token_stride` floats apart, heads contiguous (QK-norm on a packed qkv buffer).
  virtual void head_norm(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
                         const Tensor* gamma, const Tensor* beta, float eps) = 0;
  virtual void gelu_erf(float* x, int64_t n) = 0;  // in place
  virtual void silu(float* x, int64_t n) = 0;
  virtual void relu(float* x, int64_t n) = 0;
  virtual void add(float* y, const float* x, int64_t n) = 0;  // y += x
  // y[r, c] += gamma[c] · x[r, c] (gamma nullptr: plain add).
  virtual void layer_scale_add(float* y, const float* x, const Tensor* gamma, int64_t rows, int64_t dim) = 0;
  // y[c, r] += x[r, c]: x [rows, cols] row-major into y [cols, rows] (token rows to channel planes).
  virtual void add_transposed(float* y, const float* x, int64_t rows, int64_t cols) = 0;
  // A separable [channels, h, w] map added to y [channels, h, w] without forming it: the first
  // channels/2 planes vary along x only, the others along y only (the DPT position embedding):
  // y[c, r, x] += columns[c, x] for c < channels/2, += rows[c − channels/2, r] otherwise.
  // columns [channels/2, w], rows [channels/2, h] are backend memory; channels is even.
  virtual void add_axis_tables(float* y, int64_t channels, int64_t h, int64_t w, const float* columns,
                               const float* rows) = 0;
  // Per channel c of [channels, plane]: y = (x − mean[c]) / stdev[c] (x == y allowed); mean and stdev
  // are host values, one per channel.
  virtual void normalize_channels(const float* x, int64_t channels, int64_t plane, std::span<const float> mean,
                                  std::span<const float> stdev, float* y) = 0;
  // adaLN modulation of n rows of dim: x = gate · (a · (1 + scale) + shift) + t, where the rows of
  // mod [n, 3·dim] are [shift | scale | gate].
  virtual void modulate(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim) = 0;

  // ---- position rotation ------------------------------------------------------------------------
  // x: [n_tokens, heads, head_dim] rows `token_stride` floats apart, rotated in place
  // (kernels/cpu/rope.h: 2D rotate-half per axis, 3D interleaved pairs).
  virtual void rope2d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) = 0;
  virtual void rope3d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) = 0;

  // ---- attention (softmax(q·kᵀ·scale)·v; out f32 [n_q, heads, head_dim] packed) -------------------
  // Over the concatenation of `kv` spans.
  virtual void attention_dense(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                               float scale) = 0;
  // Each run of `group` consecutive tokens attends to its own K/V (intra-frame attention), at
  // `precision` (see AttentionPrecision).
  virtual void attention_grouped(const kernels::QueryView& q, const kernels::KVSpan& kv, int64_t group, float* out,
                                 float scale, AttentionPrecision precision) = 0;
  // Over the keys a KV cache of this backend handed out (KVCache::store).
  virtual void attention_cached(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
                                float scale) = 0;

  // ---- images and feature maps (PyTorch semantics: kernels/cpu/conv.h, resize_aa.h) --------------
  // y [C_out, H_out, W_out]: weight [C_out, C_in, kh, kw], bias [C_out] or nullptr.
  virtual void conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p, float* y) = 0;
  // y [C_out, H_out, W_out]: weight [C_in, C_out, kh, kw] (nn.ConvTranspose2d), bias [C_out] or nullptr.
  virtual void conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p,
                                float* y) = 0;
  // Bilinear, align_corners=True, to y [C, out_h, out_w].
  virtual void resize_bilinear(const MapView& x, int64_t out_h, int64_t out_w, float* y) = 0;
  // Antialiased bicubic (align_corners=False) to y [C, out_h, out_w].
  virtual void resize_bicubic_aa(const MapView& x, int64_t out_h, int64_t out_w, float* y) = 0;
  // ViT patch embedding: image [channels, H, W] -> out [(H/k)(W/k), out_channels] (row stride
  // out_channels) with weight [out_channels, channels, k, k] and bias [out_channels].
  virtual void patch_embed(const MapView& image, int64_t k, const Tensor& weight, const Tensor& bias, float* out) = 0;

  // ---- tables (built on the host, placed in backend memory) --------------------------------------
  // 2D RoPE of tokens at (row, col) positions; 3D RoPE at (t, h, w) with bands `dims` (t, h, w).
  RopeTable rope2d_table(std::span<const int32_t> pos_row, std::span<const int32_t> pos_col, int head_dim,
                         float base);
  RopeTable rope3d_table(std::span<const int64_t> pos_t, std::span<const int32_t> pos_h,
                         std::span<const int32_t> pos_w, int head_dim, std::array<int, 3> dims, double theta);
  // A host tensor copied into a new Array of the same shape (f32 only).
  Array upload_array(const Tensor& host);
  // An Array copied back into a new host Tensor.
  Tensor download_array(const Array& a);

  // ---- stopping a step early (SessionOptions::stop) ---------------------------------------------
  // The caller's flag (not owned; null = never). throw_if_stopped() throws lingbot::Stopped once it
  // is set; PhaseScope calls it at the start of every phase (each encoder / aggregator block, each head).
  void set_stop_flag(const std::atomic<bool>* flag) { stop_ = flag; }
  void throw_if_stopped() const;

 protected:
  // attention_grouped as one attention_dense per group over that group's own K/V (for a backend
  // without a fused grouped kernel); checks that the groups tile the queries.
  void attention_grouped_by_dense(const kernels::QueryView& q, const kernels::KVSpan& kv, int64_t group, float* out,
                                  float scale);

 private:
  const std::atomic<bool>* stop_ = nullptr;
};

// Output size of a convolution along one axis: (in + 2·padding − kernel) / stride + 1.
int64_t conv2d_out_size(int64_t in, int64_t kernel, ConvParams p);
// Output size of a transposed convolution: (in − 1)·stride − 2·padding + kernel.
int64_t conv_transpose2d_out_size(int64_t in, int64_t kernel, ConvParams p);

}  // namespace lingbot::compute
