#pragma once
// The CUDA implementation of the compute interface (compute/backend.h): every op asynchronous on one
// stream the backend owns, cuBLAS for the GEMMs and the kernels of src/kernels/cuda for the rest.
// Built with -DLINGBOT_CUDA=ON.
//
// Memory: allocator() is a stream-ordered device pool on that stream (kernels/cuda/stream_pool_allocator.h):
// an Array may go out of scope right after the ops that use it were enqueued, freeing never waits
// for the device, and steady-state frames allocate nothing from the driver. Parameters, op scratch
// and tables come from the same pool, so allocator().bytes_allocated() is the backend's device
// footprint (peak_bytes() its high-water mark). Host data crosses only through upload() / download().
//
// Parameters: make_resident() (or the first op that reads a parameter) uploads the host tensor once
// into device memory the backend owns, keyed by the tensor's data pointer; later ops read that copy.
// As the interface says, a parameter must outlive the backend and must not change once read (a
// different tensor later found at the same address with another size or dtype is an error).
//
// Differences from the CPU backend (CpuBackend), all covered by tests/cuda/compute_cuda_test.cpp
// (with stated tolerances):
//   * linear with f16 / bf16 weights rounds the activations to the weights dtype and multiplies on
//     tensor cores with f32 accumulation (cublasGemmEx): the CPU's oneDNN path does the same; the
//     CPU's panel path (CPUs without native bf16) keeps activations in f32. f32 weights: full f32
//     SGEMM (no TF32) on both.
//   * GEMM-based ops (linear, conv2d, conv_transpose2d, patch_embed) sum in cuBLAS's order, not
//     OpenBLAS's: equal up to f32 rounding.
//   * conv2d with bf16 weights (the DPT head of a bf16 model) rounds the im2col matrix to bf16 and
//     multiplies on tensor cores with f32 accumulation (cublasGemmEx), as the CPU's oneDNN path does;
//     the CPU's panel path (CPUs without native bf16) keeps the activations f32. f16 conv weights are
//     widened to f32 once (SGEMM on f32 activations).
//   * attention: AttentionImpl::Auto (the default) picks the tensor-core kernel for f16/bf16 K/V with
//     head_dim 64, which rounds queries and probabilities to the K/V dtype (kernels/cuda/attention_cuda.h);
//     Simt keeps the CPU's f32 math. attention_grouped at AttentionPrecision::Bf16 rounds f32 K/V to bf16
//     first (the CPU does the same where it has native bf16 attention; a CPU without computes f32).
//   * gelu / silu use the device erff / expf (within 2 ulp of the CPU's libm).
//   * layer_norm / head_norm accumulate their statistics in double like the CPU, in a block-reduction
//     order.
// Everything else (elementwise ops, RoPE, resizes, the transposed convolution's tap order) repeats
// the CPU's arithmetic in the CPU's order. The CPU build also runs those tests against a host
// emulation of the CUDA runtime (tests/cuda_emulated/).
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <vector>
#include <string>
#include <tuple>
#include <unordered_map>

#include "compute/backend.h"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/cuda/stream_pool_allocator.h"

namespace lingbot::compute {

struct CudaBackendOptions {
  int device = 0;                                             // CUDA device index
  cuda::AttentionImpl attention = cuda::AttentionImpl::Auto;  // kernel of the attention ops
};

class CudaBackend final : public Backend {
 public:
  // Throws lingbot::Error when no CUDA device is visible or `device` is out of range (the messages
  // name the device count), before touching the driver beyond counting devices.
  explicit CudaBackend(CudaBackendOptions options = {});

  Device device() const override { return Device::Cuda; }
  // "cuda:0 (NVIDIA H200, sm_90, 139.8 GiB)".
  std::string description() const override { return description_; }
  // The stream every op runs on: a device KV cache writing K/V for attention_cached should use it.
  cudaStream_t stream() const { return stream_.handle; }
  // Most device bytes the backend held at once (activations, parameters, scratch, tables).
  size_t peak_bytes() const { return alloc_.peak_bytes(); }
  std::optional<size_t> device_peak_bytes() const override { return alloc_.peak_bytes(); }
  Allocator& allocator() override { return alloc_; }
  // Device phase times from CUDA events on the stream (reused after each collect; a backend whose
  // owner never collects collects by itself every kMaxTimedSpans spans, waiting for the device).
  void device_timer_start() override;
  void device_timer_stop(PhaseTime& into) override;
  void collect_device_times() override;
  static constexpr size_t kMaxTimedSpans = 4096;
  // Returns once `host` may be reused: a pageable source is copied into pinned staging
  // (kernels/cuda/pinned_staging.h) and the transfer enqueued from there without waiting for the
  // device; a source that is already pinned is waited for.
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                 int64_t row_bytes) override;
  void synchronize() override;
  void make_resident(const Tensor& param) override;
  // The device copy (uploaded on first use); nullptr for an empty tensor.
  const void* resident(const Tensor& param) override;

