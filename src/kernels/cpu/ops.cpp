#include "kernels/cpu/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/parallel_errors.h"
#include "kernels/cpu/gemm_dnnl.h"
#include "kernels/cpu/vector_math.h"

namespace lingbot::kernels {

namespace {

// Threads come from OpenMP; OpenBLAS must run each tile single-threaded so tiles are independent.
void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Fixed tile sizes: the partition of C never depends on the thread count.
constexpr int64_t kTileM = 256;
constexpr int64_t kTileN = 512;
constexpr int64_t kElemChunk = 16384;
// Below this much work a parallel region costs more than it saves (results do not depend on it).
constexpr int64_t kMinParallelWork = 1 << 15;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows per sgemm tile: m split evenly into ceil(m / kTileM) tiles (a 1005-token frame: 252 + 252 + 252
// + 249 rows, not 256 x 3 + 237; a 262-token one 131 + 131). Tiles of 256 x 512 rather than 128 x 256:
// OpenBLAS packs each tile's A and B anew, and the larger tiles took 7% off an f32 518 frame. From
// the shape only, so results do not depend on the thread count.
int64_t row_tile(int64_t m) { return ceil_div(m, ceil_div(m, kTileM)); }

}  // namespace

void gemm(const float* A, int64_t lda, const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, int64_t m,
          int64_t n, int64_t k, float beta, int num_threads) {
  if (m <= 0 || n <= 0) return;
  blas_single_threaded();
  // Even row tiles, dealt round-robin: every thread gets a similar share of rows and columns.
  const int64_t tile_m = row_tile(m);
  const int64_t tm = ceil_div(m, tile_m), tn = ceil_div(n, kTileN);
  const int64_t tiles = tm * tn;
  const bool par = tiles > 1 && num_threads > 1 && m * n * std::max<int64_t>(k, 1) >= 16 * kMinParallelWork;
#pragma omp parallel for schedule(static, 1) num_threads(std::max(1, num_threads)) if (par)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t i0 = (t / tn) * tile_m, j0 = (t % tn) * kTileN;
    const int64_t mi = std::min(tile_m, m - i0), nj = std::min(kTileN, n - j0);
    const float* b_tile = trans_b ? B + j0 * ldb : B + j0;
    if (k == 0) {  // C = beta * C, where beta 0 overwrites (BLAS: C need not hold numbers then)
      for (int64_t i = 0; i < mi; ++i)
        for (int64_t j = 0; j < nj; ++j) {
          float& c = C[(i0 + i) * ldc + j0 + j];
          c = beta == 0.0f ? 0.0f : c * beta;
        }
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(mi),
                static_cast<int>(nj), static_cast<int>(k), 1.0f, A + i0 * lda, static_cast<int>(lda), b_tile,
                static_cast<int>(ldb), beta, C + i0 * ldc + j0, static_cast<int>(ldc));
  }
}

void linear(const float* x, int64_t n, int64_t in, const float* W, const float* b, int64_t out, float* y,
            int num_threads, int64_t x_stride, int64_t y_stride) {
  if (x_stride == 0) x_stride = in;
  if (y_stride == 0) y_stride = out;
  float beta = 0.0f;
  if (b) {
    for (int64_t r = 0; r < n; ++r) std::copy(b, b + out, y + r * y_stride);
    beta = 1.0f;
  }
  if (n == 1 && in > 0) {
    // One row (the camera head's token): a matrix-vector product streams W once; sgemm would pack it
    // first. Fixed tiles of kTileN outputs, as gemm().
    blas_single_threaded();
    const int64_t tiles = ceil_div(out, kTileN);
    const bool par = tiles > 1 && num_threads > 1 && out * in >= 16 * kMinParallelWork;
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) if (par)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t j0 = t * kTileN, nj = std::min(kTileN, out - j0);
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(nj), static_cast<int>(in), 1.0f, W + j0 * in,
                  static_cast<int>(in), x, 1, beta, y + j0, 1);
    }
    return;
  }
  gemm(x, x_stride, W, in, /*trans_b=*/true, y, y_stride, n, out, in, beta, num_threads);
}

