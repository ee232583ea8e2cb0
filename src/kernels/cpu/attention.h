#pragma once
// CPU attention kernels. They know K/V storage only through the device-neutral views of
// kernels/attention_views.h (host pointers here): a page pool plus a page table (int32 arrays a GPU
// backend can copy as-is), or contiguous spans. No cache bookkeeping here.
// Softmax over all visible keys, scale given explicitly, no mask: padding is excluded by the page
// table's per-entry [start, start+len) slot range, never by zero keys.
#include <cstdint>
#include <span>

#include "kernels/attention_views.h"  // QueryView, PagePoolView, PageTableView, KVSpan
#include "lingbot/dtype.h"

namespace lingbot::kernels {

// How QK^T and PV are computed.
//
// F32: K/V are converted to f32 (exactly: f16/bf16 widen losslessly) and both products run as f32
// FMA chains; with f32 K/V this is the reference path.
//
// Bf16: both products run as bf16 dot products (vdpbf16ps) with f32 accumulation. Requires every
// K/V segment of the call to be bf16 and the CPU to have AVX512_BF16 (native_bf16_attention()); a
// call that asks for it otherwise throws. Numeric contract, per work item (head x query group):
//   - q * scale * log2(e) is rounded to bf16 (round to nearest even) once;
//   - K and V are used as stored (already bf16: no further rounding);
//   - scores, the running max, exp2 (to ~3e-6 relative) and the running sum stay f32;
//   - the probabilities exp2(s - m) are rounded to bf16 for PV, and the running sum adds those
//     rounded values, so each output row is a convex combination of V rows with weights
//     p~_j / sum p~_j (constant V gives that V up to f32 rounding); probabilities below 2^-126
//     of the row's running max count as 0;
//   - the output accumulator, its rescaling and the final 1/l stay f32.
// With bf16's unit roundoff u = 2^-8 this bounds each output element's error against exact
// attention by
//   0.5 * (exp(2*D) * (1+u)/(1-u) - 1) * max_j |v_j - out|,   D = u * scale * max_j sum_c |q_c k_jc|
// plus f32 rounding (tests/kernels/attention_test.cpp, NativeBf16Attention, checks this bound).
//
// Where the CPU has AMX (AMX-BF16 tiles, e.g. Xeon Sapphire Rapids and later) and head_dim is a
// multiple of 32, the Bf16 products run as AMX tile dot products (tdpbf16ps) instead: the same
// contract (bf16 products, f32 accumulation, the same rounded q and probabilities), about 5x the
// throughput; the two may differ in the last bits of f32 (the hardware's accumulation order).
//
// Auto: Bf16 where it is allowed (all K/V bf16 and native_bf16_attention()), else F32. The default.
enum class AttentionCompute : uint8_t { Auto, F32, Bf16 };

// The instructions of the Bf16 path. Auto: AMX tiles where available (amx_bf16_attention()) and
// head_dim % 32 == 0, else AVX512_BF16; Avx512Bf16 forces vdpbf16ps (A/B tests and benchmarks).
enum class Bf16Isa : uint8_t { Auto, Avx512Bf16 };

struct AttentionParams {
  float scale = 1.0f;   // usually 1/sqrt(head_dim)
  int num_threads = 1;  // results are bit-identical for any value (for a given compute path)
  AttentionCompute compute = AttentionCompute::Auto;  // F32 forces the f32 path (tests, A/B benchmarks)
  Bf16Isa bf16_isa = Bf16Isa::Auto;                    // instructions of the Bf16 path (see Bf16Isa)
};

// True when this CPU has AVX512_BF16 and the build targets it: AttentionCompute::Bf16 is available.
// Probed once; fixed for the process.
bool native_bf16_attention();

// True when this CPU has AMX-BF16, the OS granted this process the AMX tile state, and the build
// targets it: the Bf16 path then uses AMX tiles (see Bf16Isa). Probed once; fixed for the process.
bool amx_bf16_attention();

// The path (F32 or Bf16) a call asking for `compute` takes over K/V segments that are all
// `kv_dtype`; throws Error when Bf16 is asked for and not available.
AttentionCompute resolved_attention_compute(AttentionCompute compute, DType kv_dtype);

// "auto" | "f32" | "bf16"
const char* attention_compute_name(AttentionCompute c);

// Attention of q over the keys of `table` in `pool` followed by the keys of `extra` spans
// (e.g. a non-keyframe's own tokens, which are attended without being stored).
void paged_attention(const QueryView& q, const PagePoolView& pool, const PageTableView& table,
                     std::span<const KVSpan> extra, float* out, const AttentionParams& params);

// Attention of q over the concatenation of `kv` spans (dense caches, intra-frame attention).
void dense_attention(const QueryView& q, std::span<const KVSpan> kv, float* out, const AttentionParams& params);

// Attention of q over the keys a host KV cache handed out (KVCache::store): paged_attention over its
// pool, table and spans (layout Paged) or dense_attention over its spans (layout Spans). Throws when
// q's heads/head_dim differ from the keys' or the keys hold resident spans (a device backend's).
void attention(const QueryView& q, const VisibleKV& keys, float* out, const AttentionParams& params);

}  // namespace lingbot::kernels
