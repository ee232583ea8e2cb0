// Native-bf16 attention work items (AttentionCompute::Bf16, numeric contract in attention.h): QK^T
// and PV as vdpbf16ps dot products of bf16 pairs with f32 accumulation, on CPUs with AVX512_BF16.
// Compiled per function with target attributes and chosen at run time, like the AVX2/AVX-512 sets.
//
// Layouts (uint16 bf16 bit patterns, one work item = one head x query group):
//   q  [row][dp]                 q * scale * log2(e), rounded once; a 32-bit word = 2 consecutive dims
//   kp [panel][dp/2][16][2]      16 keys per panel, pairs of consecutive dims: one 512-bit load is
//                                one dim pair of 16 keys, dotted with a broadcast q pair
//   p  [row][kKeyBlock]          probabilities rounded to bf16: a 32-bit word = 2 consecutive keys
//   vp [kKeyBlock/2][dp][2]      pairs of consecutive keys per column: one 512-bit load is one key
//                                pair of 16 columns, dotted with a broadcast p pair
// Every output element is one accumulation chain in a fixed order (dim pairs resp. key pairs, blocks
// of kKeyBlock keys over the concatenated segments), so results do not depend on the thread count
// or on how the keys are split into pages.
//
// These layouts are also AMX's: q and p rows are A tiles (16 rows x 32 bf16), a K panel's 16 dim
// pairs and 16 key pairs of vp are B tiles in the VNNI layout (16 rows of 16 x 2 bf16), so the AMX
// variants of QK^T and PV (qk_amx, pv_amx) run on the same packed blocks and the same softmax.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/attention_internal.h"

namespace lingbot::kernels::detail {

AttnScratchBf16::AttnScratchBf16(int head_dim)
    : dp((head_dim + kDimAlign - 1) / kDimAlign * kDimAlign),
      q(static_cast<size_t>(kMaxQueryGroup) * dp),
      o(static_cast<size_t>(kMaxQueryGroup) * dp),
      s(static_cast<size_t>(kMaxQueryTile) * kKeyBlock),
      p(static_cast<size_t>(kMaxQueryTile) * kKeyBlock),
      kp(static_cast<size_t>(kKeyBlock) * dp),
      vp(static_cast<size_t>(kKeyBlock) * dp),
      m(kMaxQueryGroup),
      l(kMaxQueryGroup),
      alpha(kMaxQueryGroup) {}

}  // namespace lingbot::kernels::detail

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// See attention_avx512.cpp: GCC 12's AVX-512 headers trip -Wmaybe-uninitialized when inlined.
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/attention_exp2_avx512.h"

#include <sys/syscall.h>
#include <unistd.h>

#define LINGBOT_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define LINGBOT_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c,amx-tile,amx-bf16")))

