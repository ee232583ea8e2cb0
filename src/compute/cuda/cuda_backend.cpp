#include "compute/cuda/cuda_backend.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "core/error.h"
#include "core/format_bytes.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/resize_aa.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_support.h"
#include "kernels/cuda/model_ops_cuda.h"

namespace lingbot::compute {

namespace {

// im2col scratch budget of conv2d in floats (128 MiB): larger outputs are processed in row bands.
constexpr int64_t kIm2colBudget = int64_t{32} << 20;

std::string describe(int device) {
  LINGBOT_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  LINGBOT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return detail::concat("cuda:", device, " (", prop.name, ", sm_", prop.major, prop.minor, ", ",
                        format_bytes(static_cast<int64_t>(prop.totalGlobalMem)), ")");
}

int checked_device(int device) {
  LINGBOT_CHECK(device >= 0, "cuda backend: device must be >= 0, got ", device);
  cuda::require_device("cuda backend");
  const int n = cuda::device_count();
  LINGBOT_CHECK(device < n, "cuda backend: device ", device, " requested but ", n, " CUDA device",
                n == 1 ? " is" : "s are", " visible");
  if (!cuda::kernels_run_on(device)) {
    const cuda::ComputeCapability cc = cuda::compute_capability(device);
    throw Error(detail::concat("cuda backend: device ", device, " is sm_", cc.major, cc.minor,
                               ", and this build's kernels are compiled for sm ", cuda::built_architectures(),
                               " only: run on the CPU, or add ", cc.major, cc.minor,
                               " to -DCMAKE_CUDA_ARCHITECTURES (below sm_80 the kernels take the SIMT attention and f32 "
                               "weights; not yet run on such a GPU)"));
  }
  return device;
}

void check_f32_weight(const Tensor& t, int rank, const char* op, const char* what) {
  LINGBOT_CHECK(t.dtype() == DType::F32, op, ": ", what, " must be f32, got ", dtype_name(t.dtype()));
  LINGBOT_CHECK(t.ndim() == rank, op, ": ", what, " must have ", rank, " dimensions, got ", shape_str(t.shape()));
}

const Tensor* non_empty(const Tensor* t) { return t == nullptr || t->empty() ? nullptr : t; }

void check_int_range(const char* op, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) LINGBOT_CHECK(d <= INT_MAX, op, ": dimension ", d, " exceeds cuBLAS's int range");
}

}  // namespace

CudaBackend::OwnedStream::OwnedStream(int device) {
  LINGBOT_CUDA_CHECK(cudaSetDevice(device));
  // A blocking stream: it stays ordered with the legacy default stream (plain cudaMemcpy / cudaMemset
  // of other code, e.g. the tests' helpers).
  LINGBOT_CUDA_CHECK(cudaStreamCreate(&handle));
}

CudaBackend::OwnedStream::~OwnedStream() {
  (void)cudaStreamSynchronize(handle);  // errors of pending work cannot be reported from here
  (void)cudaStreamDestroy(handle);
}

CudaBackend::CudaBackend(CudaBackendOptions options)
    : options_(options),
      description_(describe(checked_device(options.device))),
      stream_(options.device),
      alloc_(options.device, stream_.handle),
      ctx_(std::make_unique<cuda::CudaContext>(stream_.handle)) {}

// ---- memory ---------------------------------------------------------------------------------------

void CudaBackend::upload(void* dst, const void* host, size_t bytes) {
  if (!bytes) return;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) (void)cudaGetLastError();
  if (attr.type == cudaMemoryTypeHost) {
    // The caller's pinned memory is read by the transfer itself: wait before it may be reused.
    LINGBOT_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream()));
    synchronize();
    return;
  }
  // Pageable: through the pinned staging, so the host does not wait for the queued work.
  staging_.copy_to_device(dst, host, bytes, stream());
}

void CudaBackend::download(void* host, const void* src, size_t bytes) {
  if (bytes) LINGBOT_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream()));
  synchronize();
}

