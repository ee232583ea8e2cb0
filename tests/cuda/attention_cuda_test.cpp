// CUDA paged / dense attention against the CPU kernels (kernels/cpu/attention.h) on the same random
// pages, tables and spans, every dtype; all slots no entry covers hold NaN, so a kernel that reads
// padding produces NaN and fails.
//
// Tolerances (|cuda - cpu| <= tol * max(1, |cpu|)):
//   Simt kernel (f32 math like the CPU's f32 path, AttentionCompute::F32, which every reference here uses;
//   different summation order and exp2): 5e-5.
//   Tensor-core kernel: q * scale * log2(e) is rounded to the K/V dtype for Q·K^T and the
//   probabilities to it for P·V (f32 accumulation, sums of the rounded P), so the error is of the
//   order of that dtype's rounding on O(1) data: one unit of the dtype at 1, f16 2^-11, bf16 2^-8
//   (attention_tolerance in cuda_test_util.h says why).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_cuda.h"
#include "lingbot/dtype.h"

using namespace lingbot;
using namespace lingbot::cuda;
using namespace lingbot::cuda::testing;
namespace k = lingbot::kernels;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Values of one dtype in host memory, initialised to `fill` (NaN for garbage).
struct HostStore {
  DType dtype;
  std::vector<unsigned char> bytes;
  HostStore(DType t, size_t n, float fill) : dtype(t), bytes(n * dtype_size(t)) {
    for (size_t i = 0; i < n; ++i) set(i, fill);
  }
  void set(size_t i, float x) { convert_from_f32(&x, bytes.data() + i * dtype_size(dtype), dtype, 1); }
  size_t size() const { return bytes.size(); }
};

struct Span {
  HostStore k, v;
  int n;
  int64_t stride;
};

// One random problem: queries, a pool with shuffled partially covered pages, extra spans.
struct Problem {
  int heads, d, n_q, page_size, num_pages;
  int64_t q_stride;
  DType dtype;
  std::vector<float> q;
  HostStore pool;
  std::vector<int32_t> ids, start, len;
  std::vector<Span> spans;

  k::QueryView query(const float* data) const { return {data, n_q, heads, d, q_stride}; }
  k::PagePoolView pool_view(const void* data) const { return {data, dtype, num_pages, page_size, heads, d}; }
  k::PageTableView table() const { return {ids.data(), start.data(), len.data(), static_cast<int>(ids.size())}; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
};

Problem make_problem(std::mt19937& rng, int heads, int d, int n_q, int page_size, int n_entries, int n_spans,
                     DType dtype, bool full_pages = false) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t row = static_cast<int64_t>(heads) * d;
  const int num_pages = n_entries + 2;  // some pages are never referenced (all NaN)
  Problem p{heads, d, n_q, page_size, num_pages, row + (rng() % 2 ? 0 : 3), dtype, {},
            HostStore(dtype, static_cast<size_t>(num_pages) * 2 * page_size * row, nan), {}, {}, {}, {}};
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  p.q.assign(static_cast<size_t>(std::max<int64_t>(1, n_q * p.q_stride)), nan);  // stride padding is NaN too
  for (int t = 0; t < n_q; ++t)
    for (int64_t i = 0; i < row; ++i) p.q[t * p.q_stride + i] = 2.f * u(rng);
  std::vector<int32_t> order(num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int e = 0; e < n_entries; ++e) {
    const int page = order[e];
    const int s = full_pages ? 0 : static_cast<int>(rng() % page_size);
    const int l = full_pages ? page_size : static_cast<int>(rng() % (page_size - s + 1));
    p.ids.push_back(page);
    p.start.push_back(s);
    p.len.push_back(l);
    for (int t = s; t < s + l; ++t) {
      const size_t kb = ((static_cast<size_t>(page) * 2 + 0) * page_size + t) * row;
      const size_t vb = ((static_cast<size_t>(page) * 2 + 1) * page_size + t) * row;
      for (int64_t i = 0; i < row; ++i) {
        p.pool.set(kb + i, u(rng));
        p.pool.set(vb + i, u(rng));
      }
    }
  }
  for (int si = 0; si < n_spans; ++si) {
    const int n = static_cast<int>(rng() % 70);
    const int64_t stride = row + (rng() % 2 ? 0 : 5);  // odd padding: exercises unaligned loads
    const size_t total = static_cast<size_t>(std::max<int64_t>(1, n * stride));
    Span sp{HostStore(dtype, total, nan), HostStore(dtype, total, nan), n, stride};
    for (int t = 0; t < n; ++t)
      for (int64_t i = 0; i < row; ++i) {
        sp.k.set(t * stride + i, u(rng));
        sp.v.set(t * stride + i, u(rng));
      }
    p.spans.push_back(std::move(sp));
  }
  return p;
}

