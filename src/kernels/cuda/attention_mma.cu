// The tensor-core attention kernel (sm_80+, see attention.cu): one warp per 16 or 32 query rows,
// mma.sync m16n8k16 (f16/bf16 in, f32 accumulate), head_dim 64, K/V tiles double-buffered in shared
// memory with cp.async, B fragments loaded with ldmatrix (.trans for V); optionally over several key
// ranges (split-KV) merged by attn_merge_kernel.
#include <climits>
#include <cmath>
#include <cstring>

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ptx.cuh"

namespace lingbot::cuda::attn {
namespace {

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel (sm_80+): 4 warps x 16 or 32 query rows, key tiles of 64, head_dim 64.

constexpr int kMmaWarps = 4;
constexpr int kMmaKeys = 64;              // keys per tile
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
  __device__ static float round(float x) { return __half2float(__float2half_rn(x)); }
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
  __device__ static float round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
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

  // Q fragments (A operand, row-major 16x16 per k-chunk of 16 dims): q * qscale rounded to T once, as
  // the CPU's bf16 kernel rounds it (scores then come out in the log2 domain).
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
      qa[i][c][0] = v0 ? Tr::pack(q0[d] * qscale, q0[d + 1] * qscale) : 0u;
      qa[i][c][1] = v1 ? Tr::pack(q1[d] * qscale, q1[d + 1] * qscale) : 0u;
      qa[i][c][2] = v0 ? Tr::pack(q0[d + 8] * qscale, q0[d + 9] * qscale) : 0u;
      qa[i][c][3] = v1 ? Tr::pack(q1[d + 8] * qscale, q1[d + 9] * qscale) : 0u;
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
      // Mask keys past the tile, row max (the 4 threads of a group share rows g / g + 8).
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < kMmaKeys / 8; ++j) {
        const int col = 8 * j + 2 * t;
        s[i][j][0] = col < cur.nk ? s[i][j][0] : -INFINITY;
        s[i][j][1] = col + 1 < cur.nk ? s[i][j][1] : -INFINITY;
        s[i][j][2] = col < cur.nk ? s[i][j][2] : -INFINITY;
        s[i][j][3] = col + 1 < cur.nk ? s[i][j][3] : -INFINITY;
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
      // The probabilities rounded to T here, as the PV mma takes them, and the row sums add those
      // rounded values: each output row is a convex combination of V rows (the CPU's bf16 contract).
#pragma unroll
      for (int j = 0; j < kMmaKeys / 8; ++j) {
        s[i][j][0] = Tr::round(exp2f(s[i][j][0] - mn0));
        s[i][j][1] = Tr::round(exp2f(s[i][j][1] - mn0));
        s[i][j][2] = Tr::round(exp2f(s[i][j][2] - mn1));
        s[i][j][3] = Tr::round(exp2f(s[i][j][3] - mn1));
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

int current_sm_count() {
  int dev = 0;
  LINGBOT_CUDA_CHECK(cudaGetDevice(&dev));
  int sms = 0;
  LINGBOT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace

template <typename T, int RT>
void mma_grid_fill(int n_q, int heads, int64_t& blocks, int64_t& wave_blocks) {
  const int rows_per_block = 16 * RT * kMmaWarps;
  blocks = int64_t{(n_q + rows_per_block - 1) / rows_per_block} * heads;
  int per_sm = 0;
  LINGBOT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_mma_kernel<T, RT>, kMmaWarps * 32, 0));
  wave_blocks = int64_t{per_sm} * current_sm_count();
}

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

template void mma_grid_fill<__half, 1>(int, int, int64_t&, int64_t&);
template void mma_grid_fill<__half, 2>(int, int, int64_t&, int64_t&);
template void mma_grid_fill<__nv_bfloat16, 1>(int, int, int64_t&, int64_t&);
template void mma_grid_fill<__nv_bfloat16, 2>(int, int, int64_t&, int64_t&);
template void launch_mma<__half, 1>(std::string_view, const QueryArgs&, const KeyArgs&, float*, float, int64_t,
                                   const CudaAttentionParams&);
template void launch_mma<__half, 2>(std::string_view, const QueryArgs&, const KeyArgs&, float*, float, int64_t,
                                   const CudaAttentionParams&);
template void launch_mma<__nv_bfloat16, 1>(std::string_view, const QueryArgs&, const KeyArgs&, float*, float, int64_t,
                                   const CudaAttentionParams&);
template void launch_mma<__nv_bfloat16, 2>(std::string_view, const QueryArgs&, const KeyArgs&, float*, float, int64_t,
                                   const CudaAttentionParams&);

}  // namespace lingbot::cuda::attn