void CudaBackend::copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                            int64_t row_bytes) {
  LINGBOT_CHECK(rows >= 0 && row_bytes >= 0 && row_bytes <= dst_pitch && row_bytes <= src_pitch,
                "copy_rows: ", rows, " rows of ", row_bytes, " bytes do not fit pitches ", dst_pitch, " / ", src_pitch);
  if (rows == 0 || row_bytes == 0) return;
  LINGBOT_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                                       static_cast<size_t>(row_bytes), static_cast<size_t>(rows),
                                       cudaMemcpyDeviceToDevice, stream()));
}

CudaBackend::TimingEvents::~TimingEvents() {
  for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
}

size_t CudaBackend::record_timing_event() {
  if (timing_used_ == timing_.events.size()) {
    timing_.events.reserve(timing_.events.size() + 1);  // before the create: the push_back cannot throw
    cudaEvent_t e = nullptr;
    LINGBOT_CUDA_CHECK(cudaEventCreate(&e));
    timing_.events.push_back(e);
  }
  LINGBOT_CUDA_CHECK(cudaEventRecord(timing_.events[timing_used_], stream()));
  return timing_used_++;
}

void CudaBackend::device_timer_start() { timing_open_.push_back(record_timing_event()); }

void CudaBackend::device_timer_stop(PhaseTime& into) {
  LINGBOT_CHECK(!timing_open_.empty(), "cuda backend: device_timer_stop without device_timer_start");
  const size_t start = timing_open_.back();
  timing_open_.pop_back();
  timing_spans_.push_back({start, record_timing_event(), &into});
  if (timing_spans_.size() >= kMaxTimedSpans && timing_open_.empty()) collect_device_times();
}

void CudaBackend::collect_device_times() {
  if (timing_spans_.empty()) return;
  std::vector<TimedSpan> spans;
  spans.swap(timing_spans_);  // taken even when a check below throws: no span is counted twice
  if (timing_open_.empty()) timing_used_ = 0;  // open starts keep their events until they stop
  LINGBOT_CUDA_CHECK(cudaEventSynchronize(timing_.events[spans.back().stop]));
  for (const TimedSpan& t : spans) {
    float ms = 0;
    LINGBOT_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_.events[t.start], timing_.events[t.stop]));
    t.into->device_s += 1e-3 * ms;
  }
}

