#include "bench/cuda/cuda_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kvcache/cuda/kv_cache_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "bench/harness/kv_bookkeeping.h"

namespace lingbot::cuda {
namespace {

// cudaEvent pair timing `iterations` calls of f on the default stream; returns ms per call.
// Two events, destroyed however time_ms leaves (f or a check may throw).
struct EventPair {
  cudaEvent_t a = nullptr, b = nullptr;
  EventPair() {
    LINGBOT_CUDA_CHECK(cudaEventCreate(&a));
    const cudaError_t e = cudaEventCreate(&b);
    if (e != cudaSuccess) (void)cudaEventDestroy(a);
    LINGBOT_CUDA_CHECK(e);
  }
  ~EventPair() {
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

template <typename F>
double time_ms(int iterations, F&& f) {
  const EventPair ev;
  LINGBOT_CUDA_CHECK(cudaEventRecord(ev.a));
  for (int i = 0; i < iterations; ++i) f();
  LINGBOT_CUDA_CHECK(cudaEventRecord(ev.b));
  LINGBOT_CUDA_CHECK(cudaEventSynchronize(ev.b));
  float ms = 0;
  LINGBOT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.a, ev.b));
  return ms / iterations;
}

}  // namespace

DeviceDescription describe_device(int device) {
  require_device("bench");
  cudaDeviceProp p{};
  LINGBOT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceDescription d;
  d.name = p.name;
  d.sm_major = p.major;
  d.sm_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.memory_bytes = p.totalGlobalMem;
  int clock_khz = 0, bus_bits = 0;
  LINGBOT_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  LINGBOT_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  d.spec_bandwidth_gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // double data rate
  return d;
}

MeasuredPeaks measure_peaks(DType gemm_dtype) {
  require_device("bench");
  LINGBOT_CHECK(gemm_dtype != DType::F32, "measure_peaks: gemm dtype must be f16 or bf16");
  CudaAllocator alloc;
  CudaContext ctx;
  MeasuredPeaks peaks;
  {
    constexpr int n = 8192;
    const size_t bytes = size_t{n} * n * 2;
    Buffer a(alloc, bytes), b(alloc, bytes), c(alloc, bytes);
    fill_uniform(a.data(), gemm_dtype, int64_t{n} * n, -1, 1, 1, nullptr);
    fill_uniform(b.data(), gemm_dtype, int64_t{n} * n, -1, 1, 2, nullptr);
    const cudaDataType t = gemm_dtype == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;
    const float one = 1.0f, zero = 0.0f;
    auto gemm = [&] {
      LINGBOT_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), t, n,
                                        b.data(), t, n, &zero, c.data(), t, n, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
    };
    time_ms(2, gemm);
    const double ms = time_ms(10, gemm);
    peaks.gemm_tflops = 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
  }
  {
    const size_t bytes = size_t{1} << 30;
    Buffer src(alloc, bytes), dst(alloc, bytes);
    auto copy = [&] { LINGBOT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice)); };
    time_ms(2, copy);
    const double ms = time_ms(10, copy);
    peaks.copy_gbps = 2.0 * bytes / (ms * 1e-3) / 1e9;
  }
  return peaks;
}

