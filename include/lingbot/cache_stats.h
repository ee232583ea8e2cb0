#pragma once
// The aggregator's streaming KV cache as the public API sees it: which backend holds it
// (SessionOptions::kv_backend) and what it holds (SessionStats::cache). The cache itself is internal.
#include <cstdint>
#include <string>

namespace lingbot {

// Paged: the two-stream paged cache (one page of patch tokens per resident frame, plus an
// append-only stream of the frames' special tokens). Dense: contiguous K/V with the same eviction
// rules, so it attends to exactly the keys Paged does (the reference Paged is tested against).
// DenseFull: contiguous, never evicts (every stored frame stays visible whole; memory grows).
enum class KVBackend : uint8_t { Paged, Dense, DenseFull };
KVBackend parse_kv_backend(const std::string& name);  // "paged" | "dense" | "dense-full"; throws lingbot::Error
const char* kv_backend_name(KVBackend b);             // the name parse_kv_backend accepts

// Occupancy of the cache after the last completed step. Counts are per global-attention block
// (every block holds the same frames) unless marked "all blocks"; tokens are counts, bytes are
// bytes. Paged: pinned/window/free/pool pages are patch pages (one per resident frame). Dense:
// pinned_pages/window_pages count the same frames, free/pool 0.
struct CacheStats {
  int64_t frames_stored = 0;        // frames appended and not rolled back (ever, including evicted)
  int64_t frames_resident = 0;      // frames whose patch tokens are in the cache now
  int64_t pinned_pages = 0;
  int64_t window_pages = 0;
  int64_t free_pages = 0;
  int64_t pool_pages = 0;
  int64_t special_tokens = 0;       // tokens in the special stream (per block)
  int64_t visible_tokens = 0;       // keys a frame attending now would see from the cache
  int64_t bytes_used = 0;           // K/V bytes holding live tokens, all blocks
  int64_t bytes_reserved = 0;       // K/V bytes allocated, all blocks
  // Special-token detail (all backends):
  int64_t kept_special_tokens = 0;  // specials of evicted frames that stay visible (golden trace
                                    // "retained special tokens"); paged: a subset of special_tokens,
                                    // dense: equals special_tokens (the side buffer)
  int64_t special_pages = 0;        // paged: special-stream pages in use (0 for dense)
  int64_t special_free_pages = 0;   // paged: special pages allocated but free for reuse (max_special_frames)
  int64_t special_frames_dropped = 0;  // evicted frames whose specials max_special_frames dropped
  int64_t patch_bytes_reserved = 0;    // part of bytes_reserved: paged patch pool / dense frame buffers
  int64_t special_bytes_reserved = 0;  // part of bytes_reserved: paged special pages / dense side buffer
};

}  // namespace lingbot