void CudaBackend::synchronize() { LINGBOT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

void CudaBackend::make_resident(const Tensor& param) { (void)resident(param); }

const void* CudaBackend::resident(const Tensor& param) {
  if (param.empty()) return nullptr;
  const void* key = param.raw();
  auto it = params_.find(key);
  if (it != params_.end()) {
    LINGBOT_CHECK(it->second.bytes == param.nbytes() && it->second.dtype == param.dtype(),
                  "cuda backend: parameter ", shape_str(param.shape()), " ", dtype_name(param.dtype()),
                  " reuses the memory of an earlier parameter of ", it->second.bytes, " bytes ",
                  dtype_name(it->second.dtype), " (parameters must outlive the backend)");
    return it->second.buf.data();
  }
  Resident r{Buffer(alloc_, param.nbytes()), param.nbytes(), param.dtype()};
  LINGBOT_CUDA_CHECK(cudaMemcpyAsync(r.buf.data(), key, r.bytes, cudaMemcpyHostToDevice, stream()));
  return params_.emplace(key, std::move(r)).first->second.buf.data();
}

const float* CudaBackend::resident_f32(const Tensor* param, const char* op, const char* what) {
  if (param == nullptr || param->empty()) return nullptr;
  LINGBOT_CHECK(param->dtype() == DType::F32, op, ": ", what, " must be f32, got ", dtype_name(param->dtype()));
  return static_cast<const float*>(resident(*param));
}

const float* CudaBackend::resident_widened(const Tensor& param) {
  if (param.dtype() == DType::F32) return static_cast<const float*>(resident(param));
  const void* key = param.raw();
  auto it = widened_.find(key);
  if (it != widened_.end()) {
    LINGBOT_CHECK(it->second.bytes == param.nbytes() && it->second.dtype == param.dtype(), "cuda backend: parameter ",
                  shape_str(param.shape()), " ", dtype_name(param.dtype()),
                  " reuses the memory of an earlier parameter (parameters must outlive the backend)");
    return static_cast<const float*>(it->second.buf.data());
  }
  const Tensor wide = param.to(DType::F32);
  Resident r{Buffer(alloc_, wide.nbytes()), param.nbytes(), param.dtype()};
  LINGBOT_CUDA_CHECK(cudaMemcpyAsync(r.buf.data(), wide.raw(), wide.nbytes(), cudaMemcpyHostToDevice, stream()));
  LINGBOT_CUDA_CHECK(cudaStreamSynchronize(stream()));  // `wide` is freed on return
  return static_cast<const float*>(widened_.emplace(key, std::move(r)).first->second.buf.data());
}

void* CudaBackend::scratch(Buffer& buf, size_t bytes) {
  if (buf.bytes() < bytes) {
    buf.reset();  // stream-ordered: pending ops still read the old memory before it is reused
    buf = Buffer(alloc_, bytes);
  }
  return buf.data();
}

const CudaBackend::ResizeTable& CudaBackend::resize_table(ResizeKind kind, int64_t in, int64_t out) {
  const auto key = std::make_tuple(kind, in, out);
  auto it = resize_tables_.find(key);
  if (it != resize_tables_.end()) return it->second;
  LINGBOT_CHECK(in <= INT_MAX && out <= INT_MAX, "cuda backend: resize ", in, " -> ", out,
                " exceeds the int32 index tables");
  // Layout: two int32 [out] arrays, then float arrays ([out] x 2 bilinear, [out, max_taps] bicubic).
  std::vector<int32_t> idx(static_cast<size_t>(2 * out));
  std::vector<float> w;
  ResizeTable t;
  if (kind == ResizeKind::Bilinear) {
    const std::vector<kernels::BilinearTap> taps = kernels::bilinear_align_corners_taps(in, out);
    w.resize(static_cast<size_t>(2 * out));
    for (int64_t o = 0; o < out; ++o) {
      const auto& tap = taps[static_cast<size_t>(o)];
      idx[static_cast<size_t>(o)] = static_cast<int32_t>(tap.i0);
      idx[static_cast<size_t>(out + o)] = static_cast<int32_t>(tap.i1);
      w[static_cast<size_t>(o)] = tap.w0;
      w[static_cast<size_t>(out + o)] = tap.w1;
    }
  } else {
    const kernels::ResampleWeights rw = kernels::bicubic_aa_weights(in, out);
    for (int64_t o = 0; o < out; ++o) {
      idx[static_cast<size_t>(o)] = static_cast<int32_t>(rw.first[static_cast<size_t>(o)]);
      idx[static_cast<size_t>(out + o)] = static_cast<int32_t>(rw.count[static_cast<size_t>(o)]);
    }
    w = rw.w;
    t.max_taps = static_cast<int>(rw.max_taps);
  }
  const size_t idx_bytes = idx.size() * sizeof(int32_t), w_bytes = w.size() * sizeof(float);
  t.buf = Buffer(alloc_, idx_bytes + w_bytes);
  auto* d = static_cast<char*>(t.buf.data());
  upload(d, idx.data(), idx_bytes);
  upload(d + idx_bytes, w.data(), w_bytes);
  return resize_tables_.emplace(key, std::move(t)).first->second;
}

// ---- dense ops ------------------------------------------------------------------------------------

const float* CudaBackend::linear_bias(const Tensor* b, const Tensor& W, const char* op) {
  LINGBOT_CHECK(W.ndim() == 2, op, ": weight must be [out, in], got ", shape_str(W.shape()));
  b = non_empty(b);
  LINGBOT_CHECK(b == nullptr || b->numel() == W.dim(0), op, ": bias ", b ? shape_str(b->shape()) : "",
                " does not match ", W.dim(0), " outputs");
  return resident_f32(b, op, "bias");
}

void CudaBackend::linear_gelu(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y) {
  const float* bd = linear_bias(b, W, "linear_gelu");
  linear(x, n, W, nullptr, y, 0, 0);
  cuda::bias_gelu(y, bd, n, W.dim(0), stream());
}

void CudaBackend::linear_scale_add(const float* x, int64_t n, const Tensor& W, const Tensor* b, const Tensor* gamma,
                                   float* tmp, float* res) {
  const float* bd = linear_bias(b, W, "linear_scale_add");
  const float* g = resident_f32(gamma, "linear_scale_add", "gamma");
  LINGBOT_CHECK(g == nullptr || gamma->numel() == W.dim(0), "linear_scale_add: gamma ", shape_str(gamma->shape()),
                " does not match ", W.dim(0), " outputs");
  linear(x, n, W, nullptr, tmp, 0, 0);
  cuda::bias_scale_add(res, tmp, bd, g, n, W.dim(0), stream());
}

void CudaBackend::linear(const float* x, int64_t n, const Tensor& W, const Tensor* b, float* y, int64_t x_stride,
                         int64_t y_stride) {
  const float* bd = linear_bias(b, W, "linear");
  const int64_t out = W.dim(0), in = W.dim(1);
  const void* wd = resident(W);
  void* xs = W.dtype() == DType::F32 || n == 0
                 ? nullptr
                 : scratch(lowp_x_, static_cast<size_t>(n * in) * dtype_size(W.dtype()));
  cuda::linear(*ctx_, x, n, in, wd, W.dtype(), bd, out, y, xs, x_stride, y_stride);
}

void CudaBackend::layer_norm(const float* x, int64_t n, int64_t dim, const Tensor* gamma, const Tensor* beta,
                             float eps, float* y, int64_t x_stride, int64_t y_stride) {
  cuda::layer_norm(*ctx_, x, n, dim, resident_f32(gamma, "layer_norm", "gamma"), resident_f32(beta, "layer_norm", "beta"),
                   eps, y, x_stride, y_stride);
}

void CudaBackend::head_norm(float* x, int64_t n_tokens, int heads, int head_dim, int64_t token_stride,
                            const Tensor* gamma, const Tensor* beta, float eps) {
  cuda::head_norm(*ctx_, x, n_tokens, heads, head_dim, token_stride, resident_f32(gamma, "head_norm", "gamma"),
                  resident_f32(beta, "head_norm", "beta"), eps);
}

void CudaBackend::gelu_erf(float* x, int64_t n) { cuda::gelu_erf(*ctx_, x, n); }
void CudaBackend::silu(float* x, int64_t n) { cuda::silu(x, n, stream()); }
void CudaBackend::relu(float* x, int64_t n) { cuda::relu(x, n, stream()); }
void CudaBackend::add(float* y, const float* x, int64_t n) { cuda::add(y, x, n, stream()); }

void CudaBackend::layer_scale_add(float* y, const float* x, const Tensor* gamma, int64_t rows, int64_t dim) {
  const float* g = resident_f32(gamma, "layer_scale_add", "gamma");
  LINGBOT_CHECK(g == nullptr || gamma->numel() == dim, "layer_scale_add: gamma ", shape_str(gamma->shape()),
                " does not match dim ", dim);
  cuda::layer_scale_add(y, x, g, rows, dim, stream());
}

void CudaBackend::add_transposed(float* y, const float* x, int64_t rows, int64_t cols) {
  cuda::add_transposed(y, x, rows, cols, stream());
}

void CudaBackend::add_axis_tables(float* y, int64_t channels, int64_t h, int64_t w, const float* columns,
                                  const float* rows) {
  LINGBOT_CHECK(channels % 2 == 0, "add_axis_tables: channels must be even, got ", channels);
  cuda::add_axis_tables(y, channels, h, w, columns, rows, stream());
}

void CudaBackend::normalize_channels(const float* x, int64_t channels, int64_t plane, std::span<const float> mean,
                                     std::span<const float> stdev, float* y) {
  LINGBOT_CHECK(static_cast<int64_t>(mean.size()) == channels && static_cast<int64_t>(stdev.size()) == channels,
                "normalize_channels: ", mean.size(), " means and ", stdev.size(), " deviations for ", channels,
                " channels");
  if (channels == 0) return;
  // [mean | stdev] on the device; rewriting it is ordered after the previous op that read it.
  auto* stats = static_cast<float*>(scratch(channel_stats_, 2 * mean.size() * sizeof(float)));
  staging_.copy_to_device(stats, mean.data(), mean.size() * sizeof(float), stream());
  staging_.copy_to_device(stats + channels, stdev.data(), stdev.size() * sizeof(float), stream());
  cuda::normalize_channels(x, channels, plane, stats, stats + channels, y, stream());
}

void CudaBackend::modulate(float* x, const float* a, const float* t, const float* mod, int64_t n, int64_t dim) {
  cuda::modulate(x, a, t, mod, n, dim, stream());
}

// ---- position rotation ----------------------------------------------------------------------------

void CudaBackend::rope2d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) {
  LINGBOT_CHECK(t.n_tokens == n_tokens, "rope2d: table has ", t.n_tokens, " tokens, input has ", n_tokens);
  cuda::rope2d_apply(x, n_tokens, heads, t.head_dim, token_stride, t.cos.data(), t.sin.data(), stream());
}