int64_t visible_keys(const Problem& p) {
  int64_t n = std::accumulate(p.len.begin(), p.len.end(), int64_t{0});
  for (const auto& s : p.spans) n += s.n;
  return n;
}

std::vector<float> cpu_reference(const Problem& p) {
  std::vector<float> out(static_cast<size_t>(p.n_q) * p.heads * p.d);
  std::vector<k::KVSpan> extra;
  for (const auto& s : p.spans) extra.push_back({s.k.bytes.data(), s.v.bytes.data(), p.dtype, s.n, s.stride});
  k::AttentionParams params;
  params.scale = p.scale();
  params.num_threads = 2;
  params.compute = k::AttentionCompute::F32;  // the CUDA kernels' math (the CPU's bf16 path rounds Q)
  k::paged_attention(p.query(p.q.data()), p.pool_view(p.pool.bytes.data()), p.table(), extra, out.data(), params);
  return out;
}

// The problem's arrays in device memory.
struct DeviceProblem {
  Buffer q, pool, out;
  std::vector<Buffer> span_k, span_v;
  DevicePageTable table;
  std::vector<k::KVSpan> extra;

  DeviceProblem(Allocator& alloc, const Problem& p)
      : q(to_device(alloc, p.q.data(), p.q.size() * sizeof(float))),
        pool(to_device(alloc, p.pool.bytes.data(), p.pool.size())),
        out(alloc, static_cast<size_t>(std::max(1, p.n_q)) * p.heads * p.d * sizeof(float)),
        table(alloc) {
    for (const auto& s : p.spans) {
      span_k.push_back(to_device(alloc, s.k.bytes.data(), s.k.size()));
      span_v.push_back(to_device(alloc, s.v.bytes.data(), s.v.size()));
      extra.push_back({span_k.back().data(), span_v.back().data(), p.dtype, s.n, s.stride});
    }
    table.upload(p.table(), p.num_pages, p.page_size);
  }

  std::vector<float> run(const Problem& p, AttentionImpl impl, int rows_per_warp = 0, int kv_splits = 1,
                         AttentionWorkspace* workspace = nullptr) {
    LINGBOT_CUDA_CHECK(cudaMemset(out.data(), 0xff, out.bytes()));  // NaN: every output must be written
    CudaAttentionParams params;
    params.scale = p.scale();
    params.impl = impl;
    params.rows_per_warp = rows_per_warp;
    params.kv_splits = kv_splits;
    params.workspace = workspace;
    lingbot::cuda::paged_attention(p.query(static_cast<const float*>(q.data())), p.pool_view(pool.data()), table, extra,
                    static_cast<float*>(out.data()), params);
    LINGBOT_CUDA_CHECK(cudaDeviceSynchronize());
    return to_host<float>(out.data(), static_cast<size_t>(p.n_q) * p.heads * p.d);
  }
};

std::vector<AttentionImpl> impls_for(DType dt, int d) {
  std::vector<AttentionImpl> v{AttentionImpl::Simt};
  if (dt != DType::F32 && d == 64) v.push_back(AttentionImpl::TensorCore);
  return v;
}

std::string describe(const Problem& p, AttentionImpl impl) {
  return detail::concat(attention_impl_name(impl), " ", dtype_name(p.dtype), " heads=", p.heads, " d=", p.d,
                        " n_q=", p.n_q, " page_size=", p.page_size, " entries=", p.ids.size(),
                        " spans=", p.spans.size(), " keys=", visible_keys(p));
}

