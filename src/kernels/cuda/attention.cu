// CUDA paged / dense attention (see attention_cuda.h). Three kernels share one key walk:
//   attn_simt_kernel  one thread per query row, f32 math, any dtype, head_dim <= 128
//   attn_decode_kernel  the same math for at most 8 query rows: one block per row and head, the keys
//                     split over its threads
//   attn_mma_kernel   one warp per 16 or 32 query rows, mma.sync m16n8k16 (f16/bf16 in, f32 accumulate),
//                     head_dim 64, K/V tiles double-buffered in shared memory with cp.async, B fragments
//                     loaded with ldmatrix (.trans for V)
// Keys are walked segment by segment (page-table entries first, then extra spans) in tiles; a
// tile never straddles a segment and rows past the segment's end are zero-filled in shared memory,
// never loaded, so padding (even NaN) cannot reach the softmax.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ptx.cuh"

namespace lingbot::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// Kernel arguments (passed by value).

struct QueryArgs {
  const float* data;
  int64_t token_stride;  // floats
  int n_tokens;
  int heads;
  int head_dim;
};

// All visible keys: `num_entries` page-table entries into `pool`, then `num_spans` spans.
struct KeyArgs {
  const void* pool;
  int64_t page_stride;   // elements from page p's K to page p+1's K: 2 * page_size * row
  int64_t kv_offset;     // elements from a page's K to its V: page_size * row
  int64_t row;           // heads * head_dim: elements per token in the pool
  const int32_t* page_ids;
  const int32_t* start;
  const int32_t* len;
  int num_entries;
  const DeviceSpan* dspans;  // device-resident spans
  int num_dspans;
  int num_spans;             // inline spans
  int64_t n_keys;            // all segments together
  const void* span_k[kMaxCudaSpans];
  const void* span_v[kMaxCudaSpans];
  int64_t span_stride[kMaxCudaSpans];
  int span_n[kMaxCudaSpans];
};

// One segment of consecutive keys for head h: token t's K at k + t*stride (elements of T).
template <typename T>
struct Segment {
  const T* k;
  const T* v;
  int64_t stride;
  int n;
};

template <typename T>
__device__ __forceinline__ Segment<T> load_segment(const KeyArgs& a, int i, int h, int head_dim) {
  Segment<T> s;
  if (i < a.num_entries) {
    const int64_t page = __ldg(a.page_ids + i);
    const int64_t first = static_cast<int64_t>(__ldg(a.start + i)) * a.row + static_cast<int64_t>(h) * head_dim;
    const T* base = static_cast<const T*>(a.pool) + page * a.page_stride + first;
    s.k = base;
    s.v = base + a.kv_offset;
    s.stride = a.row;
    s.n = __ldg(a.len + i);
  } else if (i < a.num_entries + a.num_dspans) {
    const DeviceSpan* d = a.dspans + (i - a.num_entries);
    s.k = static_cast<const T*>(d->k) + static_cast<int64_t>(h) * head_dim;
    s.v = static_cast<const T*>(d->v) + static_cast<int64_t>(h) * head_dim;
    s.stride = d->token_stride;
    s.n = d->n_tokens;
  } else {
    const int j = i - a.num_entries - a.num_dspans;
    s.k = static_cast<const T*>(a.span_k[j]) + static_cast<int64_t>(h) * head_dim;
    s.v = static_cast<const T*>(a.span_v[j]) + static_cast<int64_t>(h) * head_dim;
    s.stride = a.span_stride[j];
    s.n = a.span_n[j];
  }
  return s;
}