void CudaBackend::rope3d(float* x, int64_t n_tokens, int heads, int64_t token_stride, const RopeTable& t) {
  LINGBOT_CHECK(t.n_tokens == n_tokens, "rope3d: table has ", t.n_tokens, " tokens, input has ", n_tokens);
  cuda::rope3d_apply(x, n_tokens, heads, t.head_dim, token_stride, t.cos.data(), t.sin.data(), stream());
}

// ---- attention ------------------------------------------------------------------------------------

void CudaBackend::attention_dense(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                                  float scale) {
  cuda::dense_attention(q, kv, out, attention_params(scale));
}

void CudaBackend::attention_grouped(const kernels::QueryView& q, const kernels::KVSpan& kv, int64_t group,
                                    float* out, float scale, AttentionPrecision precision) {
  if (precision == AttentionPrecision::F32 || kv.dtype != DType::F32) {
    attention_grouped_by_dense(q, kv, group, out, scale);  // groups are frames: a few launches per call
    return;
  }
  // K and V rounded to bf16 once, packed [n_tokens, heads * head_dim] (the CPU's bits); the attention
  // impl then runs on bf16 K/V (Auto: the tensor-core kernel at head_dim 64 on sm_80+).
  const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim, n = kv.n_tokens;
  const size_t half = static_cast<size_t>(n * row) * dtype_size(DType::BF16);
  auto* k16 = static_cast<char*>(scratch(kv_bf16_, 2 * half));
  cuda::store_rows(static_cast<const float*>(kv.k), kv.token_stride, k16, DType::BF16, row, n, row, stream());
  cuda::store_rows(static_cast<const float*>(kv.v), kv.token_stride, k16 + half, DType::BF16, row, n, row, stream());
  const kernels::KVSpan kv16{k16, k16 + half, DType::BF16, kv.n_tokens, row};
  attention_grouped_by_dense(q, kv16, group, out, scale);
}

