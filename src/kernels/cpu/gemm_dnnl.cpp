#include "kernels/cpu/gemm_dnnl.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <dnnl.hpp>
#include <vector>

#include "core/error.h"
#include "core/parallel_errors.h"

namespace lingbot::kernels::dnnl_gemm {

namespace {

// Tiles of the output: fixed, so results do not depend on the thread count. Larger than the sgemm
// tiles because a oneDNN call costs a few microseconds of primitive lookup.
constexpr int64_t kTileM = 256;
constexpr int64_t kTileN = 256;

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::F32: return dnnl::memory::data_type::f32;
    case DType::F16: return dnnl::memory::data_type::f16;
    case DType::BF16: return dnnl::memory::data_type::bf16;
  }
  return dnnl::memory::data_type::f32;
}

// One tile's primitive descriptor: A [m, k] packed (row stride k), B = W^T viewed as [k, n] with
// W's row stride, C [m, n] dense, optional bias [1, n]. C is dense because oneDNN 2.6 only takes its
// AMX / brgemm kernels for a dense destination (a row stride other than n falls back to gemm:jit,
// 3-4x slower on AMX CPUs); run_tiles copies the tile into place.
dnnl::matmul::primitive_desc tile_pd(const dnnl::engine& eng, DType t, int64_t m, int64_t n, int64_t k, int64_t ldw,
                                     bool bias) {
  using md = dnnl::memory::desc;
  const md a({m, k}, dnnl_type(t), dnnl::memory::dims{k, 1});
  const md w({k, n}, dnnl_type(t), dnnl::memory::dims{1, ldw});
  const md c({m, n}, dnnl::memory::data_type::f32, dnnl::memory::dims{n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratch: safe concurrent execution
  if (bias) {
    const md bd({1, n}, dnnl::memory::data_type::f32, dnnl::memory::dims{n, 1});
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, w, bd, c), attr, eng);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, w, c), attr, eng);
}

// gemm()'s tile: A [m, k] and B [k, n] plain row-major with row strides lda / ldb, C [m, n] dense
// (as tile_pd's).
dnnl::matmul::primitive_desc gemm_tile_pd(const dnnl::engine& eng, DType t, int64_t m, int64_t n, int64_t k,
                                          int64_t lda, int64_t ldb) {
  using md = dnnl::memory::desc;
  const md a({m, k}, dnnl_type(t), dnnl::memory::dims{lda, 1});
  const md b({k, n}, dnnl_type(t), dnnl::memory::dims{ldb, 1});
  const md c({m, n}, dnnl::memory::data_type::f32, dnnl::memory::dims{n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, eng);
}

struct Probe {
  bool native = false;
  std::string impl;
};

// Decided once per process from the CPU; immutable afterwards.
const Probe& probe(DType t) {
  static const Probe probes[3] = {
      Probe{},
      [] {
        // f16: oneDNN 2.6 has no CPU f16 matmul; a future library may, so ask it.
        Probe p;
        try {
          dnnl::engine eng(dnnl::engine::kind::cpu, 0);
          auto pd = tile_pd(eng, DType::F16, kTileM, kTileN, 1024, 1024, false);
          p.impl = pd.impl_info_str();
          p.native = p.impl.find("ref") == std::string::npos;
        } catch (const dnnl::error&) {
        }
        return p;
      }(),
      [] {
        Probe p;
        const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
        const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
        if ((isa & bf16) != bf16) return p;  // oneDNN would emulate bf16: no faster than sgemm
        try {
          dnnl::engine eng(dnnl::engine::kind::cpu, 0);
          auto pd = tile_pd(eng, DType::BF16, kTileM, kTileN, 1024, 1024, false);
          p.impl = pd.impl_info_str();
          p.native = p.impl.find("ref") == std::string::npos;
        } catch (const dnnl::error&) {
        }
        return p;
      }(),
  };
  return probes[static_cast<int>(t)];
}

}  // namespace

bool native(DType t) { return t != DType::F32 && probe(t).native; }

std::string description(DType t) {
  if (!native(t)) return "";
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " " +
         std::string(dtype_name(t)) + " matmul (" + probe(t).impl + ")";
}