// Segment i's number of keys (what load_segment reads as n, without the pointers).
__device__ __forceinline__ int segment_length(const KeyArgs& a, int i) {
  if (i < a.num_entries) return __ldg(a.len + i);
  if (i < a.num_entries + a.num_dspans) return a.dspans[i - a.num_entries].n_tokens;
  return a.span_n[i - a.num_entries - a.num_dspans];
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// ---------------------------------------------------------------------------------------------
// SIMT kernel: thread = one query row of one head; block = kSimtRows rows of one head.

constexpr int kSimtRows = 128;
constexpr int kSimtKeys = 32;  // keys per shared-memory tile

template <typename T, int DP>  // DP: head_dim rounded up to 16, 32, 64 or 128 (zero padding)
__global__ void __launch_bounds__(kSimtRows) attn_simt_kernel(QueryArgs q, KeyArgs keys, float* out, float qscale) {
  __shared__ float ks[kSimtKeys][DP];
  __shared__ float vs[kSimtKeys][DP];
  const int h = blockIdx.y;
  const int D = q.head_dim;
  const int row = blockIdx.x * kSimtRows + threadIdx.x;
  const bool active = row < q.n_tokens;

  float qr[DP];
  float o[DP];
#pragma unroll
  for (int d = 0; d < DP; ++d) {
    qr[d] = (active && d < D) ? q.data[row * q.token_stride + static_cast<int64_t>(h) * D + d] * qscale : 0.0f;
    o[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;

  const int n_segs = keys.num_entries + keys.num_dspans + keys.num_spans;
  for (int si = 0; si < n_segs; ++si) {
    const Segment<T> seg = load_segment<T>(keys, si, h, D);
    for (int t0 = 0; t0 < seg.n; t0 += kSimtKeys) {
      const int nk = min(kSimtKeys, seg.n - t0);
      __syncthreads();  // previous tile fully consumed
      for (int idx = threadIdx.x; idx < kSimtKeys * DP; idx += kSimtRows) {
        const int j = idx / DP, d = idx % DP;
        float kv = 0.0f, vv = 0.0f;
        if (j < nk && d < D) {
          const int64_t off = (t0 + j) * seg.stride + d;
          kv = to_f32(seg.k[off]);
          vv = to_f32(seg.v[off]);
        }
        ks[j][d] = kv;
        vs[j][d] = vv;
      }
      __syncthreads();
      float s[kSimtKeys];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kSimtKeys; ++j) {
        float acc = 0.0f;
#pragma unroll
        for (int d = 0; d < DP; ++d) acc = fmaf(qr[d], ks[j][d], acc);
        s[j] = j < nk ? acc : -INFINITY;
        tile_max = fmaxf(tile_max, s[j]);
      }
      const float m_new = fmaxf(m, tile_max);  // finite: nk >= 1
      const float alpha = exp2f(m - m_new);    // 0 on the first tile (m = -inf)
      l *= alpha;
#pragma unroll
      for (int d = 0; d < DP; ++d) o[d] *= alpha;
#pragma unroll
      for (int j = 0; j < kSimtKeys; ++j) {
        const float p = exp2f(s[j] - m_new);  // 0 for masked keys
        l += p;
#pragma unroll
        for (int d = 0; d < DP; ++d) o[d] = fmaf(p, vs[j][d], o[d]);
      }
      m = m_new;
    }
  }
  if (!active) return;
  const float inv = 1.0f / l;
  float* dst = out + (static_cast<int64_t>(row) * q.heads + h) * D;
#pragma unroll
  for (int d = 0; d < DP; ++d)
    if (d < D) dst[d] = o[d] * inv;
}

// ---------------------------------------------------------------------------------------------
// SIMT decode kernel: a handful of query rows (the camera head's one token per frame) would leave
// 127 of the SIMT kernel's 128 threads idle and walk every key on one thread. Here a block is one
// (query row, head) and its threads split the keys: thread i takes keys i, i + 128, ... of each
// segment with its own online softmax, then the block merges the 128 partial (max, sum, output).

constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxQueries = 8;  // calls with at most this many query rows take this kernel

template <typename T, int DP>
__global__ void __launch_bounds__(kDecodeThreads) attn_decode_kernel(QueryArgs q, KeyArgs keys, float* out,
                                                                     float qscale) {
  constexpr int kWarps = kDecodeThreads / 32;
  __shared__ float qs[DP];
  __shared__ float warp_max[kWarps];
  __shared__ float warp_sum[kWarps][DP + 1];  // [DP] holds the softmax denominator
  const int row = blockIdx.x, h = blockIdx.y, D = q.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int d = threadIdx.x; d < DP; d += kDecodeThreads)
    qs[d] = d < D ? q.data[row * q.token_stride + static_cast<int64_t>(h) * D + d] * qscale : 0.0f;
  __syncthreads();

  float o[DP];
#pragma unroll
  for (int d = 0; d < DP; ++d) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int n_segs = keys.num_entries + keys.num_dspans + keys.num_spans;
  for (int si = 0; si < n_segs; ++si) {
    const Segment<T> seg = load_segment<T>(keys, si, h, D);
    for (int t = threadIdx.x; t < seg.n; t += kDecodeThreads) {
      const T* kr = seg.k + t * seg.stride;
      const T* vr = seg.v + t * seg.stride;
      float sc = 0.0f;
#pragma unroll
      for (int d = 0; d < DP; ++d)
        if (d < D) sc = fmaf(qs[d], to_f32(kr[d]), sc);
      const float m_new = fmaxf(m, sc);
      const float alpha = exp2f(m - m_new);  // 0 on this thread's first key
      const float p = exp2f(sc - m_new);
      l = fmaf(l, alpha, p);
#pragma unroll
      for (int d = 0; d < DP; ++d) o[d] = d < D ? fmaf(p, to_f32(vr[d]), o[d] * alpha) : 0.0f;
      m = m_new;
    }
  }

  // Merge: block max, rescale each partial to it, then sum (warp shuffles, then across warps).
  float mx = m;
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (lane == 0) warp_max[warp] = mx;
  __syncthreads();
  float block_max = warp_max[0];
  for (int w = 1; w < kWarps; ++w) block_max = fmaxf(block_max, warp_max[w]);  // finite: there are keys
  const float a = exp2f(m - block_max);  // 0 for a thread that saw no key (m = -inf)
  l *= a;
  for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
  if (lane == 0) warp_sum[warp][DP] = l;
#pragma unroll
  for (int d = 0; d < DP; ++d) {
    float v = o[d] * a;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sum[warp][d] = v;
  }
  __syncthreads();
  float denom = 0.0f;
  for (int w = 0; w < kWarps; ++w) denom += warp_sum[w][DP];
  float* dst = out + (static_cast<int64_t>(row) * q.heads + h) * D;
  for (int d = threadIdx.x; d < D; d += kDecodeThreads) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) v += warp_sum[w][d];
    dst[d] = v / denom;
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel (sm_80+): 4 warps x 16 or 32 query rows, key tiles of 64, head_dim 64.

constexpr int kMmaWarps = 4;
constexpr int kMmaKeys = 64;              // keys per tile
constexpr int kMmaDim = 64;               // head_dim
constexpr int kSmemRow = kMmaDim + 8;     // padded row (halves): conflict-free fragment loads

template <typename T>
struct MmaTraits;
template <>
struct MmaTraits<__half> {
  __device__ static uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);  // lo in the low 16 bits
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
  }
  __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_m16n8k16_f16(c, a, b0, b1);
  }
};
template <>
struct MmaTraits<__nv_bfloat16> {
  __device__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
  }
  __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_m16n8k16_bf16(c, a, b0, b1);
  }
};

