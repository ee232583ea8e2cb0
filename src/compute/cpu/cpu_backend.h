#pragma once
// The CPU implementation of the compute interface: host memory (HostAllocator) and the OpenMP /
// OpenBLAS / oneDNN kernels of src/kernels/cpu. Results are bit-identical for any thread count
// (for a given weights dtype).
#include <vector>

#include "compute/backend.h"

namespace lingbot::compute {

class CpuBackend final : public Backend {
 public:
  // num_threads: OpenMP threads of every op (values below 1 mean 1).
  explicit CpuBackend(int num_threads);

  int num_threads() const { return threads_; }

  Device device() const override { return Device::Cpu; }
  std::string description() const override;

  Allocator& allocator() override { return alloc_; }
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                 int64_t row_bytes) override;
  void synchronize() override {}
  void make_resident(const Tensor&) override {}  // parameters are read where the model keeps them
  const void* resident(const Tensor& param) override { return param.raw(); }

  void linear(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y, int64_t x_stride,
              int64_t y_stride) override;
  void layer_norm(const float* x, int64_t n, int64_t dim, const Tensor* gamma, const Tensor* beta, float eps,
                  float* y, int64_t x_stride, int64_t y_stride) override;
  void head_norm(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride, const Tensor* gamma,
                 const Tensor* beta, float eps) override;
  void gelu_erf(float* x, int64_t n) override;
  void silu(float* x, int64_t n) override;
  void relu(float* x, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;
  void layer_scale_add(float* y, const float* x, const Tensor* gamma, int64_t rows, int64_t dim) override;
  void add_transposed(float* y, const float* x, int64_t rows, int64_t cols) override;
  void add_axis_tables(float* y, int64_t channels, int64_t h, int64_t w, const float* columns,
                       const float* rows) override;
  void normalize_channels(const float* x, int64_t channels, int64_t plane, std::span<const float> mean,
                          std::span<const float> stdev, float* y) override;
  void modulate(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim) override;

  void rope2d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) override;
  void rope3d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) override;

  void attention_dense(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                       float scale) override;
  void attention_grouped(const kernels::QueryView& q, const kernels::KVSpan& kv, int64_t group, float* out,
                         float scale, AttentionPrecision precision) override;
  void attention_cached(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
                        float scale) override;

  void conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p, float* y) override;
  void conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p,
                        float* y) override;
  void resize_bilinear(const MapView& x, int64_t out_h, int64_t out_w, float* y) override;
  void resize_bicubic_aa(const MapView& x, int64_t out_h, int64_t out_w, float* y) override;
  void patch_embed(const MapView& image, int64_t k, const Tensor& weight, const Tensor& bias, float* out) override;

 private:
  int threads_ = 1;
  // Activations are allocated and freed every frame: heap memory is recycled without page faults
  // (the layout Tensor allocations had before the compute interface).
  HostAllocator alloc_{HostPlacement::Heap};
  std::vector<float> patch_cols_;  // patch_embed's im2col scratch, reused frame after frame
  std::vector<uint16_t> kv_bf16_;  // attention_grouped's bf16 K and V (AttentionPrecision::Bf16), reused
};

}  // namespace lingbot::compute
