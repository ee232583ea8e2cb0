#include "kernels/cuda/pinned_staging.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/cuda/cuda_check.h"

namespace lingbot::cuda {

namespace {
constexpr size_t kMinChunkBytes = 4096;
}  // namespace

PinnedStaging::~PinnedStaging() {
  for (Chunk& c : chunks_) {
    (void)cudaEventSynchronize(c.done);  // errors of pending work cannot be reported from here
    (void)cudaEventDestroy(c.done);
    (void)cudaFreeHost(c.host);
  }
}

size_t PinnedStaging::pinned_bytes() const {
  size_t n = 0;
  for (const Chunk& c : chunks_) n += c.bytes;
  return n;
}

void PinnedStaging::copy_to_device(void* dst, const void* host, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  // The smallest idle chunk that holds the bytes (a chunk is idle once its last transfer finished).
  Chunk *chunk = nullptr, *busy = nullptr;
  for (Chunk& c : chunks_) {
    if (c.bytes < bytes || (chunk && chunk->bytes <= c.bytes)) continue;
    const cudaError_t q = cudaEventQuery(c.done);
    if (q == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is an answer, not an error
      if (!busy || c.bytes < busy->bytes) busy = &c;
      continue;
    }
    LINGBOT_CUDA_CHECK(q);
    chunk = &c;
  }
  // A new chunk is rounded up to a power of two: the cap counts what it would pin, not the request.
  const size_t new_chunk_bytes = std::bit_ceil(std::max(bytes, kMinChunkBytes));
  if (!chunk && busy && pinned_bytes() + new_chunk_bytes > max_pinned_bytes_) {
    LINGBOT_CUDA_CHECK(cudaEventSynchronize(busy->done));
    chunk = busy;
  }
  if (!chunk) {
    chunks_.reserve(chunks_.size() + 1);  // before the allocations: the push_back below cannot throw
    Chunk c;
    c.bytes = new_chunk_bytes;
    LINGBOT_CUDA_CHECK(cudaHostAlloc(&c.host, c.bytes, cudaHostAllocDefault));
    const cudaError_t e = cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming);
    if (e != cudaSuccess) (void)cudaFreeHost(c.host);
    LINGBOT_CUDA_CHECK(e);
    chunks_.push_back(c);
    chunk = &chunks_.back();
  }
  std::memcpy(chunk->host, host, bytes);
  LINGBOT_CUDA_CHECK(cudaMemcpyAsync(dst, chunk->host, bytes, cudaMemcpyHostToDevice, stream));
  LINGBOT_CUDA_CHECK(cudaEventRecord(chunk->done, stream));
}

}  // namespace lingbot::cuda