void check_problem(const Problem& p) {
  if (visible_keys(p) == 0) return;
  CudaAllocator alloc;
  DeviceProblem dev(alloc, p);
  const std::vector<float> ref = cpu_reference(p);
  for (AttentionImpl impl : impls_for(p.dtype, p.d)) {
    if (impl == AttentionImpl::TensorCore) {
      for (int rows : {16, 32})  // both shapes of the tensor-core kernel
        expect_close(dev.run(p, impl, rows), ref, attention_tolerance(impl, p.dtype),
                     describe(p, impl) + " rows_per_warp=" + std::to_string(rows));
      continue;
    }
    expect_close(dev.run(p, impl), ref, attention_tolerance(impl, p.dtype), describe(p, impl));
  }
}

const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};

}  // namespace

TEST(CudaAttention, RandomPagedProblemsMatchCpuAllDtypes) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(1234);
  const int dims[] = {8, 16, 40, 64, 64, 96, 128};
  for (DType dt : kDtypes) {
    for (int trial = 0; trial < 14; ++trial) {
      const int d = dims[trial % 7];
      const int heads = 1 + static_cast<int>(rng() % 4);
      const int n_q = 1 + static_cast<int>(rng() % 150);
      const int page_size = 1 + static_cast<int>(rng() % 100);
      const int entries = static_cast<int>(rng() % 6);
      const int spans = static_cast<int>(rng() % 3);
      const Problem p = make_problem(rng, heads, d, n_q, page_size, entries, spans, dt);
      SCOPED_TRACE(describe(p, AttentionImpl::Auto));
      check_problem(p);
    }
  }
}

// The streaming shape, scaled down for the CPU reference: 262 queries (one 6+256-token frame) against
// 4 full patch pages, a partial special page and the frame's own tokens, 16 heads of 64 (4 under
// the host emulation).
TEST(CudaAttention, StreamingShapeMatchesCpu) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(7);
  const int heads = emulated_device() ? 4 : 16;
  for (DType dt : kDtypes) {
    Problem p = make_problem(rng, heads, 64, 262, 262, 4, 0, dt, /*full_pages=*/true);
    // A special page holding 5 frames' specials, then the frame's own tokens as an extra span.
    int special = 0;
    while (std::find(p.ids.begin(), p.ids.end(), special) != p.ids.end()) ++special;
    p.ids.push_back(special);
    p.start.push_back(0);
    p.len.push_back(30);
    const int64_t row = heads * 64;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int t = 0; t < 30; ++t)
      for (int64_t i = 0; i < row; ++i) {
        p.pool.set(((static_cast<size_t>(special) * 2 + 0) * p.page_size + t) * row + i, u(rng));
        p.pool.set(((static_cast<size_t>(special) * 2 + 1) * p.page_size + t) * row + i, u(rng));
      }
    Span own{HostStore(dt, 262 * row, 0.f), HostStore(dt, 262 * row, 0.f), 262, row};
    for (int64_t i = 0; i < 262 * row; ++i) {
      own.k.set(i, u(rng));
      own.v.set(i, u(rng));
    }
    p.spans.push_back(std::move(own));
    SCOPED_TRACE(describe(p, AttentionImpl::Auto));
    check_problem(p);
  }
}

// At most 8 query rows take the decode kernel (keys split over a block's 128 threads, partial
// softmaxes merged): many keys, and fewer keys than threads (threads that see none); 9 rows take the
// row-per-thread kernel. Same tolerance as the SIMT kernel.
TEST(CudaAttention, FewQueriesSplitTheKeysOverABlock) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(13);
  for (DType dt : kDtypes)
    for (int d : {40, 64, 128})
      for (int n_q : {1, 2, 8, 9}) {
        const Problem many = make_problem(rng, 3, d, n_q, 100, 6, 2, dt);
        SCOPED_TRACE(describe(many, AttentionImpl::Simt));
        check_problem(many);
        const Problem few = make_problem(rng, 2, d, n_q, 8, 1, 0, dt, /*full_pages=*/true);  // 8 keys
        SCOPED_TRACE(describe(few, AttentionImpl::Simt));
        check_problem(few);
      }
}

