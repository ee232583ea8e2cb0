// Paged and dense CPU attention against a naive double-precision reference.
//
// Tolerances: the kernel accumulates in f32 (scores, online softmax, P*V) and uses its own exp2;
// the reference gathers exactly the same stored K/V values (already rounded to f16/bf16 when the
// storage dtype is reduced, so the storage rounding is not part of the error) and computes in
// double. Observed errors are ~1e-6; we allow |out - ref| <= 2e-5 * max(1, |ref|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "lingbot/dtype.h"

using namespace lingbot;
using namespace lingbot::kernels;

namespace {

constexpr double kTol = 2e-5;

// Host storage of values of one dtype; `at` reads an element back as the exact stored value.
struct Store {
  DType dtype = DType::F32;
  std::vector<uint16_t> h;  // f16 / bf16
  std::vector<float> f;     // f32
  explicit Store(DType t, size_t n, float fill) : dtype(t) {
    if (t == DType::F32) {
      f.assign(n, fill);
    } else {
      uint16_t bits = 0;
      convert_from_f32(&fill, &bits, t, 1);
      h.assign(n, bits);
    }
  }
  void set(size_t i, float x) {
    if (dtype == DType::F32) f[i] = x;
    else convert_from_f32(&x, &h[i], dtype, 1);
  }
  float at(size_t i) const {
    if (dtype == DType::F32) return f[i];
    float x;
    convert_to_f32(&h[i], dtype, &x, 1);
    return x;
  }
  const void* data() const { return dtype == DType::F32 ? static_cast<const void*>(f.data()) : h.data(); }
  const void* data_at(size_t i) const {
    return dtype == DType::F32 ? static_cast<const void*>(f.data() + i) : static_cast<const void*>(h.data() + i);
  }
};

// Keys gathered in attention order as the reference sees them: [n_keys][heads][head_dim].
struct Gathered {
  std::vector<double> k, v;
  int64_t n = 0;
};

std::vector<float> reference(const std::vector<float>& q, int n_q, int heads, int d, int64_t q_stride,
                             const Gathered& g, double scale) {
  std::vector<float> out(static_cast<size_t>(n_q) * heads * d);
  std::vector<double> sc(g.n);
  for (int t = 0; t < n_q; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* qr = q.data() + t * q_stride + h * d;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int c = 0; c < d; ++c) acc += static_cast<double>(qr[c]) * g.k[(j * heads + h) * d + c];
        sc[j] = acc * scale;
        mx = std::max(mx, sc[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < g.n; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
      for (int c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < g.n; ++j) acc += sc[j] * g.v[(j * heads + h) * d + c];
        out[(static_cast<size_t>(t) * heads + h) * d + c] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double tol = kTol * std::max(1.0, std::fabs(static_cast<double>(ref[i])));
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << ref[i];
      ++bad;
    }
  }
}

// A random paged problem: pool with garbage in every slot that no entry covers, shuffled pages,
// partial entries, extra spans with their own strides/dtypes.
struct Problem {
  int heads = 1, d = 8, n_q = 1, page_size = 1, num_pages = 0;
  int64_t q_stride = 0;
  DType dtype = DType::F32;
  std::vector<float> q;
  Store pool{DType::F32, 0, 0.f};
  std::vector<int32_t> ids, start, len;
  struct Span {
    Store k{DType::F32, 0, 0.f}, v{DType::F32, 0, 0.f};
    int n = 0;
    int64_t stride = 0;
  };
  std::vector<Span> spans;
  Gathered g;