// Position of the key walk: tile [t0, t0+nk) of segment si, which is keys [pos, pos+nk) of the
// whole walk (all segments in order).
template <typename T>
struct TileCursor {
  int si;
  int t0;
  int nk;
  int64_t pos;
  Segment<T> seg;
};

// The cursor at key `first` of the walk (segment si, offset t0; nk unset until settle).
template <typename T>
__device__ __forceinline__ TileCursor<T> seek(const KeyArgs& keys, int n_segs, int h, int64_t first) {
  TileCursor<T> c{0, 0, 0, first, {}};
  int64_t before = 0;
  while (c.si < n_segs) {
    const int n = segment_length(keys, c.si);
    if (before + n > first) break;
    before += n;
    ++c.si;
  }
  c.t0 = static_cast<int>(first - before);
  if (c.si < n_segs) c.seg = load_segment<T>(keys, c.si, h, kMmaDim);
  return c;
}

// First non-empty tile at or after (si, t0) that starts before key `end` of the walk; tiles stop at
// the segment's and at `end`. si == n_segs when the walk is done.
template <typename T>
__device__ __forceinline__ void settle(TileCursor<T>& c, const KeyArgs& keys, int n_segs, int h, int64_t end) {
  while (c.si < n_segs && c.pos < end) {
    if (c.t0 < c.seg.n) {
      const int64_t left = end - c.pos;
      c.nk = min(kMmaKeys, c.seg.n - c.t0);
      if (left < c.nk) c.nk = static_cast<int>(left);
      return;
    }
    ++c.si;
    c.t0 = 0;
    if (c.si < n_segs) c.seg = load_segment<T>(keys, c.si, h, kMmaDim);
  }
  c.si = n_segs;
  c.nk = 0;
}