namespace lingbot::kernels::detail {
namespace {

static_assert(kKeyPanel == 16 && kRowGroup == 6 && kDimAlign % 16 == 0 && kKeyBlock % 32 == 0,
              "written for 6-row x 16-lane tiles and key pairs");

LINGBOT_AVX512BF16 inline __m512 dot2(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

inline uint32_t load_u32(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// s[r][j] = sum over dim pairs of q pair . k pair, for NB panels (16 keys each) x 6 rows.
template <int NB>
LINGBOT_AVX512BF16 inline void qk_tile(const uint16_t* q0, const uint16_t* panel, int dp, float* s0) {
  __m512 acc[6][NB];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i)
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_setzero_ps();
  const size_t pstride = static_cast<size_t>(dp) * kKeyPanel;  // uint16 per panel
  for (int d2 = 0; d2 < dp / 2; ++d2) {
    __m512i k[NB];
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) k[b] = _mm512_loadu_si512(panel + b * pstride + static_cast<size_t>(d2) * 32);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(load_u32(q0 + i * dp + 2 * d2)));
#pragma GCC unroll 2
      for (int b = 0; b < NB; ++b) acc[i][b] = dot2(acc[i][b], x, k[b]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i)
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(s0 + i * kKeyBlock + b * kKeyPanel, acc[i][b]);
}

LINGBOT_AVX512BF16 void qk_bf16(const uint16_t* q, const uint16_t* kp, int rows, int cols, int dp, float* s) {
  for (int r0 = 0; r0 < rows; r0 += 6) {
    const uint16_t* q0 = q + static_cast<size_t>(r0) * dp;
    float* s0 = s + static_cast<size_t>(r0) * kKeyBlock;
    int j0 = 0;
    for (; j0 + 32 <= cols; j0 += 32) qk_tile<2>(q0, kp + static_cast<size_t>(j0) * dp, dp, s0 + j0);
    if (j0 < cols) qk_tile<1>(q0, kp + static_cast<size_t>(j0) * dp, dp, s0 + j0);
  }
}

// 2^x for x <= 0 to ~3e-6 relative (degree-4 polynomial on [-0.5, 0.5], then scalef), enough for
// probabilities that are rounded to bf16 (u = 2^-8) next; x below -127 (and -inf) gives <= 2^-127,
// which the bf16 conversion and vdpbf16ps treat as 0.
LINGBOT_AVX512BF16 inline __m512 exp2_bf16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-127.f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  // Relative least-squares fit of 2^f on Chebyshev nodes; max relative error 2.7e-6.
  __m512 p = _mm512_set1_ps(9.5605105e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5917040e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4024981e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9312197e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.9999917e-1f));
  return _mm512_scalef_ps(p, n);
}

// Online softmax of each row (log2 domain): running max and rescale factor as the f32 kernels; the
// probabilities are written rounded to bf16 and the running sum adds exactly those rounded values
// (a vdpbf16ps against ones: bf16 x 1 is exact), i.e. the weights PV really uses.
LINGBOT_AVX512BF16 void softmax_bf16(float* s, uint16_t* p, int rows, int n_valid, int cols, float* m, float* l,
                                     float* alpha) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const __m512i ones = _mm512_set1_epi16(0x3F80);  // bf16 1.0
  for (int r = 0; r < rows; ++r) {
    float* sr = s + static_cast<size_t>(r) * kKeyBlock;
    uint16_t* pr = p + static_cast<size_t>(r) * kKeyBlock;
    // Keys past the end: probability 0; up to a multiple of 32 so the loop below runs on pairs of
    // 16-lane chunks (the s and p rows hold kKeyBlock, a multiple of 32).
    const int cols32 = (cols + 31) / 32 * 32;
    for (int j = n_valid; j < cols32; ++j) sr[j] = neg_inf;
    __m512 vmax = _mm512_set1_ps(m[r]);
    for (int j = 0; j < cols; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(sr + j));
    const float mx = _mm512_reduce_max_ps(vmax);  // max is exact in any order
    alpha[r] = std::exp2(m[r] - mx);              // 0 on the first block (m = -inf)
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < cols32; j += 32) {
      const __m512 e0 = exp2_bf16(_mm512_sub_ps(_mm512_loadu_ps(sr + j), vm));
      const __m512 e1 = exp2_bf16(_mm512_sub_ps(_mm512_loadu_ps(sr + j + 16), vm));
      const __m512bh b = _mm512_cvtne2ps_pbh(e1, e0);  // lanes 0-15: e0, 16-31: e1; round to nearest even
      _mm512_storeu_si512(pr + j, reinterpret_cast<__m512i>(b));
      sum = _mm512_dpbf16_ps(sum, b, reinterpret_cast<__m512bh>(ones));
    }
    l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(sum);  // fixed reduction order
    m[r] = mx;
  }
}

// 6 rows x (16 * NB) columns of O: alpha * O, then + P*V over key pairs in order.
template <int NB>
LINGBOT_AVX512BF16 inline void pv_tile(const uint16_t* p0, const uint16_t* vp, const float* alpha, int n_pairs,
                                       int dp, float* o0) {
  __m512 acc[6][NB];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_mul_ps(a, _mm512_loadu_ps(o0 + i * dp + b * 16));
  }
  for (int jp = 0; jp < n_pairs; ++jp) {
    __m512i vv[NB];
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) vv[b] = _mm512_loadu_si512(vp + static_cast<size_t>(jp) * 2 * dp + b * 32);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(load_u32(p0 + i * kKeyBlock + 2 * jp)));
#pragma GCC unroll 2
      for (int b = 0; b < NB; ++b) acc[i][b] = dot2(acc[i][b], x, vv[b]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i)
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(o0 + i * dp + b * 16, acc[i][b]);
}