  PagePoolView pool_view() const { return {pool.data(), dtype, num_pages, page_size, heads, d}; }
  PageTableView table() const { return {ids.data(), start.data(), len.data(), static_cast<int>(ids.size())}; }
  QueryView query() const { return {q.data(), n_q, heads, d, q_stride}; }
  std::vector<KVSpan> extra() const {
    std::vector<KVSpan> e;
    for (const auto& s : spans) e.push_back({s.k.data(), s.v.data(), s.k.dtype, s.n, s.stride});
    return e;
  }
  float scale() const { return 1.f / std::sqrt(static_cast<float>(d)); }
};

// span_dtype: the extra spans' dtype; random per span when F32 is not forced (kAnyDtype).
constexpr int kAnyDtype = -1;
Problem make_problem(std::mt19937& rng, int heads, int d, int n_q, int page_size, int n_entries, int n_spans,
                     DType dtype, float garbage, int span_dtype = kAnyDtype) {
  Problem p;
  p.heads = heads;
  p.d = d;
  p.n_q = n_q;
  p.page_size = page_size;
  p.dtype = dtype;
  p.num_pages = n_entries + 2;  // some pages never referenced
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t row = static_cast<int64_t>(heads) * d;
  p.q_stride = row + (rng() % 2 ? 0 : 3);
  p.q.resize(static_cast<size_t>(std::max<int64_t>(1, n_q * p.q_stride)));
  for (auto& x : p.q) x = 2.f * u(rng);  // scores of a few units: exercises the softmax range
  p.pool = Store(dtype, static_cast<size_t>(p.num_pages) * 2 * page_size * row, garbage);

  std::vector<int32_t> order(p.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  auto push_key = [&](double* dstk, double* dstv, auto&& getk, auto&& getv) {
    for (int64_t i = 0; i < row; ++i) {
      dstk[i] = getk(i);
      dstv[i] = getv(i);
    }
  };
  std::vector<std::pair<std::vector<double>, std::vector<double>>> keys;
  for (int e = 0; e < n_entries; ++e) {
    const int page = order[e];
    const int s = static_cast<int>(rng() % page_size);
    const int l = static_cast<int>(rng() % (page_size - s + 1));
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
      keys.emplace_back(std::vector<double>(row), std::vector<double>(row));
      push_key(keys.back().first.data(), keys.back().second.data(), [&](int64_t i) { return p.pool.at(kb + i); },
               [&](int64_t i) { return p.pool.at(vb + i); });
    }
  }
  for (int si = 0; si < n_spans; ++si) {
    Problem::Span sp;
    sp.n = static_cast<int>(rng() % 40);
    sp.stride = row + (rng() % 2 ? 0 : 5);
    const DType sdt = static_cast<DType>(span_dtype == kAnyDtype ? static_cast<int>(rng() % 3) : span_dtype);
    const size_t n = static_cast<size_t>(std::max<int64_t>(1, sp.n * sp.stride));
    sp.k = Store(sdt, n, garbage);
    sp.v = Store(sdt, n, garbage);
    for (int t = 0; t < sp.n; ++t) {
      const size_t b = static_cast<size_t>(t * sp.stride);
      for (int64_t i = 0; i < row; ++i) {
        sp.k.set(b + i, u(rng));
        sp.v.set(b + i, u(rng));
      }
      keys.emplace_back(std::vector<double>(row), std::vector<double>(row));
      push_key(keys.back().first.data(), keys.back().second.data(), [&](int64_t i) { return sp.k.at(b + i); },
               [&](int64_t i) { return sp.v.at(b + i); });
    }
    p.spans.push_back(std::move(sp));
  }
  p.g.n = static_cast<int64_t>(keys.size());
  for (auto& [k, v] : keys) {
    p.g.k.insert(p.g.k.end(), k.begin(), k.end());
    p.g.v.insert(p.g.v.end(), v.begin(), v.end());
  }
  return p;
}

// The f32 path unless asked otherwise: kTol is its tolerance (the native-bf16 path has its own
// bound, tested at the end of this file).
std::vector<float> run_paged(const Problem& p, int threads, AttentionCompute compute = AttentionCompute::F32,
                             Bf16Isa isa = Bf16Isa::Auto) {
  std::vector<float> out(static_cast<size_t>(p.n_q) * p.heads * p.d, -7.f);
  const auto extra = p.extra();
  paged_attention(p.query(), p.pool_view(), p.table(), extra, out.data(), {p.scale(), threads, compute, isa});
  return out;
}

std::vector<float> ref_of(const Problem& p) { return reference(p.q, p.n_q, p.heads, p.d, p.q_stride, p.g, p.scale()); }

}  // namespace