// Stages K and V rows [t0, t0+nk) of the cursor's segment into shared memory; rows >= nk are zeroed.
template <typename T>
__device__ __forceinline__ void stage_tile(const TileCursor<T>& c, uint16_t (*ks)[kSmemRow], uint16_t (*vs)[kSmemRow]) {
  constexpr int kChunks = kMmaDim / 8;  // 16-byte chunks per row
  const bool aligned = ((reinterpret_cast<uintptr_t>(c.seg.k) | reinterpret_cast<uintptr_t>(c.seg.v)) % 16 == 0) &&
                       (c.seg.stride * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  for (int idx = threadIdx.x; idx < kMmaKeys * kChunks; idx += kMmaWarps * 32) {
    const int r = idx / kChunks, ch = idx % kChunks;
    uint16_t* kd = &ks[r][ch * 8];
    uint16_t* vd = &vs[r][ch * 8];
    if (r >= c.nk) {
      *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const int64_t off = (c.t0 + r) * c.seg.stride + ch * 8;
    const T* kg = c.seg.k + off;
    const T* vg = c.seg.v + off;
    if (aligned) {
      ptx::cp_async16(kd, kg);
      ptx::cp_async16(vd, vg);
    } else {
      const uint16_t* kg16 = reinterpret_cast<const uint16_t*>(kg);
      const uint16_t* vg16 = reinterpret_cast<const uint16_t*>(vg);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        kd[e] = kg16[e];
        vd[e] = vg16[e];
      }
    }
  }
}

// Where split-key blocks leave their partial softmax states (CudaAttentionParams::kv_splits), per
// range z, query row r and head h (rh = (z * n_q + r) * heads + h):
//   o   f32 [splits, n_q, heads, 64]  the unnormalised output sum_k 2^(s_k - m) v_k
//   ml  f32 [splits, n_q, heads, 2]   (m, l): the running max (log2 domain) and sum_k 2^(s_k - m)
struct PartialArgs {
  float* o;
  float* ml;
};

// RT row tiles of 16 query rows per warp: every K / V fragment loaded from shared memory feeds RT
// mmas, so RT = 2 halves the shared-memory traffic per FLOP at the price of twice the accumulators.
// blockIdx.z picks key range z of gridDim.z; one range writes `out`, several write `part`.
template <typename T, int RT>
__global__ void __launch_bounds__(kMmaWarps * 32) attn_mma_kernel(QueryArgs q, KeyArgs keys, float* out, float qscale,
                                                                  PartialArgs part) {
  using Tr = MmaTraits<T>;
  alignas(16) __shared__ uint16_t ks[2][kMmaKeys][kSmemRow];
  alignas(16) __shared__ uint16_t vs[2][kMmaKeys][kSmemRow];
  const int h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
  // Row tile i of this warp: rows base + 16i + g (fragment rows 0-7) and + 8 (rows 8-15).
  const int base = (blockIdx.x * kMmaWarps + warp) * 16 * RT;

  // Q fragments (A operand, row-major 16x16 per k-chunk of 16 dims), rounded to T.
  uint32_t qa[RT][kMmaDim / 16][4];
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const int r0 = base + 16 * i + g, r1 = r0 + 8;
    const float* q0 = q.data + static_cast<int64_t>(r0) * q.token_stride + static_cast<int64_t>(h) * kMmaDim;
    const float* q1 = q.data + static_cast<int64_t>(r1) * q.token_stride + static_cast<int64_t>(h) * kMmaDim;
    const bool v0 = r0 < q.n_tokens, v1 = r1 < q.n_tokens;
#pragma unroll
    for (int c = 0; c < kMmaDim / 16; ++c) {
      const int d = c * 16 + 2 * t;
      qa[i][c][0] = v0 ? Tr::pack(q0[d], q0[d + 1]) : 0u;
      qa[i][c][1] = v1 ? Tr::pack(q1[d], q1[d + 1]) : 0u;
      qa[i][c][2] = v0 ? Tr::pack(q0[d + 8], q0[d + 9]) : 0u;
      qa[i][c][3] = v1 ? Tr::pack(q1[d + 8], q1[d + 9]) : 0u;
    }
  }

  float o[RT][kMmaDim / 8][4];
  float m[RT][2], l[RT][2];  // running max (log2 domain) / this thread's partial sums of rows g, g + 8
#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int j = 0; j < kMmaDim / 8; ++j) o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.0f;
    m[i][0] = m[i][1] = -INFINITY;
    l[i][0] = l[i][1] = 0.0f;
  }

  const int n_segs = keys.num_entries + keys.num_dspans + keys.num_spans;
  // This block's keys: range blockIdx.z of gridDim.z equal ranges of the walk.
  const int64_t key_end = keys.n_keys * (blockIdx.z + 1) / gridDim.z;
  TileCursor<T> cur = seek<T>(keys, n_segs, h, keys.n_keys * blockIdx.z / gridDim.z);
  settle(cur, keys, n_segs, h, key_end);
  if (cur.si < n_segs) stage_tile(cur, ks[0], vs[0]);
  ptx::cp_async_commit();

  int stage = 0;
  while (cur.si < n_segs) {
    TileCursor<T> nxt = cur;
    nxt.t0 += cur.nk;
    nxt.pos += cur.nk;
    settle(nxt, keys, n_segs, h, key_end);
    if (nxt.si < n_segs) {
      stage_tile(nxt, ks[stage ^ 1], vs[stage ^ 1]);
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();

    // S = Q K^T for this warp's rows x 64 keys: s[i][j] covers keys 8j..8j+7 of row tile i. One
    // ldmatrix.x4 loads keys 8j..8j+7 x dims 32cp..32cp+31: the (b0, b1) pairs of dim chunks 2cp and 2cp+1.
    float s[RT][kMmaKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kMmaKeys / 8; ++j) {
#pragma unroll
      for (int i = 0; i < RT; ++i) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
      const uint16_t* krow = ks[stage][8 * j + lane % 8] + (lane / 8) * 8;
#pragma unroll
      for (int cp = 0; cp < kMmaDim / 32; ++cp) {
        uint32_t kb[4];
        ptx::ldmatrix_x4<false>(kb, krow + cp * 32);
#pragma unroll
        for (int i = 0; i < RT; ++i) {
          Tr::mma(s[i][j], qa[i][2 * cp], kb[0], kb[1]);
          Tr::mma(s[i][j], qa[i][2 * cp + 1], kb[2], kb[3]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < RT; ++i) {
      // Scale, mask keys past the tile, row max (the 4 threads of a group share rows g / g + 8).
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < kMmaKeys / 8; ++j) {
        const int col = 8 * j + 2 * t;
        s[i][j][0] = col < cur.nk ? s[i][j][0] * qscale : -INFINITY;
        s[i][j][1] = col + 1 < cur.nk ? s[i][j][1] * qscale : -INFINITY;
        s[i][j][2] = col < cur.nk ? s[i][j][2] * qscale : -INFINITY;
        s[i][j][3] = col + 1 < cur.nk ? s[i][j][3] * qscale : -INFINITY;
        mx0 = fmaxf(mx0, fmaxf(s[i][j][0], s[i][j][1]));
        mx1 = fmaxf(mx1, fmaxf(s[i][j][2], s[i][j][3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float mn0 = fmaxf(m[i][0], mx0), mn1 = fmaxf(m[i][1], mx1);  // finite: every tile has a key
      const float a0 = exp2f(m[i][0] - mn0), a1 = exp2f(m[i][1] - mn1);
      m[i][0] = mn0;
      m[i][1] = mn1;
      l[i][0] *= a0;
      l[i][1] *= a1;
#pragma unroll
      for (int j = 0; j < kMmaDim / 8; ++j) {
        o[i][j][0] *= a0;
        o[i][j][1] *= a0;
        o[i][j][2] *= a1;
        o[i][j][3] *= a1;
      }
#pragma unroll
      for (int j = 0; j < kMmaKeys / 8; ++j) {
        s[i][j][0] = exp2f(s[i][j][0] - mn0);
        s[i][j][1] = exp2f(s[i][j][1] - mn0);
        s[i][j][2] = exp2f(s[i][j][2] - mn1);
        s[i][j][3] = exp2f(s[i][j][3] - mn1);
        l[i][0] += s[i][j][0] + s[i][j][1];
        l[i][1] += s[i][j][2] + s[i][j][3];
      }
    }
    // O += P V: P's accumulator layout is the A layout of the next mma (keys 16kc..16kc+15). One
    // ldmatrix.x4.trans loads keys 16kc..16kc+15 x dims 16jp..16jp+15 transposed: the (b0, b1) pairs
    // (keys 2t, 2t+1 and 2t+8, 2t+9 at dim g) of dim groups 2jp and 2jp+1.
    const uint16_t* vrow = vs[stage][lane % 8 + ((lane / 8) % 2) * 8] + (lane / 16) * 8;
#pragma unroll
    for (int kc = 0; kc < kMmaKeys / 16; ++kc) {
      uint32_t pa[RT][4];
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        pa[i][0] = Tr::pack(s[i][2 * kc][0], s[i][2 * kc][1]);
        pa[i][1] = Tr::pack(s[i][2 * kc][2], s[i][2 * kc][3]);
        pa[i][2] = Tr::pack(s[i][2 * kc + 1][0], s[i][2 * kc + 1][1]);
        pa[i][3] = Tr::pack(s[i][2 * kc + 1][2], s[i][2 * kc + 1][3]);
      }
#pragma unroll
      for (int jp = 0; jp < kMmaDim / 16; ++jp) {
        uint32_t vb[4];
        ptx::ldmatrix_x4<true>(vb, vrow + 16 * kc * kSmemRow + 16 * jp);
#pragma unroll
        for (int i = 0; i < RT; ++i) {
          Tr::mma(o[i][2 * jp], pa[i], vb[0], vb[1]);
          Tr::mma(o[i][2 * jp + 1], pa[i], vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // this stage is overwritten by the load issued in the next iteration
    cur = nxt;
    stage ^= 1;
  }

#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = l[i][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = base + 16 * i + g + 8 * half;
      if (r >= q.n_tokens) continue;
      if (gridDim.z == 1) {
        const float inv = 1.0f / sum;
        float* dst = out + (static_cast<int64_t>(r) * q.heads + h) * kMmaDim;
#pragma unroll
        for (int j = 0; j < kMmaDim / 8; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j + 2 * t) =
              make_float2(o[i][j][2 * half] * inv, o[i][j][2 * half + 1] * inv);
      } else {
        const int64_t rh = (static_cast<int64_t>(blockIdx.z) * q.n_tokens + r) * q.heads + h;
        float* dst = part.o + rh * kMmaDim;
#pragma unroll
        for (int j = 0; j < kMmaDim / 8; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j + 2 * t) = make_float2(o[i][j][2 * half], o[i][j][2 * half + 1]);
        if (t == 0) *reinterpret_cast<float2*>(part.ml + 2 * rh) = make_float2(m[i][half], sum);
      }
    }
  }
}

// Merges the partial states of `splits` key ranges (PartialArgs) into `out`: per row and head, with
// M the largest m_s, out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s. One thread per output float.
constexpr int kMergeThreads = 256;

__global__ void __launch_bounds__(kMergeThreads) attn_merge_kernel(PartialArgs part, int splits, int64_t rows_heads,
                                                                   float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kMergeThreads + threadIdx.x;
  if (idx >= rows_heads * kMmaDim) return;
  const int64_t rh = idx / kMmaDim;
  float mx = -INFINITY;
  for (int z = 0; z < splits; ++z) mx = fmaxf(mx, part.ml[2 * (z * rows_heads + rh)]);  // finite: no range is empty
  float num = 0.0f, den = 0.0f;
  for (int z = 0; z < splits; ++z) {
    const float w = exp2f(part.ml[2 * (z * rows_heads + rh)] - mx);
    den = fmaf(w, part.ml[2 * (z * rows_heads + rh) + 1], den);
    num = fmaf(w, part.o[z * rows_heads * kMmaDim + idx], num);
  }
  out[idx] = num / den;
}

// ---------------------------------------------------------------------------------------------
// Host side.

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void check_device_ptr(std::string_view fn, const void* p, const char* what) {
  LINGBOT_CHECK(is_device_pointer(p), fn, ": ", what, " is not CUDA device memory");
}

void validate_query(std::string_view fn, const kernels::QueryView& q, const float* out) {
  kernels::check_query(fn, q, out);
  LINGBOT_CHECK(q.head_dim <= kMaxCudaHeadDim, fn, ": query head_dim ", q.head_dim,
                " exceeds the CUDA kernels' maximum ", kMaxCudaHeadDim);
  if (q.n_tokens > 0) {
    check_device_ptr(fn, q.data, "query data");
    check_device_ptr(fn, out, "out");
  }
}

void add_spans(std::string_view fn, const kernels::QueryView& q, std::span<const kernels::KVSpan> spans,
               KeyArgs& args, DType& dtype, bool& have_dtype, int64_t& n_keys) {
  const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim;
  for (size_t i = 0; i < spans.size(); ++i) {
    const kernels::KVSpan& s = spans[i];
    if (!kernels::check_kv_span(fn, i, s, row)) continue;
    LINGBOT_CHECK(args.num_spans < kMaxCudaSpans, fn, ": more than ", kMaxCudaSpans,
                  " non-empty kv spans (CUDA kernel limit), got span ", i);
    if (have_dtype) {
      LINGBOT_CHECK(s.dtype == dtype, fn, ": kv span ", i, ": dtype ", dtype_name(s.dtype),
                    " differs from the other keys' dtype ", dtype_name(dtype),
                    " (the CUDA kernels take one K/V dtype)");
    }
    dtype = s.dtype;
    have_dtype = true;
    check_device_ptr(fn, s.k, "kv span k");
    check_device_ptr(fn, s.v, "kv span v");
    args.span_k[args.num_spans] = s.k;
    args.span_v[args.num_spans] = s.v;
    args.span_stride[args.num_spans] = s.token_stride;
    args.span_n[args.num_spans] = s.n_tokens;
    ++args.num_spans;
    n_keys += s.n_tokens;
  }
}

int current_sm_major() {
  int dev = 0;
  LINGBOT_CUDA_CHECK(cudaGetDevice(&dev));
  int major = 0;
  LINGBOT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

int current_sm_count() {
  int dev = 0;
  LINGBOT_CUDA_CHECK(cudaGetDevice(&dev));
  int sms = 0;
  LINGBOT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// Blocks of the unsplit tensor-core grid and how many of them one wave of the device holds.
template <typename T, int RT>
void mma_grid_fill(int n_q, int heads, int64_t& blocks, int64_t& wave_blocks) {
  const int rows_per_block = 16 * RT * kMmaWarps;
  blocks = int64_t{(n_q + rows_per_block - 1) / rows_per_block} * heads;
  int per_sm = 0;
  LINGBOT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_mma_kernel<T, RT>, kMmaWarps * 32, 0));
  wave_blocks = int64_t{per_sm} * current_sm_count();
}

// The tensor-core kernel over `splits` key ranges (kv_splits_for), then the merge when there are several.
template <typename T, int RT>
void launch_mma(std::string_view fn, const QueryArgs& qa, const KeyArgs& ka, float* out, float qscale, int64_t splits,
                const CudaAttentionParams& params) {
  const int rows_per_block = 16 * RT * kMmaWarps;
  dim3 grid((qa.n_tokens + rows_per_block - 1) / rows_per_block, qa.heads);
  PartialArgs part{nullptr, nullptr};
  const int64_t rows_heads = int64_t{qa.n_tokens} * qa.heads;
  if (splits > 1) {
    LINGBOT_CHECK(params.workspace != nullptr, fn, ": kv_splits ", splits,
                  " needs a workspace (CudaAttentionParams::workspace) for the partial results");
    part.o = params.workspace->reserve(splits * rows_heads * (kMmaDim + 2));
    part.ml = part.o + splits * rows_heads * kMmaDim;
  }
  grid.z = static_cast<unsigned>(splits);
  attn_mma_kernel<T, RT><<<grid, kMmaWarps * 32, 0, params.stream>>>(qa, ka, out, qscale, part);
  if (splits > 1) {
    const int64_t blocks = (rows_heads * kMmaDim + kMergeThreads - 1) / kMergeThreads;
    LINGBOT_CHECK(blocks <= INT_MAX, fn, ": ", qa.n_tokens, " query rows x ", qa.heads,
                  " heads exceed the merge kernel's grid");
    const dim3 merge_grid(static_cast<unsigned>(blocks));
    attn_merge_kernel<<<merge_grid, kMergeThreads, 0, params.stream>>>(part, static_cast<int>(splits), rows_heads, out);
  }
}

// The tensor-core kernel's key ranges for this call: the requested count, or Auto's choice (1 without
// a workspace), at most one range per key.
int64_t kv_splits_for(std::string_view fn, int n_q, int heads, int64_t n_keys, DType dtype, int rows_per_warp,
                      const CudaAttentionParams& params) {
  LINGBOT_CHECK(params.kv_splits >= 0 && params.kv_splits <= kMaxKvSplits, fn, ": kv_splits must be 0 (auto) to ",
                kMaxKvSplits, ", got ", params.kv_splits);
  int64_t splits = params.kv_splits;
  if (splits == 0 && params.workspace != nullptr) {
    int64_t blocks = 0, wave = 0;
    if (dtype == DType::F16) {
      rows_per_warp == 32 ? mma_grid_fill<__half, 2>(n_q, heads, blocks, wave)
                          : mma_grid_fill<__half, 1>(n_q, heads, blocks, wave);
    } else {
      rows_per_warp == 32 ? mma_grid_fill<__nv_bfloat16, 2>(n_q, heads, blocks, wave)
                          : mma_grid_fill<__nv_bfloat16, 1>(n_q, heads, blocks, wave);
    }
    splits = choose_kv_splits(blocks, wave, n_keys);
  }
  return std::clamp<int64_t>(std::min(splits, n_keys), 1, kMaxKvSplits);
}

template <typename T>
void launch_simt(const QueryArgs& qa, const KeyArgs& ka, float* out, float qscale, cudaStream_t stream) {
  if (qa.n_tokens <= kDecodeMaxQueries) {
    const dim3 grid(qa.n_tokens, qa.heads);
    if (qa.head_dim <= 64) {
      attn_decode_kernel<T, 64><<<grid, kDecodeThreads, 0, stream>>>(qa, ka, out, qscale);
    } else {
      attn_decode_kernel<T, 128><<<grid, kDecodeThreads, 0, stream>>>(qa, ka, out, qscale);
    }
    return;
  }
  // head_dim rounded up to a power of two from 16: small heads do not pay for 64 dims.
  const dim3 grid((qa.n_tokens + kSimtRows - 1) / kSimtRows, qa.heads);
  if (qa.head_dim <= 16) {
    attn_simt_kernel<T, 16><<<grid, kSimtRows, 0, stream>>>(qa, ka, out, qscale);
  } else if (qa.head_dim <= 32) {
    attn_simt_kernel<T, 32><<<grid, kSimtRows, 0, stream>>>(qa, ka, out, qscale);
  } else if (qa.head_dim <= 64) {
    attn_simt_kernel<T, 64><<<grid, kSimtRows, 0, stream>>>(qa, ka, out, qscale);
  } else {
    attn_simt_kernel<T, 128><<<grid, kSimtRows, 0, stream>>>(qa, ka, out, qscale);
  }
}

void launch(std::string_view fn, const kernels::QueryView& q, const KeyArgs& ka, DType dtype, float* out,
            const CudaAttentionParams& params) {
  LINGBOT_CHECK(std::isfinite(params.scale), fn, ": scale must be finite, got ", params.scale);
  if (q.n_tokens == 0) return;
  LINGBOT_CHECK(q.heads <= 65535, fn, ": query heads ", q.heads, " exceeds the CUDA grid limit 65535");
  const AttentionImpl impl = resolve_attention_impl(params.impl, dtype, q.head_dim);
  const QueryArgs qa{q.data, q.token_stride, q.n_tokens, q.heads, q.head_dim};
  const float qscale = params.scale * kLog2e;
  if (impl == AttentionImpl::TensorCore) {
    LINGBOT_CHECK(params.rows_per_warp == 0 || params.rows_per_warp == 16 || params.rows_per_warp == 32, fn,
                  ": rows_per_warp must be 0 (default), 16 or 32, got ", params.rows_per_warp);
    const int rows_per_warp = params.rows_per_warp ? params.rows_per_warp : kDefaultRowsPerWarp;
    const int64_t splits = kv_splits_for(fn, q.n_tokens, q.heads, ka.n_keys, dtype, rows_per_warp, params);
    if (dtype == DType::F16) {
      if (rows_per_warp == 32) {
        launch_mma<__half, 2>(fn, qa, ka, out, qscale, splits, params);
      } else {
        launch_mma<__half, 1>(fn, qa, ka, out, qscale, splits, params);
      }
    } else {
      if (rows_per_warp == 32) {
        launch_mma<__nv_bfloat16, 2>(fn, qa, ka, out, qscale, splits, params);
      } else {
        launch_mma<__nv_bfloat16, 1>(fn, qa, ka, out, qscale, splits, params);
      }
    }
  } else {
    switch (dtype) {
      case DType::F32: launch_simt<float>(qa, ka, out, qscale, params.stream); break;
      case DType::F16: launch_simt<__half>(qa, ka, out, qscale, params.stream); break;
      case DType::BF16: launch_simt<__nv_bfloat16>(qa, ka, out, qscale, params.stream); break;
    }
  }
  LINGBOT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::Auto: return "auto";
    case AttentionImpl::Simt: return "simt";
    case AttentionImpl::TensorCore: return "tensor-core";
  }
  return "?";
}

AttentionImpl parse_attention_impl(const char* name) {
  const std::string_view n = name ? name : "";
  if (n == "auto") return AttentionImpl::Auto;
  if (n == "simt") return AttentionImpl::Simt;
  if (n == "tensor-core") return AttentionImpl::TensorCore;
  throw Error(detail::concat("unknown CUDA attention kernel '", n, "' (expected auto, simt or tensor-core)"));
}

AttentionImpl resolve_attention_impl(AttentionImpl requested, DType kv_dtype, int head_dim) {
  const bool mma_ok = kv_dtype != DType::F32 && head_dim == kMmaDim;
  switch (requested) {
    case AttentionImpl::Simt: return AttentionImpl::Simt;
    case AttentionImpl::TensorCore:
      LINGBOT_CHECK(mma_ok, "tensor-core attention needs f16/bf16 K/V and head_dim ", kMmaDim, ", got ",
                    dtype_name(kv_dtype), " and head_dim ", head_dim);
      LINGBOT_CHECK(current_sm_major() >= 8, "tensor-core attention needs compute capability 8.0 or newer");
      return AttentionImpl::TensorCore;
    case AttentionImpl::Auto: break;
  }
  return mma_ok && current_sm_major() >= 8 ? AttentionImpl::TensorCore : AttentionImpl::Simt;
}

int planned_kv_splits(int n_queries, int heads, int head_dim, int64_t n_keys, DType kv_dtype,
                      const CudaAttentionParams& params) {
  if (resolve_attention_impl(params.impl, kv_dtype, head_dim) != AttentionImpl::TensorCore || n_queries <= 0 ||
      n_keys <= 0)
    return 1;
  const int rows_per_warp = params.rows_per_warp ? params.rows_per_warp : kDefaultRowsPerWarp;
  return static_cast<int>(kv_splits_for("planned_kv_splits", n_queries, heads, n_keys, kv_dtype, rows_per_warp, params));
}

void paged_attention(const kernels::QueryView& q, const kernels::PagePoolView& pool, const DevicePageTable& table,
                     std::span<const kernels::KVSpan> extra, float* out, const CudaAttentionParams& params) {
  paged_attention(q, pool, table, DeviceSpanRange{}, extra, out, params);
}

namespace {

// Keys = the table's entries in `pool` (table_keys tokens), then `num_dspans` device-resident spans of
// dtype `dspan_dtype` (dspan_keys tokens), then `extra`. The caller has checked what only it can
// (table geometry, resident spans' row).
void run_paged(std::string_view fn, const kernels::QueryView& q, const kernels::PagePoolView& pool,
               const kernels::PageTableView& tv, int64_t table_keys, const DeviceSpan* dspans, int num_dspans,
               int64_t dspan_keys, DType dspan_dtype, std::span<const kernels::KVSpan> extra, float* out,
               const CudaAttentionParams& params) {
  KeyArgs ka{};
  DType dtype = DType::F32;
  bool have_dtype = false;
  int64_t n_keys = 0;
  if (tv.num_entries > 0) {
    kernels::check_pool_matches_query(fn, pool, q, tv.num_entries);
    check_device_ptr(fn, pool.data, "page pool data");
    const int64_t row = static_cast<int64_t>(pool.heads) * pool.head_dim;
    ka.pool = pool.data;
    ka.row = row;
    ka.kv_offset = static_cast<int64_t>(pool.page_size) * row;
    ka.page_stride = 2 * ka.kv_offset;
    ka.page_ids = tv.page_ids;
    ka.start = tv.start;
    ka.len = tv.len;
    ka.num_entries = tv.num_entries;
    dtype = pool.dtype;
    have_dtype = true;
    n_keys += table_keys;
  }
  if (num_dspans > 0) {
    if (have_dtype) {
      LINGBOT_CHECK(dspan_dtype == dtype, fn, ": device spans dtype ", dtype_name(dspan_dtype),
                    " differs from the page pool dtype ", dtype_name(dtype), " (the CUDA kernels take one K/V dtype)");
    }
    n_keys += dspan_keys;
    ka.dspans = dspans;
    ka.num_dspans = num_dspans;
    dtype = dspan_dtype;
    have_dtype = true;
  }
  add_spans(fn, q, extra, ka, dtype, have_dtype, n_keys);
  LINGBOT_CHECK(n_keys > 0, fn, ": no visible keys (page table and extra spans are empty)");
  ka.n_keys = n_keys;
  launch(fn, q, ka, dtype, out, params);
}

}  // namespace

void paged_attention(const kernels::QueryView& q, const kernels::PagePoolView& pool, const DevicePageTable& table,
                     const DeviceSpanRange& device_spans, std::span<const kernels::KVSpan> extra, float* out,
                     const CudaAttentionParams& params) {
  constexpr std::string_view fn = "paged_attention";
  validate_query(fn, q, out);
  if (table.num_entries() > 0) {
    LINGBOT_CHECK(pool.num_pages == table.num_pages() && pool.page_size == table.page_size(), fn,
                  ": page pool geometry (num_pages ", pool.num_pages, ", page_size ", pool.page_size,
                  ") differs from the one the page table was validated against (num_pages ", table.num_pages(),
                  ", page_size ", table.page_size(), ")");
  }
  const DeviceSpan* dspans = nullptr;
  int64_t dspan_keys = 0;
  DType dspan_dtype = DType::F32;
  if (device_spans.count > 0) {
    const DeviceSpanTable& dt = *device_spans.table;
    const int64_t row = static_cast<int64_t>(q.heads) * q.head_dim;
    LINGBOT_CHECK(dt.row() == row, fn, ": device spans were uploaded for heads*head_dim = ", dt.row(),
                  ", query has ", row);
    dspans = dt.device_data() + device_spans.first;
    dspan_keys = dt.num_keys(device_spans.first, device_spans.count);
    dspan_dtype = dt.dtype();
  }
  run_paged(fn, q, pool, table.view(), table.num_keys(), dspans, device_spans.count, dspan_keys, dspan_dtype, extra,
            out, params);
}

void attention(const kernels::QueryView& q, const kernels::VisibleKV& keys, float* out,
               const CudaAttentionParams& params) {
  constexpr std::string_view fn = "attention";
  validate_query(fn, q, out);
  kernels::check_query_matches_keys(fn, q, keys);
  if (keys.layout == kernels::KeyLayout::Spans) {
    LINGBOT_CHECK(keys.resident.count == 0, fn, ": layout Spans with ", keys.resident.count, " resident spans");
    dense_attention(q, keys.spans, out, params);
    return;
  }
  // Resident spans are the records of a DeviceSpanTable (the CUDA cache's special runs), in the pool's dtype.
  run_paged(fn, q, keys.pool, keys.table, keys.table_keys, static_cast<const DeviceSpan*>(keys.resident.records),
            keys.resident.count, keys.resident.keys, keys.pool.dtype, keys.spans, out, params);
}

void dense_attention(const kernels::QueryView& q, std::span<const kernels::KVSpan> kv, float* out,
                     const CudaAttentionParams& params) {
  constexpr std::string_view fn = "dense_attention";
  validate_query(fn, q, out);
  KeyArgs ka{};
  DType dtype = DType::F32;
  bool have_dtype = false;
  int64_t n_keys = 0;
  add_spans(fn, q, kv, ka, dtype, have_dtype, n_keys);
  LINGBOT_CHECK(n_keys > 0, fn, ": no visible keys (kv spans are empty)");
  ka.n_keys = n_keys;
  launch(fn, q, ka, dtype, out, params);
}

}  // namespace lingbot::cuda
