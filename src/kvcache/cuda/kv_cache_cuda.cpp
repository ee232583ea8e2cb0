#include "kvcache/cuda/kv_cache_cuda.h"

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops_cuda.h"

namespace lingbot::cuda {

namespace {
Allocator& require_device_memory(Allocator& allocator) {
  LINGBOT_CHECK(allocator.kind() == MemoryKind::Device,
                "CudaPagedKVCache: the allocator must provide device memory (got a host allocator)");
  return allocator;
}
}  // namespace

CudaPagedKVCache::CudaPagedKVCache(const CacheOptions& options, Allocator& allocator, cudaStream_t stream)
    : book_(options, require_device_memory(allocator)),
      stream_(stream),
      row_(int64_t{options.heads} * options.head_dim),
      written_(options.num_blocks, 0),
      table_(allocator),
      specials_(allocator) {
  LINGBOT_CHECK(options.head_dim <= kMaxCudaHeadDim, "CudaPagedKVCache: head_dim ", options.head_dim,
                " exceeds the CUDA kernels' maximum ", kMaxCudaHeadDim);
  if (options.dtype != DType::F32) {
    own_ = Buffer(allocator, static_cast<size_t>(2 * int64_t{options.tokens_per_frame} * row_) *
                                 dtype_size(options.dtype));
  }
}

void CudaPagedKVCache::begin_step(FrameMode mode, int n_frames) {
  const CacheOptions& o = book_.options();
  kvdetail::check_begin_step(o, step_, book_.state().ledger, mode, n_frames);
  first_frame_ = book_.stats().frames_stored;
  // The host cache's own step: appends (and a keyframe's eviction) now, a scale phase's eviction in
  // end_step after its attention, exactly as on the CPU. K/V are written by store() on the device.
  book_.begin_step(mode, n_frames);

  const PagePlan& plan = book_.plan();
  table_.upload(plan.patch_table(), book_.pool_pages(), book_.page_size(), stream_, &staging_);
  const size_t es = dtype_size(o.dtype);
  const int64_t slots = book_.page_size();
  runs_per_block_ = static_cast<int>(plan.special_page_ids.size());
  span_scratch_.clear();
  for (int b = 0; b < o.num_blocks; ++b) {
    for (int r = 0; r < runs_per_block_; ++r) {
      const auto* base = static_cast<const unsigned char*>(book_.special_page(b, plan.special_page_ids[r]));
      const int64_t s = plan.special_start[r];
      span_scratch_.push_back(kernels::KVSpan{base + static_cast<size_t>(s * row_) * es,
                                              base + static_cast<size_t>((slots + s) * row_) * es, o.dtype,
                                              plan.special_len[r], int64_t{plan.special_stride[r]} * row_});
    }
  }
  specials_.upload(span_scratch_, o.dtype, row_, stream_, &staging_);

  step_.open = true;
  step_.mode = mode;
  step_.n_frames = n_frames;
  step_.keys = book_.keys_in_step();
  std::fill(written_.begin(), written_.end(), 0);
}

void CudaPagedKVCache::write_frame(int block, int i) {
  const CacheOptions& o = book_.options();
  const kernels::KVSpan& kv = *pending_kv_;
  const int ns = o.num_special_tokens;
  const int patch = book_.patch_tokens();
  const int64_t off = int64_t{i} * o.tokens_per_frame * kv.token_stride;
  const auto* k = static_cast<const float*>(kv.k) + off;
  const auto* v = static_cast<const float*>(kv.v) + off;
  // The host cache's addressing, device pointers (its pools are device memory).
  const PagedKVCache::FrameSlots to = book_.frame_slots(block, first_frame_ + i);
  store_rows(k + ns * kv.token_stride, kv.token_stride, to.patch_k, o.dtype, row_, patch, row_, stream_);
  store_rows(v + ns * kv.token_stride, kv.token_stride, to.patch_v, o.dtype, row_, patch, row_, stream_);
  store_rows(k, kv.token_stride, to.special_k, o.dtype, row_, ns, row_, stream_);
  store_rows(v, kv.token_stride, to.special_v, o.dtype, row_, ns, row_, stream_);
}

kernels::VisibleKV CudaPagedKVCache::store(int block, const kernels::KVSpan& kv) {
  const CacheOptions& o = book_.options();
  kvdetail::check_store(o, step_, block, kv);
  kernels::VisibleKV keys;
  keys.layout = kernels::KeyLayout::Paged;
  keys.heads = o.heads;
  keys.head_dim = o.head_dim;
  keys.pool = book_.pool_view(block);
  keys.table = table_.view();
  keys.table_keys = table_.num_keys();
  // This block's special runs among the step's uploaded ones (records of specials_, device memory).
  const int first = block * runs_per_block_;
  keys.resident = {specials_.device_data() + first, runs_per_block_, specials_.num_keys(first, runs_per_block_)};
  if (step_.mode == FrameMode::NonKeyframe) {
    // Own tokens attended as stored keys would be: rounded to the storage dtype.
    own_span_ = kv;
    own_span_.n_tokens = o.tokens_per_frame;
    if (o.dtype != DType::F32) {
      const int64_t t = o.tokens_per_frame;
      auto* base = static_cast<unsigned char*>(own_.data());
      void* ok = base;
      void* ov = base + static_cast<size_t>(t * row_) * dtype_size(o.dtype);
      store_rows(static_cast<const float*>(kv.k), kv.token_stride, ok, o.dtype, row_, t, row_, stream_);
      store_rows(static_cast<const float*>(kv.v), kv.token_stride, ov, o.dtype, row_, t, row_, stream_);
      own_span_ = kernels::KVSpan{ok, ov, o.dtype, o.tokens_per_frame, row_};
    }
    keys.spans = std::span<const kernels::KVSpan>(&own_span_, 1);
    return keys;
  }
  LINGBOT_CHECK(!written_[block], "store: block ", block, " was already stored in this ",
                kvdetail::frame_mode_name(step_.mode), " step");
  pending_kv_ = &kv;
  for (int i = 0; i < step_.n_frames; ++i) write_frame(block, i);
  pending_kv_ = nullptr;
  written_[block] = 1;
  book_.mark_block_written(block);
  return keys;
}

void CudaPagedKVCache::end_step() {
  LINGBOT_CHECK(step_.open, "end_step: no step in progress");
  if (step_.mode != FrameMode::NonKeyframe) {
    for (size_t b = 0; b < written_.size(); ++b)
      LINGBOT_CHECK(written_[b], "end_step: block ", b, " was not stored in this ",
                    kvdetail::frame_mode_name(step_.mode), " step (its K/V would be missing)");
  }
  step_.open = false;
  book_.end_step();
}

void CudaPagedKVCache::mark_block_written(int block) {
  book_.mark_block_written(block);  // checks the step, the range and that the block is not written yet
  written_[static_cast<size_t>(block)] = 1;
}

std::vector<unsigned char> CudaPagedKVCache::live_bytes(int /*block*/) const {
  throw Error("live_bytes: the CUDA KV cache keeps its K/V in device memory (no host byte view)");
}

int64_t CudaPagedKVCache::keys_in_step() const {
  LINGBOT_CHECK(step_.open, "keys_in_step: no step in progress");
  return step_.keys;
}

void CudaPagedKVCache::reset() {
  book_.reset();
  step_ = {};
  std::fill(written_.begin(), written_.end(), 0);
}

std::unique_ptr<KVCache> make_cuda_kv_cache(KVBackend backend, const CacheOptions& options, Allocator& allocator,
                                            cudaStream_t stream) {
  LINGBOT_CHECK(backend == KVBackend::Paged, "KV backend '", kv_backend_name(backend),
                "' is not available on CUDA (only 'paged')");
  return std::make_unique<CudaPagedKVCache>(options, allocator, stream);
}

}  // namespace lingbot::cuda