TEST(PagedAttention, MatchesReferenceOnRandomShapes) {
  std::mt19937 rng(12345);
  const int dims[] = {3, 8, 16, 20, 32, 64, 80, 128};  // 3 and 20: vector tails
  const int page_sizes[] = {1, 3, 7, 16, 33, 64};
  const float garbage[] = {std::numeric_limits<float>::quiet_NaN(), 1e30f, -std::numeric_limits<float>::infinity()};
  int cases = 0;
  for (int d : dims) {
    for (int rep = 0; rep < 6; ++rep, ++cases) {
      const int heads = 1 + static_cast<int>(rng() % (d >= 64 ? 4 : 16));
      const int n_q = 1 + static_cast<int>(rng() % 70);
      const int ps = page_sizes[rng() % 6];
      const int entries = static_cast<int>(rng() % (1 + 300 / ps));
      const int spans = static_cast<int>(rng() % 3);
      const DType dt = static_cast<DType>(cases % 3);
      Problem p = make_problem(rng, heads, d, n_q, ps, entries, spans, dt, garbage[cases % 3]);
      if (p.g.n == 0) continue;  // zero visible keys is an error, tested separately
      const std::string what = "d=" + std::to_string(d) + " heads=" + std::to_string(heads) +
                               " n_q=" + std::to_string(n_q) + " page=" + std::to_string(ps) +
                               " keys=" + std::to_string(p.g.n) + " dtype=" + std::string(dtype_name(dt));
      expect_close(run_paged(p, 2), ref_of(p), what);
    }
  }
}

TEST(PagedAttention, BitIdenticalForAnyThreadCount) {
  std::mt19937 rng(7);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    // Several query tiles and key blocks, keys split across pages and a span.
    Problem p = make_problem(rng, 3, 64, 150, 37, 12, 1, dt, std::numeric_limits<float>::quiet_NaN());
    const auto a = run_paged(p, 1), b = run_paged(p, 2), c = run_paged(p, 3);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << dtype_name(dt);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * 4)) << dtype_name(dt);
  }
}

TEST(PagedAttention, PaddingSlotsAreNeverRead) {
  // Every unreferenced slot is NaN: any read of padding would poison the output.
  std::mt19937 rng(3);
  Problem p = make_problem(rng, 4, 32, 20, 16, 10, 0, DType::F32, std::numeric_limits<float>::quiet_NaN());
  ASSERT_GT(p.g.n, 0);
  const auto out = run_paged(p, 2);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  expect_close(out, ref_of(p), "nan padding");
}

TEST(PagedAttention, LargeScoresAreStable) {
  // Scores in the hundreds: a naive exp would overflow; the online softmax must not.
  std::mt19937 rng(5);
  Problem p = make_problem(rng, 2, 64, 9, 8, 40, 1, DType::F32, 0.f);
  for (auto& x : p.q) x *= 40.f;
  expect_close(run_paged(p, 1), ref_of(p), "large scores");
}

TEST(PagedAttention, SingleKeyReturnsItsValue) {
  const int heads = 2, d = 8;
  std::vector<float> q(heads * d, 0.5f), kv(2 * heads * d);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i);
  const int32_t id = 0, st = 0, ln = 1;
  std::vector<float> out(heads * d);
  paged_attention({q.data(), 1, heads, d, heads * d}, {kv.data(), DType::F32, 1, 1, heads, d}, {&id, &st, &ln, 1}, {},
                  out.data(), {0.3f, 1});
  for (int i = 0; i < heads * d; ++i) EXPECT_EQ(out[i], kv[heads * d + i]);
}

TEST(DenseAttention, EqualsPagedOnSameKeysBitExactly) {
  // Keys are visited in blocks counted over the whole key sequence, so splitting the same keys into
  // pages or spans does not change the arithmetic at all.
  std::mt19937 rng(11);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    Problem p = make_problem(rng, 5, 80, 33, 13, 25, 0, dt, 1e30f);
    ASSERT_GT(p.g.n, 0);
    const auto paged = run_paged(p, 2);
    // The same keys as two contiguous spans of the same dtype.
    const int64_t row = static_cast<int64_t>(p.heads) * p.d;
    Store k(dt, p.g.n * row, 0.f), v(dt, p.g.n * row, 0.f);
    for (size_t i = 0; i < p.g.k.size(); ++i) {
      k.set(i, static_cast<float>(p.g.k[i]));  // exact: values are already representable in dt
      v.set(i, static_cast<float>(p.g.v[i]));
    }
    const int split = static_cast<int>(p.g.n / 3);
    const KVSpan spans[] = {{k.data(), v.data(), dt, split, row},
                            {k.data_at(split * row), v.data_at(split * row), dt, static_cast<int>(p.g.n - split), row}};
    std::vector<float> dense(paged.size());
    dense_attention(p.query(), spans, dense.data(), {p.scale(), 3, AttentionCompute::F32});
    EXPECT_EQ(0, std::memcmp(paged.data(), dense.data(), paged.size() * 4)) << dtype_name(dt);
    expect_close(dense, ref_of(p), "dense");
  }
}

