// The SIMT attention kernels (see attention.cu): f32 math over f32, f16 or bf16 K/V, any head_dim up
// to 128; attn_decode_kernel for a handful of query rows, attn_simt_kernel otherwise.
#include <cmath>

#include "kernels/cuda/attention_kernels.cuh"

namespace lingbot::cuda::attn {
namespace {

// ---------------------------------------------------------------------------------------------
// SIMT kernel: thread = one query row of one head; block = kSimtRows rows of one head.

constexpr int kSimtRows = 128;
constexpr int kSimtKeys = 32;  // keys per shared-memory tile

template <typename T, int DP>  // DP: head_dim rounded up to 16, 32, 64 or 128 (zero padding)
__global__ void __launch_bounds__(kSimtRows) attn_simt_kernel(QueryArgs q, KeyArgs keys, float* out, float qscale) {
  __shared__ float ks[kSimtKeys][DP];
  __shared__ float vs[kSimtKeys][DP];
  __shared__ float ps[kSimtKeys][kSimtRows];  // scores: column threadIdx.x is this thread's (no barrier)
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
      // The tile's scores go to this thread's column of ps, not to registers: the key loops then
      // need not be unrolled (only the head_dim loops are), which keeps qr and o in registers and
      // the kernel small (fully unrolled, DP = 128 took nvcc minutes per dtype and spilled).
      float tile_max = -INFINITY;
#pragma unroll 1
      for (int j = 0; j < kSimtKeys; ++j) {
        float acc = 0.0f;
#pragma unroll
        for (int d = 0; d < DP; ++d) acc = fmaf(qr[d], ks[j][d], acc);
        const float sj = j < nk ? acc : -INFINITY;
        ps[j][threadIdx.x] = sj;
        tile_max = fmaxf(tile_max, sj);
      }
      const float m_new = fmaxf(m, tile_max);  // finite: nk >= 1
      const float alpha = exp2f(m - m_new);    // 0 on the first tile (m = -inf)
      l *= alpha;
#pragma unroll
      for (int d = 0; d < DP; ++d) o[d] *= alpha;
#pragma unroll 1
      for (int j = 0; j < kSimtKeys; ++j) {
        const float p = exp2f(ps[j][threadIdx.x] - m_new);  // 0 for masked keys
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

}  // namespace

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

template void launch_simt<float>(const QueryArgs&, const KeyArgs&, float*, float, cudaStream_t);
template void launch_simt<__half>(const QueryArgs&, const KeyArgs&, float*, float, cudaStream_t);
template void launch_simt<__nv_bfloat16>(const QueryArgs&, const KeyArgs&, float*, float, cudaStream_t);

}  // namespace lingbot::cuda::attn
