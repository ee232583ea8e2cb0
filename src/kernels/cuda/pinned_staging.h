#pragma once
// Pinned (page-locked) host staging for host -> device copies on a stream. cudaMemcpyAsync from
// pageable memory first waits for all work queued on the stream (CUDA's documented synchronous
// behaviour of pageable transfers), so every upload of a frame, a table or a small vector would
// stall the pipeline. copy_to_device() copies the bytes into a pinned chunk on the host and enqueues
// the transfer from there: it returns at once, the caller may reuse its memory immediately, and the
// host keeps enqueuing work while the device catches up.
//
// A chunk is reused once the event recorded after its transfer has completed, so the number of
// chunks grows only to the number of transfers in flight at once (per frame: the uploads between two
// synchronisations) and stays there. Chunk sizes are powers of two of at least 4 KiB. Past
// max_pinned_bytes (default 256 MiB), a burst of uploads waits for a busy chunk that fits rather than
// pinning more.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace lingbot::cuda {

class PinnedStaging {
 public:
  explicit PinnedStaging(size_t max_pinned_bytes = size_t{256} << 20) : max_pinned_bytes_(max_pinned_bytes) {}
  ~PinnedStaging();  // waits for the transfers still reading the chunks, then frees them
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Enqueues dst[0, bytes) = host[0, bytes) on `stream` through a pinned chunk; dst is device memory.
  // Throws Error when pinned memory cannot be allocated or the copy cannot be enqueued.
  void copy_to_device(void* dst, const void* host, size_t bytes, cudaStream_t stream);

  size_t chunks() const { return chunks_.size(); }
  size_t pinned_bytes() const;  // page-locked bytes held

 private:
  struct Chunk {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the chunk's last transfer
  };
  size_t max_pinned_bytes_;
  std::vector<Chunk> chunks_;
};

}  // namespace lingbot::cuda