// Several frames of queries at once (scale phase) and pages rounded up to a power of two: the
// padding slots of every page (not only the last) are NaN and must stay unread.
TEST(CudaAttention, ScalePhaseWithPow2PaddedPagesMatchesCpu) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(99);
  for (DType dt : kDtypes) {
    Problem p = make_problem(rng, 4, 64, 3 * 70, 128, 4, 0, dt);
    const int64_t row = 4 * 64;
    p.ids.clear();
    p.start.clear();
    p.len.clear();
    p.pool = HostStore(dt, p.pool.size() / dtype_size(dt), std::numeric_limits<float>::quiet_NaN());
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int page = 0; page < p.num_pages; ++page) {  // 70 live slots per 128-slot page
      p.ids.push_back(page);
      p.start.push_back(0);
      p.len.push_back(70);
      for (int t = 0; t < 70; ++t)
        for (int64_t i = 0; i < row; ++i) {
          p.pool.set(((static_cast<size_t>(page) * 2 + 0) * 128 + t) * row + i, u(rng));
          p.pool.set(((static_cast<size_t>(page) * 2 + 1) * 128 + t) * row + i, u(rng));
        }
    }
    SCOPED_TRACE(describe(p, AttentionImpl::Auto));
    check_problem(p);
  }
}

// One page table, uploaded once, serves several blocks' pools (as in a frame step).
TEST(CudaAttention, OnePageTableServesEveryBlock) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(5);
  CudaAllocator alloc;
  const Problem p = make_problem(rng, 2, 64, 40, 33, 4, 1, DType::F16);
  if (visible_keys(p) == 0) GTEST_SKIP() << "random problem has no keys";
  DeviceProblem dev(alloc, p);
  const uint64_t allocations = alloc.allocation_count();
  const int64_t row = 2 * 64;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int block = 0; block < 3; ++block) {
    Problem pb = p;  // same geometry and table, fresh K/V in the covered slots
    for (size_t e = 0; e < pb.ids.size(); ++e)
      for (int t = pb.start[e]; t < pb.start[e] + pb.len[e]; ++t)
        for (int64_t i = 0; i < row; ++i) {
          pb.pool.set(((static_cast<size_t>(pb.ids[e]) * 2 + 0) * pb.page_size + t) * row + i, u(rng));
          pb.pool.set(((static_cast<size_t>(pb.ids[e]) * 2 + 1) * pb.page_size + t) * row + i, u(rng));
        }
    dev.pool = to_device(alloc, pb.pool.bytes.data(), pb.pool.size());
    const std::vector<float> ref = cpu_reference(pb);
    for (AttentionImpl impl : impls_for(pb.dtype, pb.d))
      expect_close(dev.run(pb, impl), ref, attention_tolerance(impl, pb.dtype), describe(pb, impl));
  }
  EXPECT_EQ(alloc.allocation_count(), allocations + 3);  // only the three pools, no per-call allocation
}

TEST(CudaAttention, ResultsAreBitwiseReproducible) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  CudaAllocator alloc;
  const Problem p = make_problem(rng, 3, 64, 100, 50, 5, 2, DType::BF16);
  if (visible_keys(p) == 0) GTEST_SKIP() << "random problem has no keys";
  DeviceProblem dev(alloc, p);
  for (AttentionImpl impl : impls_for(p.dtype, p.d)) {
    const std::vector<float> a = dev.run(p, impl), b = dev.run(p, impl);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << attention_impl_name(impl);
  }
  // 32 rows per warp runs every row's instructions of the 16-row kernel, interleaved: same bits.
  const std::vector<float> r16 = dev.run(p, AttentionImpl::TensorCore, 16),
                           r32 = dev.run(p, AttentionImpl::TensorCore, 32);
  EXPECT_EQ(std::memcmp(r16.data(), r32.data(), r16.size() * sizeof(float)), 0);
  EXPECT_EQ(error_of([&] { dev.run(p, AttentionImpl::TensorCore, 24); }),
            "paged_attention: rows_per_warp must be 0 (default), 16 or 32, got 24");
  // With the keys split, too: each range's partial state is the same, and so is the merge.
  AttentionWorkspace ws(alloc);
  const std::vector<float> s16 = dev.run(p, AttentionImpl::TensorCore, 16, 3, &ws),
                           s32 = dev.run(p, AttentionImpl::TensorCore, 32, 3, &ws);
  EXPECT_EQ(std::memcmp(s16.data(), s32.data(), s16.size() * sizeof(float)), 0);
}

