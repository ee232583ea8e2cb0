// Paged / dense attention throughput, with an OpenBLAS sgemm of comparable size as the yardstick.
// FLOPs counted as 4 * n_q * n_k * head_dim * heads (QK^T and PV, multiply+add each).
//
//   build/bench/bench_attention_bench --benchmark_filter='BM_Paged/.*frames:72/patches:256'
//                                      (streaming 224 shape: 262 queries, ~19k keys)
// Read GFLOP/s from the "FLOPS" counter; compare with BM_Sgemm at the same thread count.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "lingbot/dtype.h"

using namespace lingbot;
using namespace lingbot::kernels;

namespace {

// The streaming layout of the model: per cached frame one page of patch tokens (page_size slots,
// `patches` used), specials packed in pages of their own, plus the current frame as an extra span.
struct PagedSetup {
  int heads, head_dim, n_q, patches, specials, frames, page_size;
  DType dtype;
  std::vector<uint16_t> pool;  // raw storage (f32 uses two halves per value)
  std::vector<float> q, self_kv, out;
  std::vector<int32_t> ids, start, len;
  int num_pages = 0;
  int64_t n_keys = 0;

  PagedSetup(int heads_, int d, int patches_, int specials_, int frames_, DType dt)
      : heads(heads_), head_dim(d), n_q(patches_ + specials_), patches(patches_), specials(specials_),
        frames(frames_), dtype(dt) {
    page_size = 1;
    while (page_size < patches) page_size *= 2;  // pow2 pages with padding, as a GPU layout would use
    const int64_t row = static_cast<int64_t>(heads) * head_dim;
    const int special_pages = (frames * specials + page_size - 1) / page_size;
    num_pages = frames + special_pages;
    const size_t elems = static_cast<size_t>(num_pages) * 2 * page_size * row;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> tmp(elems);
    for (auto& x : tmp) x = u(rng);
    pool.resize(elems * dtype_size(dt) / 2);
    convert_from_f32(tmp.data(), pool.data(), dt, elems);
    // Specials first (they come first in attention order in the model), then the frames' patches.
    int remaining = frames * specials;
    for (int p = 0; p < special_pages; ++p) {
      ids.push_back(frames + p);
      start.push_back(0);
      len.push_back(std::min(remaining, page_size));
      remaining -= len.back();
    }
    for (int f = 0; f < frames; ++f) {
      ids.push_back(f);
      start.push_back(0);
      len.push_back(patches);
    }
    q.resize(static_cast<size_t>(n_q) * row);
    for (auto& x : q) x = u(rng);
    self_kv.resize(static_cast<size_t>(n_q) * row);
    for (auto& x : self_kv) x = u(rng);
    out.resize(q.size());
    n_keys = static_cast<int64_t>(frames) * (patches + specials) + n_q;
  }

  void run(int threads) {
    const int64_t row = static_cast<int64_t>(heads) * head_dim;
    const KVSpan self{self_kv.data(), self_kv.data(), DType::F32, n_q, row};
    paged_attention({q.data(), n_q, heads, head_dim, row}, {pool.data(), dtype, num_pages, page_size, heads, head_dim},
                    {ids.data(), start.data(), len.data(), static_cast<int>(ids.size())}, {&self, 1}, out.data(),
                    {1.f / std::sqrt(static_cast<float>(head_dim)), threads});
  }
  double flops() const { return 4.0 * n_q * static_cast<double>(n_keys) * head_dim * heads; }
};

// Args: dtype, threads, frames, patches, head_dim, heads
void BM_Paged(benchmark::State& state) {
  const auto dt = static_cast<DType>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  PagedSetup s(static_cast<int>(state.range(5)), static_cast<int>(state.range(4)), static_cast<int>(state.range(3)), 6,
               static_cast<int>(state.range(2)), dt);
  for (auto _ : state) {
    s.run(threads);
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] = benchmark::Counter(s.flops(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["keys"] = static_cast<double>(s.n_keys);
  state.SetLabel(std::string(dtype_name(dt)));
}

// Dense attention over one contiguous span (intra-frame attention of the 518 shape).
void BM_Dense(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1)), heads = 16, d = 64;
  const int64_t row = heads * d;
  std::vector<float> q(n * row), kv(n * row), out(n * row);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : q) x = u(rng);
  for (auto& x : kv) x = u(rng);
  const KVSpan span{kv.data(), kv.data(), DType::F32, n, row};
  for (auto _ : state) {
    dense_attention({q.data(), n, heads, d, row}, {&span, 1}, out.data(), {0.125f, threads});
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(4.0 * n * static_cast<double>(n) * d * heads, benchmark::Counter::kIsIterationInvariantRate);
}

// Reference: C[M,N] = A[M,K] * B[N,K]^T, the QK^T product of one head (same FLOP count 2*M*N*K).
void BM_Sgemm(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1)), n = static_cast<int>(state.range(2)),
            k = static_cast<int>(state.range(3));
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(n) * k, 0.25f),
      c(static_cast<size_t>(m) * n);
  // The library's GEMMs call OpenBLAS single-threaded inside their own OpenMP tiles and set it to one
  // thread for the whole process (kernels::linear); this baseline sets its own count per run.
  openblas_set_num_threads(threads);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * m * static_cast<double>(n) * k, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(openblas_get_corename());
}

}  // namespace

// Single-thread runs report CPU time (robust on a shared machine); multi-thread runs real time.
void paged_args(benchmark::internal::Benchmark* b, int threads) {
  b->ArgNames({"dtype", "thr", "frames", "patches", "d", "heads"});
  // 224 streaming shape: 256 patches + 6 specials, 72 cached frames, 16 heads x 64 -> ~19k keys.
  for (int dt = 0; dt < 3; ++dt) b->Args({dt, threads, 72, 256, 64, 16});
  // 518 shape: 999 patches + 6 specials (1005 queries), 16 cached frames (pages of 1024 slots).
  for (int dt = 0; dt < 3; ++dt) b->Args({dt, threads, 16, 999, 64, 16});
  // head_dim 128, 8 heads (same model width).
  b->Args({0, threads, 72, 256, 128, 8});
  b->Unit(benchmark::kMillisecond);
}
void dense_args(benchmark::internal::Benchmark* b, int threads) {
  b->ArgNames({"thr", "n"})->Args({threads, 1005})->Unit(benchmark::kMillisecond);
}
// sgemm the size of one head's QK^T at the 224 and 518 shapes, and a square one.
void sgemm_args(benchmark::internal::Benchmark* b, int threads) {
  b->ArgNames({"thr", "m", "n", "k"});
  b->Args({threads, 262, 19126, 64})->Args({threads, 1005, 17101, 64})->Args({threads, 1024, 1024, 1024});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Paged)->Apply([](auto* b) { paged_args(b, 1); });
BENCHMARK(BM_Paged)->Apply([](auto* b) { paged_args(b, 2); })->UseRealTime();
BENCHMARK(BM_Dense)->Apply([](auto* b) { dense_args(b, 1); });
BENCHMARK(BM_Dense)->Apply([](auto* b) { dense_args(b, 2); })->UseRealTime();
BENCHMARK(BM_Sgemm)->Apply([](auto* b) { sgemm_args(b, 1); });
BENCHMARK(BM_Sgemm)->Apply([](auto* b) { sgemm_args(b, 2); })->UseRealTime();

BENCHMARK_MAIN();