TEST(DenseAttention, ZeroQueriesWritesNothing) {
  std::vector<float> kv(8, 1.f), out(1, -3.f);
  const KVSpan s{kv.data(), kv.data(), DType::F32, 1, 8};
  dense_attention({nullptr, 0, 1, 8, 8}, {&s, 1}, out.data(), {1.f, 1});
  EXPECT_EQ(out[0], -3.f);
}

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(PagedAttention, RejectsBadInputsWithExactMessages) {
  const int heads = 2, d = 4, ps = 4;
  std::vector<float> q(heads * d, 1.f), pool(3 * 2 * ps * heads * d, 1.f), out(heads * d);
  const QueryView qv{q.data(), 1, heads, d, heads * d};
  const PagePoolView pv{pool.data(), DType::F32, 3, ps, heads, d};
  int32_t id = 1, st = 0, ln = 2;
  const PageTableView tv{&id, &st, &ln, 1};
  const AttentionParams prm{0.5f, 1};
  auto call = [&](QueryView qq, PagePoolView pp, PageTableView tt, std::vector<KVSpan> ex, float* o,
                  AttentionParams a) { return error_of([&] { paged_attention(qq, pp, tt, ex, o, a); }); };
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), prm), "<no error>");

  QueryView bq = qv;
  bq.n_tokens = -1;
  EXPECT_EQ(call(bq, pv, tv, {}, out.data(), prm), "paged_attention: query n_tokens must be >= 0, got -1");
  bq = qv;
  bq.data = nullptr;
  EXPECT_EQ(call(bq, pv, tv, {}, out.data(), prm), "paged_attention: query data is null with n_tokens = 1");
  EXPECT_EQ(call(qv, pv, tv, {}, nullptr, prm), "paged_attention: out is null with n_tokens = 1");
  bq = qv;
  bq.token_stride = 7;
  EXPECT_EQ(call(bq, pv, tv, {}, out.data(), prm),
            "paged_attention: query token_stride 7 is smaller than heads*head_dim = 8");
  bq = qv;
  bq.heads = 0;
  EXPECT_EQ(call(bq, pv, tv, {}, out.data(), prm), "paged_attention: query heads must be > 0, got 0");
  bq = qv;
  bq.head_dim = -2;
  EXPECT_EQ(call(bq, pv, tv, {}, out.data(), prm), "paged_attention: query head_dim must be > 0, got -2");
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), {0.5f, 0}), "paged_attention: num_threads must be >= 1, got 0");
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), {std::numeric_limits<float>::infinity(), 1}),
            "paged_attention: scale must be finite, got inf");

  PagePoolView bp = pv;
  bp.heads = 1;
  EXPECT_EQ(call(qv, bp, tv, {}, out.data(), prm), "paged_attention: page pool heads 1 != query heads 2");
  bp = pv;
  bp.head_dim = 8;
  EXPECT_EQ(call(qv, bp, tv, {}, out.data(), prm), "paged_attention: page pool head_dim 8 != query head_dim 4");
  bp = pv;
  bp.data = nullptr;
  EXPECT_EQ(call(qv, bp, tv, {}, out.data(), prm), "paged_attention: page pool data is null with num_entries = 1");
  bp = pv;
  bp.dtype = static_cast<DType>(9);
  EXPECT_EQ(call(qv, bp, tv, {}, out.data(), prm), "paged_attention: page pool dtype 9 is not f32, f16 or bf16");
  bp = pv;
  bp.page_size = 0;
  EXPECT_EQ(call(qv, bp, tv, {}, out.data(), prm), "paged_attention: page pool page_size must be > 0, got 0");

  id = 3;
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), prm), "paged_attention: page table entry 0: page id 3 out of range [0, 3)");
  id = -1;
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), prm), "paged_attention: page table entry 0: page id -1 out of range [0, 3)");
  id = 1;
  st = 3;
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), prm),
            "paged_attention: page table entry 0: slots [3, 5) out of page bounds [0, 4)");
  st = -1;
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), prm),
            "paged_attention: page table entry 0: slots [-1, 1) out of page bounds [0, 4)");
  st = 0;
  ln = -1;
  EXPECT_EQ(call(qv, pv, tv, {}, out.data(), prm), "paged_attention: page table entry 0: negative len -1");
  ln = 2;
  EXPECT_EQ(call(qv, pv, {nullptr, &st, &ln, 1}, {}, out.data(), prm),
            "paged_attention: page table arrays are null with num_entries = 1");
  EXPECT_EQ(call(qv, pv, {&id, &st, &ln, -1}, {}, out.data(), prm),
            "paged_attention: page table num_entries must be >= 0, got -1");

  // Zero visible keys: an empty table, and entries of length 0, with only empty spans.
  EXPECT_EQ(call(qv, pv, {}, {}, out.data(), prm),
            "paged_attention: no visible keys (page table and extra spans are empty)");
  ln = 0;
  EXPECT_EQ(call(qv, pv, tv, {KVSpan{nullptr, nullptr, DType::F32, 0, 0}}, out.data(), prm),
            "paged_attention: no visible keys (page table and extra spans are empty)");
  ln = 2;

  std::vector<float> kv(3 * heads * d, 0.f);
  EXPECT_EQ(call(qv, pv, tv, {KVSpan{kv.data(), kv.data(), DType::F32, -2, 8}}, out.data(), prm),
            "paged_attention: kv span 0: negative n_tokens -2");
  EXPECT_EQ(call(qv, pv, tv, {KVSpan{kv.data(), kv.data(), DType::F32, 1, 8}, KVSpan{kv.data(), nullptr, DType::F32, 1, 8}},
                 out.data(), prm),
            "paged_attention: kv span 1: k/v data is null with n_tokens = 1");
  EXPECT_EQ(call(qv, pv, tv, {KVSpan{kv.data(), kv.data(), DType::F32, 3, 4}}, out.data(), prm),
            "paged_attention: kv span 0: token_stride 4 is smaller than heads*head_dim = 8");
  EXPECT_EQ(call(qv, pv, tv, {KVSpan{kv.data(), kv.data(), static_cast<DType>(5), 3, 8}}, out.data(), prm),
            "paged_attention: kv span 0: dtype 5 is not f32, f16 or bf16");
}