void CudaBackend::attention_cached(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
                                   float scale) {
  cuda::attention(q, keys, out, attention_params(scale));
}

// ---- images and feature maps ----------------------------------------------------------------------

void CudaBackend::conv2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p, float* y) {
  constexpr const char* op = "conv2d";
  bias = non_empty(bias);
  const kernels::ConvOutSize size = kernels::check_conv2d(x, weight, bias, p.stride, p.padding, y);
  const int64_t c_in = x.channels, h = x.height, w = x.width, ho = size.height, wo = size.width;
  const int64_t c_out = weight.dim(0), kh = weight.dim(2), kw = weight.dim(3);
  const int64_t plane = ho * wo, K = c_in * kh * kw;
  check_int_range(op, {plane, K, c_out});
  // bf16 weights: bf16 tensor-core GEMMs (the im2col matrix rounded to bf16, f32 accumulation), as the
  // CPU's oneDNN path does; f16 weights are widened to f32 once (SGEMM).
  const bool tensor_cores = weight.dtype() == DType::BF16;
  const void* wd = tensor_cores ? resident(weight) : resident_widened(weight);
  float beta = 0.0f;  // beta 0: cuBLAS does not read y (caller memory may hold anything)
  if (bias) {
    cuda::fill_channels(y, resident_f32(bias, op, "bias"), c_out, plane, stream());
    beta = 1.0f;
  }
  const float one = 1.0f;
  // Row-major y[c_out, cols] = W[c_out, K] · col[K, cols] is column-major y^T = col^T · W^T.
  auto gemm = [&](const float* col, int64_t ncols, float* dst) {
    if (tensor_cores) {
      void* c16 = scratch(conv_lowp_, static_cast<size_t>(K * ncols) * dtype_size(DType::BF16));
      cuda::store_rows(col, ncols, c16, DType::BF16, ncols, K, ncols, stream());
      LINGBOT_CUBLAS_CHECK(cublasGemmEx(ctx_->cublas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(ncols),
                                        static_cast<int>(c_out), static_cast<int>(K), &one, c16, CUDA_R_16BF,
                                        static_cast<int>(ncols), wd, CUDA_R_16BF, static_cast<int>(K), &beta, dst,
                                        CUDA_R_32F, static_cast<int>(plane), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
    LINGBOT_CUBLAS_CHECK(cublasSgemm(ctx_->cublas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(ncols),
                                     static_cast<int>(c_out), static_cast<int>(K), &one, col, static_cast<int>(ncols),
                                     static_cast<const float*>(wd), static_cast<int>(K), &beta, dst,
                                     static_cast<int>(plane)));
  };
  if (kh == 1 && kw == 1 && p.stride == 1 && p.padding == 0) {
    gemm(x.data, plane, y);  // the input planes already are the im2col matrix
    return;
  }
  const int64_t band = std::clamp<int64_t>(kIm2colBudget / std::max<int64_t>(1, K * wo), 1, ho);
  auto* col = static_cast<float*>(scratch(cols_, static_cast<size_t>(K * band * wo) * sizeof(float)));
  for (int64_t r0 = 0; r0 < ho; r0 += band) {
    const int64_t rows = std::min(band, ho - r0);
    cuda::im2col(x.data, c_in, h, w, kh, kw, p.stride, p.padding, r0, rows, wo, col, stream());
    gemm(col, rows * wo, y + r0 * wo);
  }
}

void CudaBackend::conv_transpose2d(const MapView& x, const Tensor& weight, const Tensor* bias, ConvParams p,
                                   float* y) {
  constexpr const char* op = "conv_transpose2d";
  bias = non_empty(bias);
  const kernels::ConvOutSize size = kernels::check_conv_transpose2d(x, weight, bias, p.stride, p.padding, y);
  const int64_t c_in = x.channels, h = x.height, w = x.width, ho = size.height, wo = size.width;
  const int64_t c_out = weight.dim(1), kh = weight.dim(2), kw = weight.dim(3);
  const int64_t M = c_out * kh * kw, HW = h * w;
  check_int_range(op, {M, HW, c_in});
  const auto* wd = static_cast<const float*>(resident(weight));
  const float* bd = resident_f32(bias, op, "bias");
  auto* cols = static_cast<float*>(scratch(cols_, static_cast<size_t>(M * HW) * sizeof(float)));
  // cols[M, HW] = Wᵀ[M, c_in] · x[c_in, HW] with W stored [c_in, M]: column-major colsᵀ = xᵀ · W.
  const float one = 1.0f, zero = 0.0f;
  LINGBOT_CUBLAS_CHECK(cublasSgemm(ctx_->cublas(), CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(HW),
                                   static_cast<int>(M), static_cast<int>(c_in), &one, x.data, static_cast<int>(HW), wd,
                                   static_cast<int>(M), &zero, cols, static_cast<int>(HW)));
  cuda::col2im_transposed(cols, c_out, kh, kw, h, w, p.stride, p.padding, ho, wo, bd, y, stream());
}

void CudaBackend::resize_bilinear(const MapView& x, int64_t out_h, int64_t out_w, float* y) {
  constexpr const char* op = "resize_bilinear_align_corners";
  LINGBOT_CHECK(out_h >= 1 && out_w >= 1, op, ": output size ", out_h, "x", out_w, " must be positive");
  LINGBOT_CHECK(x.data != nullptr && y != nullptr, op, ": null input or output");
  LINGBOT_CHECK(x.height >= 1 && x.width >= 1, op, ": input ", shape_str({x.channels, x.height, x.width}),
                " is empty");
  auto axis = [](const ResizeTable& t, int64_t out) {
    const auto* idx = static_cast<const int32_t*>(t.buf.data());
    const auto* w = reinterpret_cast<const float*>(idx + 2 * out);
    return cuda::BilinearAxis{idx, idx + out, w, w + out};
  };
  const cuda::BilinearAxis ty = axis(resize_table(ResizeKind::Bilinear, x.height, out_h), out_h);
  const cuda::BilinearAxis tx = axis(resize_table(ResizeKind::Bilinear, x.width, out_w), out_w);
  cuda::resize_bilinear(x.data, x.channels, x.height, x.width, ty, tx, out_h, out_w, y, stream());
}

void CudaBackend::resize_bicubic_aa(const MapView& x, int64_t out_h, int64_t out_w, float* y) {
  const int64_t c = x.channels, in_h = x.height, in_w = x.width;
  LINGBOT_CHECK(in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0, "resize_bicubic_aa: sizes must be positive, got ",
                in_h, "x", in_w, " -> ", out_h, "x", out_w);
  auto axis = [](const ResizeTable& t, int64_t out) {
    const auto* idx = static_cast<const int32_t*>(t.buf.data());
    return cuda::ResampleAxis{idx, idx + out, reinterpret_cast<const float*>(idx + 2 * out), t.max_taps};
  };
  const float* mid = x.data;
  if (out_w != in_w) {  // width pass first, as the CPU kernel (and the reference)
    auto* tmp = static_cast<float*>(scratch(resize_mid_, static_cast<size_t>(c * in_h * out_w) * sizeof(float)));
    cuda::resample_rows(x.data, c * in_h, in_w, axis(resize_table(ResizeKind::BicubicAA, in_w, out_w), out_w), out_w,
                        tmp, stream());
    mid = tmp;
  }
  if (out_h != in_h) {
    cuda::resample_columns(mid, c, in_h, out_w, axis(resize_table(ResizeKind::BicubicAA, in_h, out_h), out_h), out_h,
                           y, stream());
  } else if (c * in_h * out_w > 0) {
    LINGBOT_CUDA_CHECK(cudaMemcpyAsync(y, mid, static_cast<size_t>(c * in_h * out_w) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream()));
  }
}

void CudaBackend::patch_embed(const MapView& image, int64_t k, const Tensor& weight, const Tensor& bias, float* out) {
  LINGBOT_CHECK(weight.ndim() == 4 && weight.dim(1) == image.channels && weight.dim(2) == k && weight.dim(3) == k,
                "patch_embed: weight ", shape_str(weight.shape()), " does not match ", image.channels,
                " channels and patch size ", k);
  check_f32_weight(weight, 4, "patch_embed", "weight");
  const int64_t n_patch = (image.height / k) * (image.width / k), row = image.channels * k * k;
  auto* cols = static_cast<float*>(scratch(cols_, static_cast<size_t>(n_patch * row) * sizeof(float)));
  cuda::patchify(image.data, image.channels, image.height, image.width, k, cols, stream());
  cuda::linear(*ctx_, cols, n_patch, row, static_cast<const float*>(resident(weight)),
               resident_f32(&bias, "patch_embed", "bias"), weight.dim(0), out);
}

}  // namespace lingbot::compute