// Split keys (CudaAttentionParams::kv_splits): ranges that cut tiles and segments anywhere (pages of
// odd lengths, unaligned extra spans), more ranges than keys (clamped, none empty), both tile
// shapes. Against the CPU at the tensor-core tolerance, and against the unsplit kernel at f32
// rounding (only the final normalisation and the merge's rescaling differ): 1e-5.
TEST(CudaAttention, SplitKeysMatchTheCpuAndTheUnsplitKernel) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(31);
  CudaAllocator alloc;
  AttentionWorkspace ws(alloc);
  for (DType dt : {DType::F16, DType::BF16}) {
    const Problem problems[] = {make_problem(rng, 2, 64, 70, 37, 5, 2, dt),
                                make_problem(rng, 1, 64, 20, 3, 1, 0, dt, /*full_pages=*/true)};  // 3 keys
    for (const Problem& p : problems) {
      if (visible_keys(p) == 0) continue;
      DeviceProblem dev(alloc, p);
      const std::vector<float> ref = cpu_reference(p);
      for (int rows : {16, 32}) {
        const std::vector<float> unsplit = dev.run(p, AttentionImpl::TensorCore, rows, 1);
        for (int splits : {2, 3, 7, kMaxKvSplits}) {
          const std::string what = describe(p, AttentionImpl::TensorCore) + " rows_per_warp=" + std::to_string(rows) +
                                   " kv_splits=" + std::to_string(splits);
          const std::vector<float> got = dev.run(p, AttentionImpl::TensorCore, rows, splits, &ws);
          expect_close(got, ref, attention_tolerance(AttentionImpl::TensorCore, dt), what);
          // The ranges round their probabilities to the K/V dtype against their own running max, not
          // the whole row's, so split and unsplit differ by rounding: at most one unit (u = 2^-11
          // f16, 2^-8 bf16) times max|v| (1 here); a wrong merge weight is off by O(0.1).
          expect_close(got, unsplit, dt == DType::F16 ? 0x1p-11 : 0x1p-8, what + " vs unsplit");
        }
      }
    }
  }
}

// Auto splits fill one wave of the (emulated: 132 SMs x 2 blocks) device: a 40-row, 2-head grid is
// 2 blocks, so the 4500 keys are cut into 4 ranges of >= kMinKeysPerSplit (the workspace holds 4
// ranges' states); without a workspace Auto runs one range. Both match the CPU.
TEST(CudaAttention, AutoSplitsTheKeysOfASmallGrid) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(41);
  CudaAllocator alloc;
  Problem p = make_problem(rng, 2, 64, 40, 900, 5, 0, DType::BF16, /*full_pages=*/true);
  ASSERT_EQ(visible_keys(p), 4500);
  DeviceProblem dev(alloc, p);
  const std::vector<float> ref = cpu_reference(p);
  AttentionWorkspace ws(alloc);
  expect_close(dev.run(p, AttentionImpl::Auto, 0, 0, &ws), ref, attention_tolerance(AttentionImpl::TensorCore, p.dtype),
               "auto splits");
  if (!emulated_device()) return;  // a real device's SM count and occupancy decide the count
  EXPECT_EQ(ws.capacity_floats(), int64_t{4} * 40 * 2 * (64 + 2));
  AttentionWorkspace unused(alloc);
  expect_close(dev.run(p, AttentionImpl::Auto, 0, 0, nullptr), ref, attention_tolerance(AttentionImpl::TensorCore, p.dtype),
               "auto without a workspace");
  EXPECT_EQ(unused.capacity_floats(), 0);
  EXPECT_EQ(error_of([&] { dev.run(p, AttentionImpl::TensorCore, 0, 2, nullptr); }),
            "paged_attention: kv_splits 2 needs a workspace (CudaAttentionParams::workspace) for the partial results");
  EXPECT_EQ(error_of([&] { dev.run(p, AttentionImpl::TensorCore, 0, kMaxKvSplits + 1, &ws); }),
            "paged_attention: kv_splits must be 0 (auto) to 16, got 17");
}