TEST(DenseAttention, RejectsBadInputsWithExactMessages) {
  std::vector<float> q(8, 1.f), out(8);
  const QueryView qv{q.data(), 1, 2, 4, 8};
  EXPECT_EQ(error_of([&] { dense_attention(qv, {}, out.data(), {1.f, 1}); }),
            "dense_attention: no visible keys (kv spans are empty)");
  const KVSpan s{q.data(), q.data(), DType::F32, 1, 6};
  EXPECT_EQ(error_of([&] { dense_attention(qv, {&s, 1}, out.data(), {1.f, 1}); }),
            "dense_attention: kv span 0: token_stride 6 is smaller than heads*head_dim = 8");
  QueryView bq = qv;
  bq.n_tokens = -3;
  EXPECT_EQ(error_of([&] { dense_attention(bq, {&s, 1}, out.data(), {1.f, 1}); }),
            "dense_attention: query n_tokens must be >= 0, got -3");
}

// ---------------------------------------------------------------------------------------------
// The native-bf16 path (AttentionCompute::Bf16; numeric contract in kernels/cpu/attention.h).
//
// Tolerance, derived rather than fitted: the path rounds q*scale*log2(e) to bf16 (relative error
// <= u = 2^-8 per element, plus one f32 product rounding) and the probabilities to bf16 (<= u),
// and normalises by the sum of the rounded probabilities. Each key's weight w_j is thus multiplied
// by rho_j in [e^-D (1-u), e^D (1+u)], D = u' * scale * sum_c |q_c k_jc| (natural-log units), and
// the output is the rho-weighted mean of the V rows, so
//   |out - ref| <= 0.5 * (e^{2D} (1+u)/(1-u) - 1) * max_j |v_j - ref|
// (the numerator is sum_j w_j (rho_j - c)(v_j - ref) for any c since sum_j w_j (v_j - ref) = 0).
// D is taken per (query, head) over all its keys; f32 accumulation adds kTol on top.
namespace {

constexpr double kBf16U = 0x1p-8;

std::vector<double> bf16_bound(const Problem& p, const std::vector<float>& ref) {
  const double u1 = kBf16U * (1 + 0x1p-15);  // + the f32 product q * scale*log2(e)
  std::vector<double> tol(ref.size());
  for (int t = 0; t < p.n_q; ++t)
    for (int h = 0; h < p.heads; ++h) {
      const float* qr = p.q.data() + t * p.q_stride + h * p.d;
      double dmax = 0;
      for (int64_t j = 0; j < p.g.n; ++j) {
        double a = 0;
        for (int c = 0; c < p.d; ++c) a += std::fabs(static_cast<double>(qr[c]) * p.g.k[(j * p.heads + h) * p.d + c]);
        dmax = std::max(dmax, a);
      }
      const double D = u1 * p.scale() * dmax;
      const double f = 0.5 * (std::exp(2 * D) * (1 + kBf16U) / (1 - kBf16U) - 1);
      for (int c = 0; c < p.d; ++c) {
        const size_t i = (static_cast<size_t>(t) * p.heads + h) * p.d + c;
        double vdev = 0;
        for (int64_t j = 0; j < p.g.n; ++j) vdev = std::max(vdev, std::fabs(p.g.v[(j * p.heads + h) * p.d + c] - ref[i]));
        tol[i] = f * vdev + kTol * std::max(1.0, std::fabs(static_cast<double>(ref[i])));
      }
    }
  return tol;
}

bool skip_without_bf16() { return !native_bf16_attention(); }
#define SKIP_WITHOUT_BF16()                                                                              \
  if (skip_without_bf16()) GTEST_SKIP() << "CPU lacks AVX512_BF16: the native-bf16 attention path is " \
                                           "not available here, so it is not tested"

}  // namespace