GemmPath gemm_path(DType weights) {
  if (weights == DType::F32) return GemmPath::Sgemm;
  return dnnl_gemm::native(weights) ? GemmPath::DnnlNative : GemmPath::PanelSgemm;
}

std::string gemm_path_description(DType weights) {
  switch (gemm_path(weights)) {
    case GemmPath::Sgemm: return "OpenBLAS sgemm";
    case GemmPath::DnnlNative: return dnnl_gemm::description(weights);
    case GemmPath::PanelSgemm:
      return "f32 panel + OpenBLAS sgemm (no native " + std::string(dtype_name(weights)) + " GEMM on this CPU)";
  }
  return "";
}

std::string blas_description() {
  std::string d = openblas_get_config();
  while (!d.empty() && d.back() == ' ') d.pop_back();
  d += std::string(", core ") + openblas_get_corename();
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced && *forced)
    d += std::string(" (OPENBLAS_CORETYPE=") + forced + " set in the environment)";
  return d;
}

DType auto_weights_dtype() { return gemm_path(DType::BF16) == GemmPath::DnnlNative ? DType::BF16 : DType::F32; }

namespace {

// Reduced-precision weights without a native kernel: tiles are walked column-block-major so a thread
// widens each kTileN-row block of W into its own f32 panel once and reuses it for every row tile.
void linear_panel(const float* x, int64_t n, int64_t in, WeightView W, const float* b, int64_t out, float* y,
                  int num_threads, int64_t x_stride, int64_t y_stride) {
  blas_single_threaded();
  if (b) {
    for (int64_t r = 0; r < n; ++r) std::copy(b, b + out, y + r * y_stride);
  }
  const float beta = b ? 1.0f : 0.0f;
  const int64_t tile_m = row_tile(n);  // gemm()'s tiles: bit-identical to f32 on the widened weights
  const int64_t tm = ceil_div(n, tile_m), tn = ceil_div(out, kTileN);
  const int64_t tiles = tm * tn;
  const size_t esize = dtype_size(W.dtype);
  const bool par = tiles > 1 && num_threads > 1;
  ParallelErrors errors;  // a panel's allocation can throw
#pragma omp parallel num_threads(std::max(1, num_threads)) if (par)
  {
    std::vector<float> panel;
    int64_t panel_block = -1;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) errors.run([&] {
      const int64_t jb = t / tm, i0 = (t % tm) * tile_m, j0 = jb * kTileN;
      const int64_t mi = std::min(tile_m, n - i0), nj = std::min(kTileN, out - j0);
      if (panel_block != jb) {
        panel.resize(static_cast<size_t>(nj * in));
        convert_to_f32(static_cast<const char*>(W.data) + static_cast<size_t>(j0 * in) * esize, W.dtype, panel.data(),
                       panel.size());
        panel_block = jb;
      }
      if (n == 1) {  // as the f32 path: a matrix-vector product
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(nj), static_cast<int>(in), 1.0f, panel.data(),
                    static_cast<int>(in), x, 1, beta, y + j0, 1);
        return;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(mi), static_cast<int>(nj),
                  static_cast<int>(in), 1.0f, x + i0 * x_stride, static_cast<int>(x_stride), panel.data(),
                  static_cast<int>(in), beta, y + i0 * y_stride + j0, static_cast<int>(y_stride));
    });
  }
  errors.rethrow();
}

}  // namespace

