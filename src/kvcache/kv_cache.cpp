#include "kvcache/kv_cache.h"

#include <cstring>

#include "core/error.h"
#include "kvcache/dense_kv_cache.h"
#include "kvcache/frame_ledger.h"
#include "kvcache/paged_kv_cache.h"

namespace lingbot {

KVBackend parse_kv_backend(const std::string& name) {
  if (name == "paged") return KVBackend::Paged;
  if (name == "dense") return KVBackend::Dense;
  if (name == "dense-full") return KVBackend::DenseFull;
  throw Error("unknown KV backend '" + name + "' (expected paged, dense or dense-full)");
}

const char* kv_backend_name(KVBackend b) {
  switch (b) {
    case KVBackend::Paged: return "paged";
    case KVBackend::Dense: return "dense";
    case KVBackend::DenseFull: return "dense-full";
  }
  return "unknown";
}

int kept_specials_per_evicted_frame(const CacheOptions& o) {
  if (!o.cross_frame_special) return 0;
  return o.camera_only ? 1 : o.num_special_tokens;
}

void validate_cache_options(const CacheOptions& o) {
  LINGBOT_CHECK(o.num_blocks >= 1, "CacheOptions.num_blocks must be >= 1, got ", o.num_blocks);
  LINGBOT_CHECK(o.heads >= 1, "CacheOptions.heads must be >= 1, got ", o.heads);
  LINGBOT_CHECK(o.head_dim >= 1, "CacheOptions.head_dim must be >= 1, got ", o.head_dim);
  LINGBOT_CHECK(o.num_special_tokens >= 1, "CacheOptions.num_special_tokens must be >= 1, got ",
                o.num_special_tokens);
  LINGBOT_CHECK(o.tokens_per_frame > o.num_special_tokens, "CacheOptions.tokens_per_frame must be > num_special_tokens (",
                o.num_special_tokens, "), got ", o.tokens_per_frame);
  LINGBOT_CHECK(o.scale_frames >= 0, "CacheOptions.scale_frames must be >= 0, got ", o.scale_frames);
  LINGBOT_CHECK(o.sliding_window >= 1, "CacheOptions.sliding_window must be >= 1, got ", o.sliding_window);
  LINGBOT_CHECK(o.max_special_tokens >= 0, "CacheOptions.max_special_tokens must be >= 0 (0 = unlimited), got ",
                o.max_special_tokens);
  LINGBOT_CHECK(o.max_special_frames >= 0, "CacheOptions.max_special_frames must be >= 0 (0 = keep all), got ",
                o.max_special_frames);
  // Page slots and page-table entries are int32 (GPU-friendly); keep one page within range.
  const int64_t page_elems = int64_t{2} * o.tokens_per_frame * o.heads * o.head_dim;
  LINGBOT_CHECK(page_elems < (int64_t{1} << 40), "CacheOptions: page of ", o.tokens_per_frame, " tokens x ", o.heads,
                " heads x ", o.head_dim, " head_dim is too large");
}

std::unique_ptr<KVCache> make_kv_cache(KVBackend backend, const CacheOptions& options, Allocator& allocator) {
  switch (backend) {
    case KVBackend::Paged: return std::make_unique<PagedKVCache>(options, allocator);
    case KVBackend::Dense:
    case KVBackend::DenseFull: return std::make_unique<DenseKVCache>(options, allocator, backend);
  }
  throw Error("make_kv_cache: unknown backend");
}

namespace kvdetail {

const char* frame_mode_name(FrameMode m) {
  switch (m) {
    case FrameMode::ScalePhase: return "ScalePhase";
    case FrameMode::Keyframe: return "Keyframe";
    case FrameMode::NonKeyframe: return "NonKeyframe";
    case FrameMode::Deferred: return "Deferred";
  }
  return "unknown";
}

void check_begin_step(const CacheOptions& o, const StepState& step, const FrameLedger& ledger, FrameMode mode,
                      int n_frames) {
  LINGBOT_CHECK(!step.open, "begin_step: the previous ", frame_mode_name(step.mode),
                " step was not ended (call end_step first)");
  switch (mode) {
    case FrameMode::ScalePhase:
      LINGBOT_CHECK(n_frames >= 1 && n_frames <= o.scale_frames, "begin_step: ScalePhase n_frames must be in [1, scale_frames = ",
                    o.scale_frames, "], got ", n_frames);
      LINGBOT_CHECK(ledger.stored == 0, "begin_step: ScalePhase needs an empty cache, but ", ledger.stored,
                    " frames are stored (call reset() first)");
      break;
    case FrameMode::Keyframe:
    case FrameMode::NonKeyframe:
    case FrameMode::Deferred:
      LINGBOT_CHECK(n_frames == 1, "begin_step: ", frame_mode_name(mode), " takes n_frames = 1, got ", n_frames);
      break;
    default: throw Error("begin_step: unknown FrameMode " + std::to_string(static_cast<int>(mode)));
  }
}

void check_store(const CacheOptions& o, const StepState& step, int block, const kernels::KVSpan& kv) {
  LINGBOT_CHECK(step.open, "store: no step in progress (call begin_step first)");
  LINGBOT_CHECK(block >= 0 && block < o.num_blocks, "store: block ", block, " out of range [0, ", o.num_blocks, ")");
  const int64_t expected = int64_t{step.n_frames} * o.tokens_per_frame;
  LINGBOT_CHECK(kv.n_tokens == expected, "store: kv has ", kv.n_tokens, " tokens, expected ", expected,
                " (n_frames ", step.n_frames, " x tokens_per_frame ", o.tokens_per_frame, ")");
  LINGBOT_CHECK(kv.dtype == DType::F32, "store: kv dtype ", dtype_name(kv.dtype), " must be f32");
  const int64_t row = int64_t{o.heads} * o.head_dim;
  LINGBOT_CHECK(kv.token_stride >= row, "store: kv token_stride ", kv.token_stride, " < heads*head_dim ", row);
  LINGBOT_CHECK(kv.k && kv.v, "store: null k or v pointer");
}

void check_mark_block_written(const CacheOptions& o, const StepState& step, int block,
                              const std::vector<uint8_t>& written) {
  LINGBOT_CHECK(step.open && step.mode != FrameMode::NonKeyframe,
                "mark_block_written: no ScalePhase, Keyframe or Deferred step in progress");
  LINGBOT_CHECK(block >= 0 && block < o.num_blocks, "mark_block_written: block ", block, " out of range [0, ",
                o.num_blocks, ")");
  LINGBOT_CHECK(!written[static_cast<size_t>(block)], "mark_block_written: block ", block,
                " was already written in this ", frame_mode_name(step.mode), " step");
}

void check_special_cap(const CacheOptions& o, int64_t tokens) {
  LINGBOT_CHECK(o.max_special_tokens == 0 || tokens <= o.max_special_tokens, "special stream would hold ", tokens,
                " tokens per block, over max_special_tokens = ", o.max_special_tokens,
                " (raise max_special_tokens, or set it to 0 for unlimited)");
}

void store_rows(const float* src, int64_t src_stride, void* dst, DType t, int64_t dst_stride, int64_t n_tokens,
                int64_t row) {
  auto* d = static_cast<unsigned char*>(dst);
  const size_t es = dtype_size(t);
  if (src_stride == row && dst_stride == row) {
    convert_from_f32(src, d, t, static_cast<size_t>(n_tokens * row));
    return;
  }
  for (int64_t i = 0; i < n_tokens; ++i)
    convert_from_f32(src + i * src_stride, d + static_cast<size_t>(i * dst_stride) * es, t, static_cast<size_t>(row));
}

kernels::KVSpan own_tokens_span(const CacheOptions& o, const kernels::KVSpan& kv, int n_tokens,
                                std::vector<unsigned char>& scratch) {
  if (o.dtype == DType::F32) {
    kernels::KVSpan s = kv;
    s.n_tokens = n_tokens;
    return s;
  }
  const int64_t row = int64_t{o.heads} * o.head_dim;
  const size_t half = static_cast<size_t>(n_tokens * row) * dtype_size(o.dtype);
  if (scratch.size() < 2 * half) scratch.resize(2 * half);
  store_rows(static_cast<const float*>(kv.k), kv.token_stride, scratch.data(), o.dtype, row, n_tokens, row);
  store_rows(static_cast<const float*>(kv.v), kv.token_stride, scratch.data() + half, o.dtype, row, n_tokens, row);
  return kernels::KVSpan{scratch.data(), scratch.data() + half, o.dtype, n_tokens, row};
}

}  // namespace kvdetail
}  // namespace lingbot
