#pragma once
// Launch geometry of the elementwise CUDA kernels (ops.cu, model_ops.cu): blocks of kThreads
// threads, at most kMaxBlocks of them; the kernels' grid-stride loops cover whatever a capped grid
// leaves.
#include <cstdint>

namespace lingbot::cuda::grid {

inline constexpr int kThreads = 256;
inline constexpr int64_t kMaxBlocks = 65535 * 8;

// Blocks for n elements, one thread each (at least 1, at most kMaxBlocks).
inline int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < kMaxBlocks ? (b < 1 ? 1 : b) : kMaxBlocks);
}

}  // namespace lingbot::cuda::grid