// The tensor-core kernel's softmax denominator sums the probabilities it multiplies V by (rounded to
// the K/V dtype), as the CPU's bf16 kernel does: each output row is a convex combination of V rows, so
// a V that is the same in every key comes out exactly (to f32 rounding). The denominator summed the
// unrounded probabilities: outputs off by up to the dtype's rounding, a bias that does not average out.
TEST(CudaAttention, TensorCoreWeightsSumToTheirDenominator) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(57);
  CudaAllocator alloc;
  for (const DType dt : {DType::BF16, DType::F16}) {
    Problem p = make_problem(rng, 2, 64, 40, 16, 6, 1, dt);
    const int64_t row = int64_t{p.heads} * p.d;
    const auto same_v = [&](int64_t i) { return 0.5f + static_cast<float>(i % 32) / 64.0f; };  // exact in both
    for (size_t e = 0; e < p.ids.size(); ++e)
      for (int t = p.start[e]; t < p.start[e] + p.len[e]; ++t)
        for (int64_t i = 0; i < row; ++i)
          p.pool.set(((static_cast<size_t>(p.ids[e]) * 2 + 1) * p.page_size + t) * row + i, same_v(i));
    for (Span& s : p.spans)
      for (int t = 0; t < s.n; ++t)
        for (int64_t i = 0; i < row; ++i) s.v.set(t * s.stride + i, same_v(i));
    for (float& x : p.q) x *= 4.0f;  // peaked weights: few keys carry the row, their rounding shows
    DeviceProblem dev(alloc, p);
    AttentionWorkspace ws(alloc);
    for (const int splits : {1, 2}) {
      const std::vector<float> out = dev.run(p, AttentionImpl::TensorCore, 0, splits, &ws);
      float worst = 0;
      for (int q = 0; q < p.n_q; ++q)
        for (int64_t i = 0; i < row; ++i) worst = std::max(worst, std::fabs(out[q * row + i] - same_v(i)) / same_v(i));
      EXPECT_LE(worst, 1e-5f) << dtype_name(dt) << ", " << splits << " key ranges";
    }
  }
}

// A workspace whose growth failed (out of device memory) holds nothing: a later, smaller request
// allocates again. It returned a null pointer for it (the old capacity was kept), which the kernel
// would have written through.
TEST(CudaAttention, AWorkspaceWhoseGrowthFailedAllocatesAgain) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  struct FailingOnce final : Allocator {
    CudaAllocator inner;
    bool fail_next = false;
    void* allocate(size_t bytes) override {
      if (fail_next) {
        fail_next = false;
        throw Error("out of device memory (test)");
      }
      return inner.allocate(bytes);
    }
    void deallocate(void* p, size_t bytes) noexcept override { inner.deallocate(p, bytes); }
    MemoryKind kind() const override { return inner.kind(); }
    size_t bytes_allocated() const override { return inner.bytes_allocated(); }
    uint64_t allocation_count() const override { return inner.allocation_count(); }
  } alloc;
  AttentionWorkspace ws(alloc);
  ASSERT_NE(ws.reserve(1000), nullptr);
  alloc.fail_next = true;
  EXPECT_EQ(error_of([&] { ws.reserve(4000); }), "out of device memory (test)");
  EXPECT_EQ(ws.capacity_floats(), 0);
  EXPECT_NE(ws.reserve(500), nullptr);
  EXPECT_EQ(ws.capacity_floats(), 500);
}