LINGBOT_AVX512BF16 void pv_bf16(const uint16_t* p, const uint16_t* vp, const float* alpha, int rows, int n_keys,
                                int dp, float* o) {
  const int n_pairs = (n_keys + 1) / 2;  // an odd last key pairs with a zero probability and zero V
  for (int r0 = 0; r0 < rows; r0 += 6) {
    const uint16_t* p0 = p + static_cast<size_t>(r0) * kKeyBlock;
    float* o0 = o + static_cast<size_t>(r0) * dp;
    int c0 = 0;
    for (; c0 + 32 <= dp; c0 += 32) pv_tile<2>(p0, vp + 2 * c0, alpha + r0, n_pairs, dp, o0 + c0);
    if (c0 < dp) pv_tile<1>(p0, vp + 2 * c0, alpha + r0, n_pairs, dp, o0 + c0);
  }
}

// Head-h K and V rows of the next nk keys (from the cursor) into krow/vrow, prefetching them: the
// rows of one head are a page row apart, so the hardware prefetchers do not follow them, and a block
// is collected one block ahead of its use.
LINGBOT_AVX512BF16 void collect_block(const std::vector<KeySegment>& segs, KeyCursor& cur, int h, int head_dim, int nk,
                                      const uint16_t** krow, const uint16_t** vrow) {
  const int bytes = head_dim * 2;
  for (int t = 0; t < nk; ++t) {
    int64_t off = 0;
    const KeySegment& sg = cur.next(segs, h, head_dim, off);
    const char* k = static_cast<const char*>(sg.k) + off;
    const char* v = static_cast<const char*>(sg.v) + off;
    krow[t] = reinterpret_cast<const uint16_t*>(k);
    vrow[t] = reinterpret_cast<const uint16_t*>(v);
    for (int b = 0; b < bytes + 63; b += 64) {
      _mm_prefetch(k + std::min(b, bytes - 1), _MM_HINT_T0);
      _mm_prefetch(v + std::min(b, bytes - 1), _MM_HINT_T0);
    }
  }
}