namespace {

// The fixed tiles of an [m, n] output: rows split evenly into ceil(m / kTileM) tiles (a multiple of 16
// rows each: a 262-token frame is two tiles of 144 and 118 rows, not 256 + 6, where the second tile
// re-packs all of W for 6 rows), columns in kTileN tiles. Depends on the shape only, so results stay
// independent of the thread count.
struct TileGrid {
  int64_t m, n, tile_m, tn;
  TileGrid(int64_t m_, int64_t n_) : m(m_), n(n_) {
    const int64_t tiles_m = (m + kTileM - 1) / kTileM;
    tile_m = std::min(kTileM, ((m + tiles_m - 1) / tiles_m + 15) / 16 * 16);
    tn = (n + kTileN - 1) / kTileN;
  }
  int64_t count() const { return (m + tile_m - 1) / tile_m * tn; }
};

// One tile's call: its primitive (dense [mi, nj] destination) and the pointers of its operands (bias
// nullptr: none); the result goes to dst with row stride ldc, summed into it when accumulate.
struct TileCall {
  dnnl::matmul::primitive_desc pd;
  const void* src;
  const void* weights;
  float* dst;
  int64_t ldc;
  const float* bias = nullptr;
  bool accumulate = false;
};

// Runs every tile of `grid` as one single-threaded oneDNN matmul inside our own OpenMP loop; tiles are
// dealt round-robin so both threads share every row tile. call(eng, i0, j0, mi, nj) describes a tile.
template <typename Call>
void run_tiles(const TileGrid& grid, int num_threads, Call&& call) {
  const int64_t tiles = grid.count();
  const int nt = std::max(1, num_threads);
  // oneDNN calls below run single-threaded (it sees it is inside a parallel region); setting the
  // task's thread count to 1 also keeps its kernel choices (blocking, K split) independent of nt.
  ParallelErrors errors;  // oneDNN's calls and the buffers can throw (out of memory)
#pragma omp parallel num_threads(nt) if (nt > 1 && tiles > 1)
  {
    omp_set_num_threads(1);
    dnnl::engine eng;
    dnnl::stream stream;
    errors.run([&] {
      eng = dnnl::engine(dnnl::engine::kind::cpu, 0);
      stream = dnnl::stream(eng);
    });
    std::vector<uint8_t> scratch;
    std::vector<float> tile_out;  // the dense destination of tiles that are not dense in place
#pragma omp for schedule(static, 1)
    for (int64_t tile = 0; tile < tiles; ++tile) errors.run([&] {
      const int64_t i0 = (tile / grid.tn) * grid.tile_m, j0 = (tile % grid.tn) * kTileN;
      const int64_t mi = std::min(grid.tile_m, grid.m - i0), nj = std::min(kTileN, grid.n - j0);
      const TileCall c = call(eng, i0, j0, mi, nj);
      const bool in_place = !c.accumulate && c.ldc == nj;
      if (!in_place && tile_out.size() < static_cast<size_t>(mi * nj)) tile_out.resize(static_cast<size_t>(mi * nj));
      float* out = in_place ? c.dst : tile_out.data();
      const size_t sp = c.pd.scratchpad_desc().get_size();
      if (scratch.size() < sp) scratch.resize(sp);
      auto mem = [&](const dnnl::memory::desc& d, const void* p) { return dnnl::memory(d, eng, const_cast<void*>(p)); };
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(c.pd.src_desc(), c.src)},
                                                 {DNNL_ARG_WEIGHTS, mem(c.pd.weights_desc(), c.weights)},
                                                 {DNNL_ARG_DST, mem(c.pd.dst_desc(), out)},
                                                 {DNNL_ARG_SCRATCHPAD, mem(c.pd.scratchpad_desc(), scratch.data())}};
      if (c.bias) args.emplace(DNNL_ARG_BIAS, mem(c.pd.bias_desc(), c.bias));
      dnnl::matmul(c.pd).execute(stream, args);
      stream.wait();
      if (in_place) return;
      for (int64_t r = 0; r < mi; ++r) {
        const float* src = out + r * nj;
        float* dst = c.dst + r * c.ldc;
        if (c.accumulate) {
          for (int64_t j = 0; j < nj; ++j) dst[j] += src[j];
        } else {
          std::copy(src, src + nj, dst);
        }
      }
    });
  }
  errors.rethrow();
}

}  // namespace

void linear(const float* x, int64_t n, int64_t in, const void* W, DType t, const float* b, int64_t out, float* y,
            int num_threads, int64_t x_stride, int64_t y_stride) {
  LINGBOT_CHECK(native(t), "no native ", dtype_name(t), " matmul on this CPU");
  if (n <= 0 || out <= 0) return;
  if (x_stride == 0) x_stride = in;
  if (y_stride == 0) y_stride = out;
  const int nt = std::max(1, num_threads);
  // Activations rounded to the weights dtype once, packed [n, in].
  const auto xr = std::make_unique_for_overwrite<uint16_t[]>(static_cast<size_t>(n * in));  // no zero fill
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && n * in >= (1 << 16))
  for (int64_t r = 0; r < n; ++r) convert_from_f32(x + r * x_stride, xr.get() + r * in, t, static_cast<size_t>(in));
  const auto* w16 = static_cast<const uint16_t*>(W);
  run_tiles(TileGrid(n, out), nt, [&](const dnnl::engine& eng, int64_t i0, int64_t j0, int64_t mi, int64_t nj) {
    return TileCall{tile_pd(eng, t, mi, nj, in, in, b != nullptr), xr.get() + i0 * in, w16 + j0 * in,
                    y + i0 * y_stride + j0, y_stride, b ? b + j0 : nullptr};
  });
}

void gemm(const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc, int64_t m, int64_t n,
          int64_t k, DType t, bool accumulate, int num_threads) {
  LINGBOT_CHECK(native(t), "no native ", dtype_name(t), " matmul on this CPU");
  if (m <= 0 || n <= 0) return;
  LINGBOT_CHECK(k > 0, "dnnl gemm: k must be positive, got ", k);
  run_tiles(TileGrid(m, n), num_threads, [&](const dnnl::engine& eng, int64_t i0, int64_t j0, int64_t mi, int64_t nj) {
    return TileCall{gemm_tile_pd(eng, t, mi, nj, k, lda, ldb), A + i0 * lda, B + j0, C + i0 * ldc + j0, ldc, nullptr,
                    accumulate};
  });
}

std::string gemm_impl(DType t) {
  if (!native(t)) return "";
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return gemm_tile_pd(eng, t, kTileM, kTileN, 2304, 2304, 4096).impl_info_str();
}

}  // namespace lingbot::kernels::dnnl_gemm