TEST(CudaAttention, DenseMatchesCpuDense) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(21);
  CudaAllocator alloc;
  for (DType dt : kDtypes) {
    for (int d : {32, 64}) {
      Problem p = make_problem(rng, 2, d, 77, 1, 0, 3, dt);
      if (visible_keys(p) == 0) continue;
      std::vector<k::KVSpan> host_kv;
      for (const auto& s : p.spans) host_kv.push_back({s.k.bytes.data(), s.v.bytes.data(), dt, s.n, s.stride});
      std::vector<float> ref(static_cast<size_t>(p.n_q) * p.heads * p.d);
      k::AttentionParams cp;
      cp.scale = p.scale();
      cp.compute = k::AttentionCompute::F32;
      k::dense_attention(p.query(p.q.data()), host_kv, ref.data(), cp);
      DeviceProblem dev(alloc, p);
      for (AttentionImpl impl : impls_for(dt, d)) {
        CudaAttentionParams params;
        params.scale = p.scale();
        params.impl = impl;
        lingbot::cuda::dense_attention(p.query(static_cast<const float*>(dev.q.data())), dev.extra,
                        static_cast<float*>(dev.out.data()), params);
        const auto got = to_host<float>(dev.out.data(), ref.size());
        expect_close(got, ref, attention_tolerance(impl, dt), describe(p, impl) + " dense");
      }
    }
  }
}

// ---- Input validation (runs without a device: every check precedes the first CUDA call) ----


TEST(CudaAttentionValidation, PageTableUploadChecksEntriesLikeTheCpuKernel) {
  CudaAllocator alloc;
  DevicePageTable table(alloc);
  const int32_t ids[] = {0, 3}, start[] = {0, 2}, len[] = {4, 3};
  const k::PageTableView bad_page{ids, start, len, 2};
  EXPECT_EQ(error_of([&] { table.upload(bad_page, 3, 8); }),
            "paged_attention: page table entry 1: page id 3 out of range [0, 3)");
  EXPECT_EQ(error_of([&] { table.upload(bad_page, 4, 4); }),
            "paged_attention: page table entry 1: slots [2, 5) out of page bounds [0, 4)");
  const int32_t neg[] = {0, -1};
  EXPECT_EQ(error_of([&] { table.upload({ids, start, neg, 2}, 4, 8); }),
            "paged_attention: page table entry 1: negative len -1");
  EXPECT_EQ(error_of([&] { table.upload({nullptr, start, len, 2}, 4, 8); }),
            "paged_attention: page table arrays are null with num_entries = 2");
  EXPECT_EQ(error_of([&] { table.upload({ids, start, len, 2}, 4, 0); }),
            "paged_attention: page pool page_size must be > 0, got 0");
  EXPECT_EQ(alloc.allocation_count(), 0u);
}

TEST(CudaAttentionValidation, DevicePageTableNeedsADeviceAllocator) {
  HostAllocator host;
  EXPECT_EQ(error_of([&] { DevicePageTable t(host); }), "DevicePageTable: the allocator must allocate device memory");
  EXPECT_EQ(error_of([&] { AttentionWorkspace w(host); }),
            "AttentionWorkspace: the allocator must allocate device memory");
}

// Auto's key splits: as many ranges as still fit one wave, each of >= kMinKeysPerSplit keys, 1..16.
TEST(CudaAttentionValidation, ChooseKvSplitsFillsOneWave) {
  EXPECT_EQ(choose_kv_splits(256, 4 * 132, 72360), 2);  // 16-row tiles, streaming shape, 4 blocks per SM
  EXPECT_EQ(choose_kv_splits(128, 2 * 132, 72360), 2);  // 32-row tiles, 2 blocks per SM
  EXPECT_EQ(choose_kv_splits(256, 2 * 132, 72360), 1);  // already a wave: a second range would start a second
  EXPECT_EQ(choose_kv_splits(2016, 4 * 132, 72360), 1);  // 8 frames of queries (scale phase)
  EXPECT_EQ(choose_kv_splits(2, 264, 4500), 4);          // limited by the keys: 4 x 1125
  EXPECT_EQ(choose_kv_splits(2, 264, 1023), 1);
  EXPECT_EQ(choose_kv_splits(1, 1000, 1 << 24), kMaxKvSplits);
  EXPECT_EQ(choose_kv_splits(0, 264, 4500), 1);
  EXPECT_EQ(choose_kv_splits(16, 264, 0), 1);
}