TEST(NativeBf16Attention, SelectionFollowsDtypeAndCpu) {
  EXPECT_EQ(resolved_attention_compute(AttentionCompute::Auto, DType::F32), AttentionCompute::F32);
  EXPECT_EQ(resolved_attention_compute(AttentionCompute::Auto, DType::F16), AttentionCompute::F32);
  EXPECT_EQ(resolved_attention_compute(AttentionCompute::F32, DType::BF16), AttentionCompute::F32);
  EXPECT_EQ(resolved_attention_compute(AttentionCompute::Auto, DType::BF16),
            native_bf16_attention() ? AttentionCompute::Bf16 : AttentionCompute::F32);
  if (native_bf16_attention()) {
    EXPECT_EQ(error_of([] { resolved_attention_compute(AttentionCompute::Bf16, DType::F16); }),
              "attention: compute bf16 needs bf16 K/V, got f16");
  } else {
    EXPECT_EQ(error_of([] { resolved_attention_compute(AttentionCompute::Bf16, DType::BF16); }),
              "attention: compute bf16 needs a CPU with AVX512_BF16 (this one lacks it)");
  }
}

TEST(NativeBf16Attention, IsTakenForBf16KeysAndDiffersFromF32) {
  SKIP_WITHOUT_BF16();
  std::mt19937 rng(21);
  Problem p = make_problem(rng, 3, 64, 50, 16, 20, 1, DType::BF16, 0.f, static_cast<int>(DType::BF16));
  ASSERT_GT(p.g.n, 0);
  const auto autob = run_paged(p, 2, AttentionCompute::Auto);
  const auto forced = run_paged(p, 2, AttentionCompute::Bf16);
  const auto f32 = run_paged(p, 2, AttentionCompute::F32);
  EXPECT_EQ(0, std::memcmp(autob.data(), forced.data(), autob.size() * 4)) << "Auto must take the bf16 path";
  // The bf16 roundings are visible (the f32 path is ~1e-6 from exact), so the path really ran.
  double maxdiff = 0;
  for (size_t i = 0; i < f32.size(); ++i) maxdiff = std::max(maxdiff, std::fabs(double(f32[i]) - autob[i]));
  EXPECT_GT(maxdiff, 1e-4);
  // f32 K/V under Auto stay on the f32 path bit for bit.
  Problem pf = make_problem(rng, 3, 64, 50, 16, 20, 1, DType::F32, 0.f, static_cast<int>(DType::F32));
  const auto a = run_paged(pf, 2, AttentionCompute::Auto), b = run_paged(pf, 2, AttentionCompute::F32);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  // A mixed-dtype call asking for bf16 is an error, not a silent f32 run.
  Problem pm = make_problem(rng, 3, 64, 5, 16, 20, 1, DType::BF16, 0.f, static_cast<int>(DType::F32));
  EXPECT_EQ(error_of([&] { run_paged(pm, 1, AttentionCompute::Bf16); }),
            "paged_attention: compute bf16 needs every K/V segment to be bf16 (got a mix or another dtype)");
}