// In-register transpose of 16 x 16 32-bit words.
LINGBOT_AVX512BF16 inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // u[4k + j], 128-bit lane L: column 4L + j of rows 4k..4k+3.
  for (int k = 0; k < 4; ++k) {
    u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    r[4 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

// Mask of the bf16 elements [c, c+32) of a head_dim row that exist.
inline __mmask32 dims_mask(int head_dim, int c) {
  const int valid = std::clamp(head_dim - c, 0, 32);
  return valid >= 32 ? ~__mmask32{0} : (__mmask32{1} << valid) - 1;
}

// Packs the nk keys of krow/vrow into sc.kp and sc.vp; the rest of the block (up to a multiple of
// kKeyPanel keys) is zero, so padded scores and V rows stay finite. Dims past head_dim are zero (an
// odd head_dim's last pair is (k[d-1], 0)).
LINGBOT_AVX512BF16 void pack_block(const uint16_t* const* krow, const uint16_t* const* vrow, int head_dim, int nk,
                                   AttnScratchBf16& sc) {
  const int dp = sc.dp, half = dp / 2;
  const int cols = (nk + kKeyPanel - 1) / kKeyPanel * kKeyPanel;
  // K: per panel of 16 keys and chunk of 16 dim pairs, one 16 x 16 transpose of 32-bit words.
  for (int t0 = 0; t0 < cols; t0 += kKeyPanel) {
    uint16_t* panel = sc.kp.data() + static_cast<size_t>(t0) * dp;  // (t0/16) * half * 16 words
    for (int w0 = 0; w0 < half; w0 += 16) {
      const __mmask32 mk = dims_mask(head_dim, 2 * w0);
      __m512i r[16];
      for (int t = 0; t < 16; ++t)
        r[t] = t0 + t < nk ? _mm512_maskz_loadu_epi16(mk, krow[t0 + t] + 2 * w0) : _mm512_setzero_si512();
      transpose16(r);
      const int n = std::min(16, half - w0);
      for (int i = 0; i < n; ++i) _mm512_storeu_si512(panel + static_cast<size_t>(w0 + i) * 32, r[i]);
    }
  }
  // V: two consecutive keys interleaved per column (lo: columns c..c+15, hi: c+16..c+31).
  const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  // Up to a multiple of 32 keys: the AMX PV reads 16 key pairs per tile.
  const int cols32 = (nk + 31) / 32 * 32;
  for (int t = 0; t < cols32; t += 2) {
    uint16_t* dst = sc.vp.data() + static_cast<size_t>(t / 2) * 2 * dp;
    for (int c = 0; c < dp; c += 32) {
      const __mmask32 mk = dims_mask(head_dim, c);
      const __m512i a = t < nk ? _mm512_maskz_loadu_epi16(mk, vrow[t] + c) : _mm512_setzero_si512();
      const __m512i b = t + 1 < nk ? _mm512_maskz_loadu_epi16(mk, vrow[t + 1] + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi16(a, idx_lo, b));
      if (c + 16 < dp) _mm512_storeu_si512(dst + 2 * c + 32, _mm512_permutex2var_epi16(a, idx_hi, b));
    }
  }
}


// ---- AMX (tdpbf16ps on 16 x 64-byte tiles) ----

// The tile configuration (palette 1) in the layout LDTILECFG reads.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows x 64 bytes: C = 16 x 16 f32, A = 16 rows x 32 bf16, B = 16 pairs x 16 x 2 bf16.
// Loaded per work item: a oneDNN kernel on the same thread may have configured the tiles otherwise.
// The AMX functions are not inlined into the AVX512_BF16 code: that is compiled for CPUs without AMX.
__attribute__((noinline)) LINGBOT_AMX void amx_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // Not _tile_loadconfig: GCC 12's declares an 8-byte memory operand, so the stores of the other 56
  // bytes may be dropped as dead.
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// Gives the 8 KiB tile state back at the end of a work item (cheaper context switches).
__attribute__((noinline)) LINGBOT_AMX void amx_release() { _tile_release(); }

// s[r][j] = q_r . k_j for rows (a multiple of 16) x cols (a multiple of 16); dp a multiple of 32.
// Tiles: 0, 1 = S of two panels, 2 = q (32 dims), 3, 4 = the two panels' dim pairs.
__attribute__((noinline)) LINGBOT_AMX void qk_amx(const uint16_t* q, const uint16_t* kp, int rows, int cols, int dp, float* s) {
  // The tile loads below read q and kp through register operands only (GCC 12): the barrier keeps the
  // caller's stores to them before (interprocedural analysis may otherwise see no read here).
  __asm__ volatile("" ::: "memory");
  const int ksteps = dp / 32;
  const size_t qstride = static_cast<size_t>(dp) * 2, pstride = static_cast<size_t>(dp) * kKeyPanel;
  for (int r0 = 0; r0 < rows; r0 += kAmxRows) {
    const uint16_t* qa = q + static_cast<size_t>(r0) * dp;
    float* s0 = s + static_cast<size_t>(r0) * kKeyBlock;
    int j0 = 0;
    for (; j0 + 32 <= cols; j0 += 32) {
      const uint16_t* panel = kp + static_cast<size_t>(j0) * dp;
      _tile_zero(0);
      _tile_zero(1);
      for (int t = 0; t < ksteps; ++t) {
        _tile_loadd(2, qa + t * 32, qstride);
        _tile_loadd(3, panel + t * 16 * 32, 64);
        _tile_loadd(4, panel + pstride + t * 16 * 32, 64);
        _tile_dpbf16ps(0, 2, 3);
        _tile_dpbf16ps(1, 2, 4);
      }
      _tile_stored(0, s0 + j0, kKeyBlock * 4);
      _tile_stored(1, s0 + j0 + kKeyPanel, kKeyBlock * 4);
    }
    if (j0 < cols) {
      const uint16_t* panel = kp + static_cast<size_t>(j0) * dp;
      _tile_zero(0);
      for (int t = 0; t < ksteps; ++t) {
        _tile_loadd(2, qa + t * 32, qstride);
        _tile_loadd(3, panel + t * 16 * 32, 64);
        _tile_dpbf16ps(0, 2, 3);
      }
      _tile_stored(0, s0 + j0, kKeyBlock * 4);
    }
  }
}

// o = alpha * o + p . V for rows (a multiple of 16) over the keys of the block rounded up to 32 (p
// and vp are zero past the valid keys); dp a multiple of 32. Tiles: 0-3 = O (64 columns), 4 = p
// (32 keys), 5-7 = V (16 key pairs x 16 columns), reused in turn.
__attribute__((noinline)) LINGBOT_AMX void pv_amx(const uint16_t* p, const uint16_t* vp, const float* alpha, int rows,
                                                  int n_keys, int dp, float* o) {
  __asm__ volatile("" ::: "memory");  // as in qk_amx: the caller's stores to p and vp come first
  const int ksteps = (n_keys + 31) / 32;
  for (int r = 0; r < rows; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
    float* orow = o + static_cast<size_t>(r) * dp;
    for (int c = 0; c < dp; c += 16) _mm512_storeu_ps(orow + c, _mm512_mul_ps(a, _mm512_loadu_ps(orow + c)));
  }
  // GCC 12's _tile_loadd takes its address as a register operand, with no memory operand or clobber:
  // nothing stops the compiler from sinking the rescaling stores above past the tile loads of o.
  __asm__ volatile("" ::: "memory");
  const size_t ostride = static_cast<size_t>(dp) * 4, vstride = static_cast<size_t>(dp) * 4;  // bytes
  const size_t vstep = static_cast<size_t>(16) * 2 * dp;  // uint16 per 16 key pairs
  for (int r0 = 0; r0 < rows; r0 += kAmxRows) {
    const uint16_t* pa = p + static_cast<size_t>(r0) * kKeyBlock;
    float* o0 = o + static_cast<size_t>(r0) * dp;
    int c0 = 0;
    for (; c0 + 64 <= dp; c0 += 64) {
      _tile_loadd(0, o0 + c0, ostride);
      _tile_loadd(1, o0 + c0 + 16, ostride);
      _tile_loadd(2, o0 + c0 + 32, ostride);
      _tile_loadd(3, o0 + c0 + 48, ostride);
      for (int t = 0; t < ksteps; ++t) {
        const uint16_t* v = vp + t * vstep + 2 * c0;
        _tile_loadd(4, pa + t * 32, kKeyBlock * 2);
        _tile_loadd(5, v, vstride);
        _tile_loadd(6, v + 32, vstride);
        _tile_loadd(7, v + 64, vstride);
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 4, 7);
        _tile_loadd(5, v + 96, vstride);
        _tile_dpbf16ps(3, 4, 5);
      }
      _tile_stored(0, o0 + c0, ostride);
      _tile_stored(1, o0 + c0 + 16, ostride);
      _tile_stored(2, o0 + c0 + 32, ostride);
      _tile_stored(3, o0 + c0 + 48, ostride);
    }
    for (; c0 < dp; c0 += 16) {  // dp % 64 == 32: two more 16-column tiles
      _tile_loadd(0, o0 + c0, ostride);
      for (int t = 0; t < ksteps; ++t) {
        _tile_loadd(4, pa + t * 32, kKeyBlock * 2);
        _tile_loadd(5, vp + t * vstep + 2 * c0, vstride);
        _tile_dpbf16ps(0, 4, 5);
      }
      _tile_stored(0, o0 + c0, ostride);
    }
  }
}

}  // namespace