AttentionBenchResult bench_paged_vs_contiguous(const AttentionBenchConfig& c) {
  require_device("bench");
  LINGBOT_CHECK(c.queries > 0 && c.frames > 0 && c.patch_tokens > 0 && c.special_tokens >= 0 && c.heads > 0 &&
                    c.head_dim > 0 && c.iterations > 0,
                "bench_paged_vs_contiguous: bad configuration");
  const int page_size = c.page_size > 0 ? c.page_size : c.patch_tokens;
  LINGBOT_CHECK(page_size >= c.patch_tokens, "bench_paged_vs_contiguous: page_size ", page_size,
                " < patch_tokens ", c.patch_tokens);
  const int special_pages = static_cast<int>((c.special_tokens + page_size - 1) / page_size);
  const int num_pages = c.frames + special_pages + 4;  // a few free pages, as in a real pool
  const int64_t row = int64_t{c.heads} * c.head_dim;
  const size_t es = dtype_size(c.dtype);
  const size_t tok_bytes = static_cast<size_t>(row) * es;

  CudaAllocator alloc;
  Buffer pool(alloc, static_cast<size_t>(num_pages) * 2 * page_size * tok_bytes);
  fill_uniform(pool.data(), c.dtype, int64_t{num_pages} * 2 * page_size * row, -1, 1, c.seed, nullptr);

  std::vector<int32_t> order(num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(static_cast<uint32_t>(c.seed));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> ids, start, len;
  for (int f = 0; f < c.frames; ++f) {
    ids.push_back(order[f]);
    start.push_back(0);
    len.push_back(c.patch_tokens);
  }
  for (int64_t left = c.special_tokens, p = 0; left > 0; left -= page_size, ++p) {
    ids.push_back(order[c.frames + p]);
    start.push_back(0);
    len.push_back(static_cast<int32_t>(std::min<int64_t>(left, page_size)));
  }
  DevicePageTable table(alloc);
  table.upload({ids.data(), start.data(), len.data(), static_cast<int>(ids.size())}, num_pages, page_size);
  const int64_t keys = table.num_keys();

  // The same keys, same order, contiguous.
  Buffer kc(alloc, static_cast<size_t>(keys) * tok_bytes), vc(alloc, static_cast<size_t>(keys) * tok_bytes);
  int64_t at = 0;
  for (size_t e = 0; e < ids.size(); ++e) {
    const auto* page = static_cast<const unsigned char*>(pool.data()) + static_cast<size_t>(ids[e]) * 2 * page_size * tok_bytes;
    const size_t n = static_cast<size_t>(len[e]) * tok_bytes;
    auto* kd = static_cast<unsigned char*>(kc.data()) + static_cast<size_t>(at) * tok_bytes;
    auto* vd = static_cast<unsigned char*>(vc.data()) + static_cast<size_t>(at) * tok_bytes;
    LINGBOT_CUDA_CHECK(cudaMemcpy(kd, page + start[e] * tok_bytes, n, cudaMemcpyDeviceToDevice));
    LINGBOT_CUDA_CHECK(cudaMemcpy(vd, page + (page_size + start[e]) * tok_bytes, n, cudaMemcpyDeviceToDevice));
    at += len[e];
  }

  const size_t out_elems = static_cast<size_t>(c.queries) * row;
  Buffer q(alloc, out_elems * sizeof(float)), out_p(alloc, out_elems * sizeof(float)),
      out_c(alloc, out_elems * sizeof(float));
  fill_uniform(q.data(), DType::F32, static_cast<int64_t>(out_elems), -1, 1, c.seed + 7, nullptr);
  const kernels::QueryView qv{static_cast<const float*>(q.data()), c.queries, c.heads, c.head_dim, row};
  const kernels::PagePoolView pv{pool.data(), c.dtype, num_pages, page_size, c.heads, c.head_dim};
  const kernels::KVSpan contiguous{kc.data(), vc.data(), c.dtype, static_cast<int>(keys), row};
  CudaAttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.impl = c.impl;
  params.rows_per_warp = c.rows_per_warp;
  params.kv_splits = c.kv_splits;
  AttentionWorkspace workspace(alloc);
  params.workspace = &workspace;

  AttentionBenchResult r;
  r.impl = resolve_attention_impl(c.impl, c.dtype, c.head_dim);
  r.kv_splits = planned_kv_splits(c.queries, c.heads, c.head_dim, keys, c.dtype, params);
  r.keys = keys;
  auto paged = [&] { paged_attention(qv, pv, table, {}, static_cast<float*>(out_p.data()), params); };
  auto dense = [&] {
    dense_attention(qv, std::span<const kernels::KVSpan>(&contiguous, 1), static_cast<float*>(out_c.data()), params);
  };
  time_ms(2, paged);
  time_ms(2, dense);
  // Interleave two rounds so clock / thermal drift hits both sides alike.
  const int half = std::max(1, c.iterations / 2);
  r.paged_ms = time_ms(half, paged);
  r.contiguous_ms = time_ms(half, dense);
  r.paged_ms = 0.5 * (r.paged_ms + time_ms(half, paged));
  r.contiguous_ms = 0.5 * (r.contiguous_ms + time_ms(half, dense));

  const double flops = 4.0 * c.queries * static_cast<double>(keys) * row;
  const double bytes = 2.0 * static_cast<double>(keys) * static_cast<double>(tok_bytes);
  r.paged_tflops = flops / (r.paged_ms * 1e-3) / 1e12;
  r.contiguous_tflops = flops / (r.contiguous_ms * 1e-3) / 1e12;
  r.paged_gbps = bytes / (r.paged_ms * 1e-3) / 1e9;
  r.contiguous_gbps = bytes / (r.contiguous_ms * 1e-3) / 1e9;

  std::vector<float> a(out_elems), b(out_elems);
  LINGBOT_CUDA_CHECK(cudaMemcpy(a.data(), out_p.data(), out_elems * sizeof(float), cudaMemcpyDeviceToHost));
  LINGBOT_CUDA_CHECK(cudaMemcpy(b.data(), out_c.data(), out_elems * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < out_elems; ++i)
    r.max_abs_diff = std::max(r.max_abs_diff, static_cast<double>(std::fabs(a[i] - b[i])));
  if (std::any_of(a.begin(), a.end(), [](float x) { return !std::isfinite(x); })) r.max_abs_diff = INFINITY;
  return r;
}

std::vector<MemorySample> run_memory_study(const MemoryStudyConfig& c) {
  require_device("bench");
  LINGBOT_CHECK(c.frames > 8 && c.report_every > 0, "run_memory_study: need frames > 8 and report_every > 0");
  CudaAllocator alloc;
  CacheOptions o;
  o.num_blocks = c.num_blocks;
  o.heads = c.heads;
  o.head_dim = c.head_dim;
  o.tokens_per_frame = c.tokens_per_frame;
  o.dtype = c.dtype;
  CudaPagedKVCache cache(o, alloc);
  const int64_t row = int64_t{c.heads} * c.head_dim;
  const int64_t scale_tokens = int64_t{o.scale_frames} * c.tokens_per_frame;
  const size_t bytes = static_cast<size_t>(scale_tokens * row) * sizeof(float);
  Buffer q(alloc, bytes), k(alloc, bytes), v(alloc, bytes), out(alloc, bytes);
  fill_uniform(q.data(), DType::F32, scale_tokens * row, -1, 1, c.seed, nullptr);
  fill_uniform(k.data(), DType::F32, scale_tokens * row, -1, 1, c.seed + 1, nullptr);
  fill_uniform(v.data(), DType::F32, scale_tokens * row, -1, 1, c.seed + 2, nullptr);

  CudaAttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto step = [&](FrameMode mode, int n) {
    if (!c.attend) {
      bench::bookkeeping_step(cache, mode, n);
      return;
    }
    const int tokens = n * c.tokens_per_frame;
    const kernels::QueryView qv{static_cast<const float*>(q.data()), tokens, c.heads, c.head_dim, row};
    const kernels::KVSpan kv{k.data(), v.data(), DType::F32, tokens, row};
    cache.begin_step(mode, n);
    for (int b = 0; b < c.num_blocks; ++b) attention(qv, cache.store(b, kv), static_cast<float*>(out.data()), params);
    cache.end_step();
  };
  std::vector<MemorySample> samples;
  auto sample = [&](int64_t frame, double ms_per_frame) {
    LINGBOT_CUDA_CHECK(cudaDeviceSynchronize());
    size_t free_b = 0, total_b = 0;
    LINGBOT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const CacheStats s = cache.stats();
    samples.push_back({frame, s.patch_bytes_reserved, s.special_bytes_reserved,
                       static_cast<int64_t>(alloc.bytes_allocated()), static_cast<int64_t>(total_b - free_b),
                       s.visible_tokens, ms_per_frame});
  };
  step(FrameMode::ScalePhase, o.scale_frames);
  sample(o.scale_frames, 0);
  auto t0 = std::chrono::steady_clock::now();
  int64_t since = 0;
  for (int64_t f = o.scale_frames; f < c.frames; ++f) {
    step(FrameMode::Keyframe, 1);
    ++since;
    if ((f + 1) % c.report_every == 0 || f + 1 == c.frames) {
      LINGBOT_CUDA_CHECK(cudaDeviceSynchronize());
      const auto t1 = std::chrono::steady_clock::now();
      sample(f + 1, std::chrono::duration<double, std::milli>(t1 - t0).count() / static_cast<double>(since));
      t0 = std::chrono::steady_clock::now();
      since = 0;
    }
  }
  return samples;
}

}  // namespace lingbot::cuda