TEST(NativeBf16Attention, WithinDerivedBoundOnRandomShapes) {
  SKIP_WITHOUT_BF16();
  std::mt19937 rng(2024);
  const int dims[] = {64, 40, 37, 16, 80, 128};  // 40, 37: not multiples of 32 (37: odd, a half pair)
  const int page_sizes[] = {1, 7, 33, 64};
  const float garbage[] = {std::numeric_limits<float>::quiet_NaN(), 1e30f, -std::numeric_limits<float>::infinity()};
  double worst_ratio = 0, worst_err = 0;
  int cases = 0;
  for (int d : dims) {
    for (int rep = 0; rep < 5; ++rep, ++cases) {
      const int heads = 1 + static_cast<int>(rng() % 4);
      const int n_q = 1 + static_cast<int>(rng() % (rep == 0 ? 400 : 70));  // up to two query groups
      const int ps = page_sizes[rng() % 4];
      const int entries = 1 + static_cast<int>(rng() % (1 + 400 / ps));    // key counts cross blocks
      const int spans = static_cast<int>(rng() % 3);
      Problem p = make_problem(rng, heads, d, n_q, ps, entries, spans, DType::BF16, garbage[cases % 3],
                               static_cast<int>(DType::BF16));
      if (p.g.n == 0) continue;
      if (rep == 4) for (auto& x : p.q) x *= 6.f;  // sharp softmax: scores of tens
      const auto ref = ref_of(p);
      const auto tol = bf16_bound(p, ref);
      const auto got = run_paged(p, 2, AttentionCompute::Bf16);
      const std::string what = "d=" + std::to_string(d) + " heads=" + std::to_string(heads) + " n_q=" +
                               std::to_string(n_q) + " page=" + std::to_string(ps) + " keys=" + std::to_string(p.g.n);
      int bad = 0;
      for (size_t i = 0; i < got.size() && bad < 5; ++i) {
        const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
        worst_ratio = std::max(worst_ratio, err / tol[i]);
        worst_err = std::max(worst_err, err);
        if (!(err <= tol[i])) {
          ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << ref[i] << " bound " << tol[i];
          ++bad;
        }
      }
    }
  }
  std::cout << "native bf16 attention: worst |err| " << worst_err << ", worst err/bound " << worst_ratio << "\n";
}

TEST(NativeBf16Attention, ConstantValuesComeBackExactlyUpToF32) {
  // The weights are normalised by the sum of the rounded probabilities: a convex combination.
  SKIP_WITHOUT_BF16();
  std::mt19937 rng(8);
  Problem p = make_problem(rng, 2, 40, 30, 33, 12, 1, DType::BF16, 0.f, static_cast<int>(DType::BF16));
  ASSERT_GT(p.g.n, 100);
  const int64_t row = static_cast<int64_t>(p.heads) * p.d;
  auto vval = [&](int64_t i) { return 0.25f + 0.125f * static_cast<float>(i % row % 5); };
  for (int e = 0; e < static_cast<int>(p.ids.size()); ++e)
    for (int t = p.start[e]; t < p.start[e] + p.len[e]; ++t)
      for (int64_t i = 0; i < row; ++i)
        p.pool.set(((static_cast<size_t>(p.ids[e]) * 2 + 1) * p.page_size + t) * row + i, vval(i));
  for (auto& sp : p.spans)
    for (int t = 0; t < sp.n; ++t)
      for (int64_t i = 0; i < row; ++i) sp.v.set(static_cast<size_t>(t * sp.stride + i), vval(i));
  const auto got = run_paged(p, 1, AttentionCompute::Bf16);
  for (int t = 0; t < p.n_q; ++t)
    for (int64_t i = 0; i < row; ++i) ASSERT_NEAR(got[t * row + i], vval(i), kTol * vval(i)) << t << " " << i;
}