void linear(const float* x, int64_t n, int64_t in, WeightView W, const float* b, int64_t out, float* y,
            int num_threads, int64_t x_stride, int64_t y_stride) {
  LINGBOT_CHECK(W.data != nullptr || n * in * out == 0, "linear: null weights");
  if (W.dtype == DType::F32) {
    linear(x, n, in, static_cast<const float*>(W.data), b, out, y, num_threads, x_stride, y_stride);
    return;
  }
  if (n <= 0 || out <= 0) return;
  if (x_stride == 0) x_stride = in;
  if (y_stride == 0) y_stride = out;
  if (gemm_path(W.dtype) == GemmPath::DnnlNative) {
    dnnl_gemm::linear(x, n, in, W.data, W.dtype, b, out, y, num_threads, x_stride, y_stride);
  } else {
    linear_panel(x, n, in, W, b, out, y, num_threads, x_stride, y_stride);
  }
}

void layer_norm(const float* x, int64_t n, int64_t dim, const float* gamma, const float* beta, float eps, float* y,
                int num_threads, int64_t x_stride, int64_t y_stride) {
  if (x_stride == 0) x_stride = dim;
  if (y_stride == 0) y_stride = dim;
  const auto row = [&](int64_t r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    double sum = 0.0;
    for (int64_t c = 0; c < dim; ++c) sum += xr[c];
    const double mean = sum / static_cast<double>(dim);
    double sq = 0.0;
    for (int64_t c = 0; c < dim; ++c) {
      const double d = xr[c] - mean;
      sq += d * d;
    }
    const double var = sq / static_cast<double>(dim);
    const float inv = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    const float m = static_cast<float>(mean);
    for (int64_t c = 0; c < dim; ++c) {
      float v = (xr[c] - m) * inv;
      if (gamma) v *= gamma[c];
      if (beta) v += beta[c];
      yr[c] = v;
    }
  };
  // Serial calls (CpuBackend::head_norm's, one per token inside its own loop) open no region: an
  // inactive one still costs libgomp a team (~5 us), ~100k of them per frame.
  if (n > 1 && num_threads > 1 && n * dim >= kMinParallelWork) {
#pragma omp parallel for schedule(static) num_threads(num_threads)
    for (int64_t r = 0; r < n; ++r) row(r);
  } else {
    for (int64_t r = 0; r < n; ++r) row(r);
  }
}

namespace {
template <typename F>
void elementwise(float* x, int64_t n, int num_threads, F f) {
  const int64_t chunks = ceil_div(n, kElemChunk);
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) if (chunks > 1 && num_threads > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t e = std::min(n, (c + 1) * kElemChunk);
    for (int64_t i = c * kElemChunk; i < e; ++i) x[i] = f(x[i]);
  }
}
}  // namespace

void gelu_erf(float* x, int64_t n, int num_threads) {
  const int64_t chunks = ceil_div(n, kElemChunk);
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) if (chunks > 1 && num_threads > 1)
  for (int64_t c = 0; c < chunks; ++c) vecmath::gelu_erf(x + c * kElemChunk, std::min(kElemChunk, n - c * kElemChunk));
}

void silu(float* x, int64_t n, int num_threads) {
  elementwise(x, n, num_threads, [](float v) { return v / (1.0f + std::exp(-v)); });
}

void relu(float* x, int64_t n, int num_threads) {
  elementwise(x, n, num_threads, [](float v) { return v > 0.0f ? v : 0.0f; });
}

void add_inplace(float* y, const float* x, int64_t n, int num_threads) {
  const int64_t chunks = ceil_div(n, kElemChunk);
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) if (chunks > 1 && num_threads > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t e = std::min(n, (c + 1) * kElemChunk);
    for (int64_t i = c * kElemChunk; i < e; ++i) y[i] += x[i];
  }
}

void layer_scale_add(float* y, const float* x, const float* gamma, int64_t rows, int64_t dim, int num_threads) {
  if (!gamma) {
    add_inplace(y, x, rows * dim, num_threads);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads)) \
    if (rows > 1 && num_threads > 1 && rows * dim >= kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * dim;
    const float* xr = x + r * dim;
    for (int64_t c = 0; c < dim; ++c) yr[c] += gamma[c] * xr[c];
  }
}

}  // namespace lingbot::kernels