bool avx512bf16_available() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return ok;
}

bool amx_bf16_available() {
  static const bool ok = [] {
    if (!avx512bf16_available()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u;
    if (!tile || !bf16) return false;
    // Linux hands out the (8 KiB) tile data state only on request, once per process.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

LINGBOT_AVX512BF16 void attend_group_bf16(const QueryView& q, int h, int q0, int nq, float qscale,
                                          const std::vector<KeySegment>& segs, int64_t n_keys, AttnScratchBf16& sc,
                                          float* out, bool use_amx) {
  const int d = q.head_dim, dp = sc.dp;
  LINGBOT_CHECK(!use_amx || dp % 32 == 0, "attention: the AMX path needs head_dim padded to a multiple of 32");
  const int row_align = use_amx ? kAmxRows : kRowGroup;
  const int rows = (nq + row_align - 1) / row_align * row_align;
  if (use_amx) amx_configure();
  std::fill(sc.q.begin(), sc.q.end(), uint16_t{0});
  std::fill(sc.o.begin(), sc.o.end(), 0.f);
  for (int r = 0; r < nq; ++r) {
    const float* src = q.data + static_cast<int64_t>(q0 + r) * q.token_stride + static_cast<int64_t>(h) * d;
    uint16_t* dst = sc.q.data() + static_cast<size_t>(r) * dp;
    for (int c = 0; c < d; ++c) dst[c] = f32_to_bf16(src[c] * qscale);
  }
  std::fill(sc.m.begin(), sc.m.end(), -std::numeric_limits<float>::infinity());
  std::fill(sc.l.begin(), sc.l.end(), 0.f);

  // Row pointers of the current block and of the next one (collected and prefetched a block ahead).
  const uint16_t* rows_k[2][kKeyBlock];
  const uint16_t* rows_v[2][kKeyBlock];
  KeyCursor cur;
  auto block_keys = [&](int64_t k0) { return static_cast<int>(std::min<int64_t>(kKeyBlock, n_keys - k0)); };
  collect_block(segs, cur, h, d, block_keys(0), rows_k[0], rows_v[0]);
  for (int64_t k0 = 0, b = 0; k0 < n_keys; k0 += kKeyBlock, ++b) {
    const int nk = block_keys(k0);
    const int cols = (nk + kKeyPanel - 1) / kKeyPanel * kKeyPanel;
    pack_block(rows_k[b % 2], rows_v[b % 2], d, nk, sc);
    if (k0 + kKeyBlock < n_keys)
      collect_block(segs, cur, h, d, block_keys(k0 + kKeyBlock), rows_k[(b + 1) % 2], rows_v[(b + 1) % 2]);
    for (int t0 = 0; t0 < rows; t0 += kMaxQueryTile) {
      const int tr = std::min(kMaxQueryTile, rows - t0);
      const uint16_t* qt = sc.q.data() + static_cast<size_t>(t0) * dp;
      float* ot = sc.o.data() + static_cast<size_t>(t0) * dp;
      if (use_amx) {
        qk_amx(qt, sc.kp.data(), tr, cols, dp, sc.s.data());
      } else {
        qk_bf16(qt, sc.kp.data(), tr, cols, dp, sc.s.data());
      }
      softmax_bf16(sc.s.data(), sc.p.data(), tr, nk, cols, sc.m.data() + t0, sc.l.data() + t0, sc.alpha.data() + t0);
      if (use_amx) {
        pv_amx(sc.p.data(), sc.vp.data(), sc.alpha.data() + t0, tr, nk, dp, ot);
      } else {
        pv_bf16(sc.p.data(), sc.vp.data(), sc.alpha.data() + t0, tr, nk, dp, ot);
      }
    }
  }
  if (use_amx) amx_release();

  write_rows(q, h, q0, nq, dp, sc.o.data(), sc.l.data(), out);
}

}  // namespace lingbot::kernels::detail

#pragma GCC diagnostic pop

#else

namespace lingbot::kernels::detail {
bool avx512bf16_available() { return false; }
bool amx_bf16_available() { return false; }
void attend_group_bf16(const QueryView&, int, int, int, float, const std::vector<KeySegment>&, int64_t,
                       AttnScratchBf16&, float*, bool) {
  LINGBOT_CHECK(false, "attention: the native-bf16 path is not compiled for this target");
}
}  // namespace lingbot::kernels::detail

#endif