TEST(NativeBf16Attention, BitIdenticalForAnyThreadCountAndSplit) {
  SKIP_WITHOUT_BF16();
  std::mt19937 rng(77);
  Problem p = make_problem(rng, 3, 64, 400, 37, 14, 2, DType::BF16, std::numeric_limits<float>::quiet_NaN(),
                           static_cast<int>(DType::BF16));
  const auto a = run_paged(p, 1, AttentionCompute::Bf16), b = run_paged(p, 2, AttentionCompute::Bf16),
             c = run_paged(p, 3, AttentionCompute::Bf16);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * 4));
  // The same keys as two dense spans: blocks are counted over the key sequence, not per page.
  const int64_t row = static_cast<int64_t>(p.heads) * p.d;
  Store k(DType::BF16, p.g.n * row, 0.f), v(DType::BF16, p.g.n * row, 0.f);
  for (size_t i = 0; i < p.g.k.size(); ++i) {
    k.set(i, static_cast<float>(p.g.k[i]));
    v.set(i, static_cast<float>(p.g.v[i]));
  }
  const int split = static_cast<int>(p.g.n / 3);
  const KVSpan spans[] = {{k.data(), v.data(), DType::BF16, split, row},
                          {k.data_at(split * row), v.data_at(split * row), DType::BF16, static_cast<int>(p.g.n - split), row}};
  std::vector<float> dense(a.size());
  dense_attention(p.query(), spans, dense.data(), {p.scale(), 2, AttentionCompute::Bf16});
  EXPECT_EQ(0, std::memcmp(a.data(), dense.data(), a.size() * 4));
}

// On AMX CPUs the bf16 path of a head_dim that is a multiple of 32 runs on AMX tiles; forcing
// Avx512Bf16 gives the vdpbf16ps kernels. Both must hold the contract's bound, the AMX one must be
// thread-count invariant, and the two must agree to within the bf16 rounding of the probabilities.
TEST(NativeBf16Attention, AmxTilesHoldTheBoundAndAgreeWithAvx512Bf16) {
  SKIP_WITHOUT_BF16();
  if (!amx_bf16_attention()) GTEST_SKIP() << "CPU lacks AMX-BF16 (or the OS refused the tile state): not tested here";
  std::mt19937 rng(4242);
  const int dims[] = {64, 32, 96, 128};
  double worst_ratio = 0, worst_gap = 0;
  for (int d : dims) {
    for (int rep = 0; rep < 4; ++rep) {
      const int heads = 1 + static_cast<int>(rng() % 3);
      const int n_q = 1 + static_cast<int>(rng() % (rep == 0 ? 700 : 90));  // up to three query groups
      const int ps = rep % 2 ? 33 : 16;
      Problem p = make_problem(rng, heads, d, n_q, ps, 1 + static_cast<int>(rng() % 20), static_cast<int>(rng() % 3),
                               DType::BF16, std::numeric_limits<float>::quiet_NaN(), static_cast<int>(DType::BF16));
      if (p.g.n == 0) continue;
      if (rep == 3) for (auto& x : p.q) x *= 6.f;
      const auto ref = ref_of(p);
      const auto tol = bf16_bound(p, ref);
      const auto amx = run_paged(p, 2, AttentionCompute::Bf16), amx3 = run_paged(p, 3, AttentionCompute::Bf16);
      const auto avx = run_paged(p, 2, AttentionCompute::Bf16, Bf16Isa::Avx512Bf16);
      ASSERT_EQ(0, std::memcmp(amx.data(), amx3.data(), amx.size() * 4)) << "d=" << d << ": thread count changed bits";
      for (size_t i = 0; i < amx.size(); ++i) {
        const double ea = std::fabs(double(amx[i]) - ref[i]), ev = std::fabs(double(avx[i]) - ref[i]);
        ASSERT_LE(ea, tol[i]) << "AMX d=" << d << " element " << i << " got " << amx[i] << " want " << ref[i];
        ASSERT_LE(ev, tol[i]) << "AVX512_BF16 d=" << d << " element " << i;
        worst_ratio = std::max(worst_ratio, ea / tol[i]);
        worst_gap = std::max(worst_gap, std::fabs(double(amx[i]) - avx[i]));
      }
    }
  }
  std::cout << "AMX bf16 attention: worst err/bound " << worst_ratio << ", worst |AMX - AVX512_BF16| " << worst_gap
            << "\n";
}
