#pragma once
// Internals of the CPU attention kernels (attention.cpp): flash-style tiling shared by the portable
// and the AVX2 inner kernels. Not a public interface.
//
// One work item = one head x one query group (<= kMaxQueryGroup rows, processed in tiles of
// <= kMaxQueryTile rows). Keys are visited in fixed blocks of kKeyBlock keys
// counted over the concatenation of all key segments (pages, then spans), so the arithmetic of an
// output row depends neither on the thread count nor on how the keys are split into pages.
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"
#include "lingbot/dtype.h"

namespace lingbot::kernels::detail {

inline constexpr int kKeyPanel = 16;       // keys per packed K panel (inner-kernel width)
inline constexpr int kKeyBlock = 128;      // keys per block (multiple of kKeyPanel)
inline constexpr int kRowGroup = 6;        // query rows per inner-kernel call
inline constexpr int kAmxRows = 16;        // query rows per AMX tile
inline constexpr int kMaxQueryTile = 48;   // query rows per S tile (multiple of kRowGroup and kAmxRows)
inline constexpr int kMaxQueryGroup = 336; // query rows per work item (multiple of kMaxQueryTile)
inline constexpr int kDimAlign = 16;       // head_dim is zero-padded to a multiple of this

// A run of consecutive visible keys: token t of head h has its K at k + (t*token_stride + h*head_dim)
// elements of dtype (V likewise).
struct KeySegment {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::F32;
  int64_t n_tokens = 0;
  int64_t token_stride = 0;
};

// Per-thread f32 working set of one work item; padding columns/rows stay zero.
struct AttnScratch {
  explicit AttnScratch(int head_dim);
  int dp;                   // head_dim rounded up to kDimAlign
  std::vector<float> q;     // [kMaxQueryGroup][dp], pre-scaled by scale*log2(e)
  std::vector<float> o;     // [kMaxQueryGroup][dp] unnormalised output accumulator
  std::vector<float> s;     // [kMaxQueryTile][kKeyBlock] scores, then probabilities
  std::vector<float> kp;    // [kKeyBlock/kKeyPanel][dp][kKeyPanel] K block, panel-packed
  std::vector<float> v;     // [kKeyBlock][dp] V block
  std::vector<float> m;     // [kMaxQueryGroup] running max (log2 domain)
  std::vector<float> l;     // [kMaxQueryGroup] running sum
  std::vector<float> alpha; // [kMaxQueryGroup] rescale factor of the current block
  std::vector<float> krows; // [kKeyPanel][dp] K rows of one panel before packing
};

// Inner kernels. rows is a multiple of kRowGroup, cols a multiple of kKeyPanel, dp of kDimAlign.
struct AttnKernels {
  // s[r*kKeyBlock + j] = sum_d q[r*dp + d] * K_j[d]   (K_j read from the packed panels kp)
  void (*qk)(const float* q, const float* kp, int rows, int cols, int dp, float* s);
  // Online-softmax update of each row over n_valid scores (log2 domain): updates m, l, sets alpha,
  // overwrites s with exp2(s - m_new) for j < n_valid and 0 for n_valid <= j < cols.
  void (*softmax)(float* s, int rows, int n_valid, int cols, float* m, float* l, float* alpha);
  // o[r*dp + c] = alpha[r] * o[r*dp + c] + sum_{j < n_keys} p[r*kKeyBlock + j] * v[j*dp + c]
  void (*pv)(const float* p, const float* v, const float* alpha, int rows, int n_keys, int dp, float* o);
  // dst[i] = float(src[i]) for i < n
  void (*convert)(const void* src, DType t, float* dst, int n);
  // Transposes kKeyPanel key rows [kKeyPanel][dp] into one packed panel [dp][kKeyPanel].
  void (*pack_k)(const float* rows, int dp, float* panel);
};

const AttnKernels& portable_kernels();
// Null when the CPU lacks AVX2/FMA/F16C (or the compiler cannot target them).
const AttnKernels* avx2_kernels();
// AVX2 set with AVX-512F matrix products (bit-identical results); null without AVX-512F.
const AttnKernels* avx512_kernels();
// The best kernels for this CPU (decided once, immutable afterwards).
const AttnKernels& select_kernels();

// Per-thread working set of one work item of the native-bf16 path (AttentionCompute::Bf16); bf16
// values are raw uint16 bit patterns; padding columns/rows stay zero.
struct AttnScratchBf16 {
  explicit AttnScratchBf16(int head_dim);
  int dp;                      // head_dim rounded up to kDimAlign
  std::vector<uint16_t> q;     // [kMaxQueryGroup][dp] bf16(q * scale * log2(e))
  std::vector<float> o;        // [kMaxQueryGroup][dp] unnormalised output accumulator
  std::vector<float> s;        // [kMaxQueryTile][kKeyBlock] scores
  std::vector<uint16_t> p;     // [kMaxQueryTile][kKeyBlock] bf16 probabilities
  std::vector<uint16_t> kp;    // [kKeyBlock/kKeyPanel][dp/2][kKeyPanel][2] K block: pairs of dims per key
  std::vector<uint16_t> vp;    // [kKeyBlock/2][dp][2] V block: pairs of consecutive keys per column
  std::vector<float> m;        // [kMaxQueryGroup] running max (log2 domain)
  std::vector<float> l;        // [kMaxQueryGroup] running sum of the rounded probabilities
  std::vector<float> alpha;    // [kMaxQueryGroup] rescale factor of the current block
};

// True when the CPU has AVX512_BF16 (and AVX-512F/BW) and the compiler can target it.
bool avx512bf16_available();
// True when additionally AMX-TILE/AMX-BF16 are there and the kernel granted the tile data state.
bool amx_bf16_available();

// Walks the concatenated key segments in order.
struct KeyCursor {
  size_t seg = 0;
  int64_t tok = 0;
  // Byte offset of the next key's head-h row in its segment, and that segment; then advances.
  const KeySegment& next(const std::vector<KeySegment>& segs, int h, int head_dim, int64_t& byte_off) {
    while (tok >= segs[seg].n_tokens) {
      ++seg;
      tok = 0;
    }
    const KeySegment& sg = segs[seg];
    byte_off = (tok * sg.token_stride + static_cast<int64_t>(h) * head_dim) * static_cast<int64_t>(dtype_size(sg.dtype));
    ++tok;
    return sg;
  }
};

// Attention of query rows [q0, q0+nq) (nq <= kMaxQueryGroup) of head h over all keys of segs;
// writes those rows of out. qscale = scale * log2(e).
void attend_group(const AttnKernels& kern, const QueryView& q, int h, int q0, int nq, float qscale,
                  const std::vector<KeySegment>& segs, int64_t n_keys, AttnScratch& scratch, float* out);

// Writes rows [q0, q0+nq) of head h of out: o[r][c] / l[r] for c < head_dim (o rows dp apart).
void write_rows(const QueryView& q, int h, int q0, int nq, int dp, const float* o, const float* l, float* out);

// attend_group for the native-bf16 path: every segment of segs is bf16; needs avx512bf16_available().
// use_amx: AMX tiles for QK^T and PV (needs amx_bf16_available() and scratch.dp % 32 == 0).
void attend_group_bf16(const QueryView& q, int h, int q0, int nq, float qscale, const std::vector<KeySegment>& segs,
                       int64_t n_keys, AttnScratchBf16& scratch, float* out, bool use_amx);

// The whole computation with a given kernel set: (head, query group) items over num_threads
// OpenMP threads. Inputs are already validated; n_keys = total tokens of segs (> 0).
void run_attention(const AttnKernels& kern, const QueryView& q, const std::vector<KeySegment>& segs, int64_t n_keys,
                   float* out, const AttentionParams& params);
// The same with the native-bf16 work items (segs all bf16, avx512bf16_available()).
void run_attention_bf16(const QueryView& q, const std::vector<KeySegment>& segs, int64_t n_keys, float* out,
                        const AttentionParams& params);

}  // namespace lingbot::kernels::detail
