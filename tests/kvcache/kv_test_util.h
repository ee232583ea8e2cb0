#pragma once
// Shared helpers of the KV-cache tests: a lazily-backed allocator (for real-shape runs that never
// touch K/V), hashing, random data, and an independent reference of the visible-set rule.
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/allocator.h"
#include "kernels/cpu/attention.h"
#include "kvcache/kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "lingbot/dtype.h"

namespace kvtest {

using namespace lingbot;

// The bookkeeping a paged cache has after reset(): a new cache's, except that the special pages it
// had allocated are kept for reuse, every one free (handed out from page 0 again).
inline PagedCacheState state_after_reset(const CacheOptions& o, Allocator& alloc, int64_t special_pages) {
  PagedCacheState expect = PagedKVCache(o, alloc).state();
  expect.special_allocated = special_pages;
  for (int64_t p = special_pages - 1; p >= 0; --p) expect.special_free.push_back(static_cast<int32_t>(p));
  return expect;
}

// One global block as the model runs it: the cache stores K/V and hands out the visible keys, the host
// attention kernel reads them (scale 1/sqrt(head_dim)). The cache tests compare the visible sets
// through the kernel's f32 path (AttentionCompute::F32), whose error is f32 noise for every storage
// dtype; the native-bf16 path's own bound is tested in tests/kernels/attention_test.cpp.
inline void attend(KVCache& cache, int block, const kernels::QueryView& q, const kernels::KVSpan& kv, float* out,
                   int threads = 1) {
  const kernels::VisibleKV keys = cache.store(block, kv);
  kernels::attention(q, keys, out,
                     {1.0f / std::sqrt(static_cast<float>(q.head_dim)), threads, kernels::AttentionCompute::F32});
}

// Anonymous mmap: zero pages materialise only when touched, so a 10,000-frame real-shape
// bookkeeping run reserves gigabytes without using them. Exact byte/allocation accounting.
class LazyAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = mmap(nullptr, bytes ? bytes : 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    bytes_ += bytes;
    ++count_;
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    munmap(p, bytes ? bytes : 64);
    bytes_ -= bytes;
  }
  MemoryKind kind() const override { return MemoryKind::Host; }
  size_t bytes_allocated() const override { return bytes_; }
  uint64_t allocation_count() const override { return count_; }

 private:
  size_t bytes_ = 0;
  uint64_t count_ = 0;
};

// FNV-1a over 8-byte words (then the tail bytes): a fast content hash for "unchanged" checks.
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline float round_to(DType t, float x) {
  uint16_t h = 0;
  switch (t) {
    case DType::F32: return x;
    case DType::F16: convert_from_f32(&x, &h, t, 1); break;
    case DType::BF16: convert_from_f32(&x, &h, t, 1); break;
  }
  float y;
  convert_to_f32(&h, t, &y, 1);
  return y;
}

// ---------------------------------------------------------------------------------------------
// Reference: the visible-set rule from first principles (golden README "Semantics worth checking"
// items 4-6), on plain lists. Every stored frame keeps an f32 copy of its K/V (per block), rounded
// to the storage dtype. A frame is pinned iff include_scale_frames and it is one of the first
// scale_frames stored frames. After a keyframe is stored (or after the scale phase has attended),
// the oldest non-pinned, non-evicted frame is evicted while more than sliding_window such frames
// exist (never for DenseFull). Visible: all tokens of non-evicted frames; of an evicted frame its
// tokens 0..ns-1 (cross_frame_special), token 0 (plus camera_only) or none; with max_special_frames
// > 0, only the newest max_special_frames evicted frames keep those (older ones show nothing).
struct RefFrame {
  std::vector<std::vector<float>> k, v;  // [block][tokens_per_frame * row]
  bool evicted = false;
};

class RefCache {
 public:
  RefCache(const CacheOptions& o, bool never_evict) : o_(o), never_evict_(never_evict) {}

  bool pinned(size_t i) const { return o_.include_scale_frames && static_cast<int64_t>(i) < o_.scale_frames; }

  void store(RefFrame f) { frames_.push_back(std::move(f)); }

  void evict() {
    if (never_evict_) return;
    for (;;) {
      int live_unpinned = 0;
      for (size_t i = 0; i < frames_.size(); ++i) live_unpinned += !frames_[i].evicted && !pinned(i);
      if (live_unpinned <= o_.sliding_window) return;
      for (size_t i = 0; i < frames_.size(); ++i)
        if (!frames_[i].evicted && !pinned(i)) {
          frames_[i].evicted = true;
          break;
        }
    }
  }

  int64_t evicted_frames() const {
    int64_t n = 0;
    for (const auto& f : frames_) n += f.evicted;
    return n;
  }
  // Evicted frames that max_special_frames hides entirely: all but the newest max_special_frames.
  int64_t dropped_frames() const {
    const int64_t e = evicted_frames();
    return o_.max_special_frames > 0 && e > o_.max_special_frames ? e - o_.max_special_frames : 0;
  }
  // Tokens of frame i visible now.
  int visible_of(size_t i) const {
    if (!frames_[i].evicted) return o_.tokens_per_frame;
    int64_t older_evicted = 0;  // evicted frames stored before i (eviction is oldest first)
    for (size_t j = 0; j < i; ++j) older_evicted += frames_[j].evicted;
    if (older_evicted < dropped_frames()) return 0;
    return !o_.cross_frame_special ? 0 : (o_.camera_only ? 1 : o_.num_special_tokens);
  }

  // Token rows (pointers into the frames) visible to a frame attending now, for `block`.
  void gather(int block, std::vector<const float*>& ks, std::vector<const float*>& vs) const {
    const int64_t row = int64_t{o_.heads} * o_.head_dim;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const RefFrame& f = frames_[i];
      const int n = visible_of(i);
      for (int t = 0; t < n; ++t) {
        ks.push_back(f.k[block].data() + t * row);
        vs.push_back(f.v[block].data() + t * row);
      }
    }
  }

  int64_t resident_frames() const {
    int64_t n = 0;
    for (const auto& f : frames_) n += !f.evicted;
    return n;
  }
  int64_t kept_specials() const {
    int64_t n = 0;
    for (size_t i = 0; i < frames_.size(); ++i)
      if (frames_[i].evicted) n += visible_of(i);
    return n;
  }
  int64_t visible_tokens() const { return resident_frames() * o_.tokens_per_frame + kept_specials(); }
  size_t stored() const { return frames_.size(); }
  void clear() { frames_.clear(); }

 private:
  CacheOptions o_;
  bool never_evict_;
  std::vector<RefFrame> frames_;
};

// Plain double-precision softmax attention of one query row over the given key rows.
inline void ref_attention_row(const float* q, int heads, int head_dim, const std::vector<const float*>& ks,
                              const std::vector<const float*>& vs, double* out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> s(ks.size());
  for (int h = 0; h < heads; ++h) {
    double mx = -1e300;
    for (size_t j = 0; j < ks.size(); ++j) {
      double d = 0;
      for (int e = 0; e < head_dim; ++e) d += double(q[h * head_dim + e]) * ks[j][h * head_dim + e];
      s[j] = d * scale;
      mx = std::max(mx, s[j]);
    }
    double z = 0;
    for (size_t j = 0; j < ks.size(); ++j) z += (s[j] = std::exp(s[j] - mx));
    for (int e = 0; e < head_dim; ++e) {
      double acc = 0;
      for (size_t j = 0; j < ks.size(); ++j) acc += s[j] * vs[j][h * head_dim + e];
      out[h * head_dim + e] = acc / z;
    }
  }
}

}  // namespace kvtest