  void linear(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y, int64_t x_stride,
              int64_t y_stride) override;
  // The GEMM without bias, then one fused epilogue kernel (bias + GELU, bias + LayerScale + residual).
  void linear_gelu(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y) override;
  void linear_scale_add(const float* x, int64_t n, const Tensor& W, const Tensor* b, const Tensor* gamma, float* tmp,
                        float* res) override;
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
  // mean / stdev (host values) are copied to the device in stream order with the op.
  void normalize_channels(const float* x, int64_t channels, int64_t plane, std::span<const float> mean,
                          std::span<const float> stdev, float* y) override;
  void modulate(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim) override;

  void rope2d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) override;
  void rope3d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) override;

  void attention_dense(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                       float scale) override;
  // precision Bf16 (f32 K/V): K/V rounded to bf16 first, then the attention impl over them (Auto: the
  // tensor-core kernel, which also rounds q and the probabilities, as the CPU's native bf16 kernel).
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
  struct Resident {
    Buffer buf;
    size_t bytes = 0;
    DType dtype = DType::F32;
  };
  const float* resident_f32(const Tensor* param, const char* op, const char* what);
  // linear's bias, checked against W's output count (nullptr when absent).
  const float* linear_bias(const Tensor* b, const Tensor& W, const char* op);
  // The parameter as f32 on the device: f32 ones are resident(); f16/bf16 ones (f16 conv2d weights)
  // are widened on the host once and that copy is kept resident.
  const float* resident_widened(const Tensor& param);
  // A grow-only scratch of at least `bytes` (contents not kept across growth; stream order makes
  // reuse by the next op, and freeing on growth, safe).
  void* scratch(Buffer& buf, size_t bytes);
  // Device tables of one resize axis (`in` samples to `out`), built once per size pair.
  struct ResizeTable {
    Buffer buf;
    int max_taps = 0;
  };
  enum class ResizeKind : uint8_t { Bilinear, BicubicAA };
  const ResizeTable& resize_table(ResizeKind kind, int64_t in, int64_t out);
  // Auto kernel and key splits (the splits' partial states in attention_workspace_).
  cuda::CudaAttentionParams attention_params(float scale) {
    cuda::CudaAttentionParams p{scale, stream(), options_.attention};
    p.workspace = &attention_workspace_;
    return p;
  }

  // The backend's stream; destroyed last (after everything that frees memory on it), once idle.
  struct OwnedStream {
    cudaStream_t handle = nullptr;
    explicit OwnedStream(int device);
    ~OwnedStream();
    OwnedStream(const OwnedStream&) = delete;
    OwnedStream& operator=(const OwnedStream&) = delete;
  };

  // Timing events, created on first use and reused; destroyed before the stream.
  struct TimingEvents {
    std::vector<cudaEvent_t> events;
    TimingEvents() = default;
    ~TimingEvents();
    TimingEvents(const TimingEvents&) = delete;
    TimingEvents& operator=(const TimingEvents&) = delete;
  };
  struct TimedSpan {
    size_t start, stop;  // indices into timing_.events
    PhaseTime* into;
  };
  size_t record_timing_event();

  CudaBackendOptions options_;
  std::string description_;
  OwnedStream stream_;
  TimingEvents timing_;
  size_t timing_used_ = 0;            // events recorded since the last collect
  std::vector<size_t> timing_open_;   // started, not yet stopped
  std::vector<TimedSpan> timing_spans_;
  cuda::StreamPoolAllocator alloc_;
  cuda::PinnedStaging staging_;  // destroyed before the stream: it waits for its transfers
  std::unique_ptr<cuda::CudaContext> ctx_;
  std::unordered_map<const void*, Resident> params_;
  std::unordered_map<const void*, Resident> widened_;
  std::map<std::tuple<ResizeKind, int64_t, int64_t>, ResizeTable> resize_tables_;
  Buffer lowp_x_, cols_, conv_lowp_, resize_mid_, channel_stats_, kv_bf16_;
  cuda::AttentionWorkspace attention_workspace_{alloc_};
};

}  // namespace lingbot::compute