TEST(CudaAttentionValidation, QueryChecksMatchTheCpuKernel) {
  CudaAllocator alloc;
  DevicePageTable table(alloc);
  float dummy = 0;
  const k::PagePoolView pool{};
  EXPECT_EQ(error_of([&] { lingbot::cuda::paged_attention({&dummy, 1, 0, 64, 64}, pool, table, {}, &dummy, {}); }),
            "paged_attention: query heads must be > 0, got 0");
  EXPECT_EQ(error_of([&] { lingbot::cuda::paged_attention({&dummy, 1, 2, 160, 320}, pool, table, {}, &dummy, {}); }),
            "paged_attention: query head_dim 160 exceeds the CUDA kernels' maximum 128");
  EXPECT_EQ(error_of([&] { lingbot::cuda::dense_attention({&dummy, 1, 2, 64, 100}, {}, &dummy, {}); }),
            "dense_attention: query token_stride 100 is smaller than heads*head_dim = 128");
  EXPECT_EQ(error_of([&] { lingbot::cuda::dense_attention({nullptr, 1, 2, 64, 128}, {}, &dummy, {}); }),
            "dense_attention: query data is null with n_tokens = 1");
  if (!have_cuda_device()) {  // host pointers are refused before any launch
    EXPECT_EQ(error_of([&] { lingbot::cuda::dense_attention({&dummy, 1, 1, 1, 1}, {}, &dummy, {}); }),
              "dense_attention: query data is not CUDA device memory");
  }
}

TEST(CudaAttentionValidation, ImplNamesRoundTrip) {
  for (AttentionImpl i : {AttentionImpl::Auto, AttentionImpl::Simt, AttentionImpl::TensorCore})
    EXPECT_EQ(parse_attention_impl(attention_impl_name(i)), i);
  EXPECT_EQ(error_of([] { parse_attention_impl("wgmma"); }),
            "unknown CUDA attention kernel 'wgmma' (expected auto, simt or tensor-core)");
}

TEST(CudaAttention, ErrorsOnDeviceInputs) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  CudaAllocator alloc;
  Buffer q(alloc, 64 * sizeof(float)), out(alloc, 64 * sizeof(float)), kv(alloc, 64 * sizeof(float));
  const k::QueryView qv{static_cast<const float*>(q.data()), 1, 1, 64, 64};
  float* o = static_cast<float*>(out.data());
  DevicePageTable table(alloc);
  EXPECT_EQ(error_of([&] { lingbot::cuda::dense_attention(qv, {}, o, {}); }), "dense_attention: no visible keys (kv spans are empty)");
  EXPECT_EQ(error_of([&] { lingbot::cuda::paged_attention(qv, {}, table, {}, o, {}); }),
            "paged_attention: no visible keys (page table and extra spans are empty)");
  const k::KVSpan spans[] = {{kv.data(), kv.data(), DType::F16, 1, 64}, {kv.data(), kv.data(), DType::BF16, 1, 64}};
  EXPECT_EQ(error_of([&] { lingbot::cuda::dense_attention(qv, spans, o, {}); }),
            "dense_attention: kv span 1: dtype bf16 differs from the other keys' dtype f16 (the CUDA kernels take "
            "one K/V dtype)");
  CudaAttentionParams tc;
  tc.impl = AttentionImpl::TensorCore;
  const k::KVSpan f32span[] = {{kv.data(), kv.data(), DType::F32, 1, 64}};
  EXPECT_EQ(error_of([&] { lingbot::cuda::dense_attention(qv, f32span, o, tc); }),
            "tensor-core attention needs f16/bf16 K/V and head_dim 64, got f32 and head_dim 64");
  float host = 0;
  EXPECT_EQ(error_of([&] { lingbot::cuda::dense_attention({&host, 1, 1, 64, 64}, f32span, o, {}); }),
            "dense_attention: query data is not CUDA device memory");
}
