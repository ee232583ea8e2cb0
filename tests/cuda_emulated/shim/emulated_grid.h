#pragma once
// Host emulation of CUDA's execution model for the kernels that need more than one thread (shared
// memory, __syncthreads, warp shuffles, the warp-wide PTX instructions of kernels/cuda/ptx.cuh):
// every thread of a block runs as a fiber on the calling OS thread, blocks run one after another,
// and a fiber yields only at a barrier or a warp collective, so the emulation is deterministic.
//
//   * __syncthreads() waits until every thread of the block that has not returned arrived.
//   * A warp collective (shuffle, ldmatrix, mma) waits until all 32 lanes of the warp arrived at a
//     collective of the same kind; then one function computes every lane's result from every lane's
//     operands. A lane that returned while its warp waits, or lanes meeting at different kinds of
//     collective, or a block whose threads can make no progress, abort with a message that names the
//     kernel launch (these are bugs on a device too: deadlocks or undefined results).
//   * cp.async copies land when a wait_group retires their group; until then the destination reads
//     0xff bytes (NaN), so a kernel that reads before waiting computes NaN.
//   * __shared__ variables are function statics (thread_local), shared by the fibers of a block.
//
// Translation units compiled with LINGBOT_EMULATED_GRID get this model (cuda_runtime_api.h includes
// this header); tests/CMakeLists.txt rewrites their `kernel<<<grid, block, smem, stream>>>(args)`
// launches into `::lingbot::emu::launch(LaunchConfig{grid, block, smem, stream}, "kernel", <a lambda calling kernel>)(args)`.
// Test code only.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "lingbot/dtype.h"

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace lingbot::emu {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
  void* stream = nullptr;
};

// The calling fiber's coordinates (valid inside a kernel only).
struct ThreadCoords {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadCoords& coords();

// Runs body() once per thread of the grid (see above). Aborts on a deadlock.
void run_grid(const LaunchConfig& cfg, const char* kernel_name, const std::function<void()>& body);

// __syncthreads().
void sync_block();

// One lane's operands and result at a warp collective.
struct LaneSlot {
  uint32_t in[12];
  const void* addr;
  uint32_t out[8];
};
using WarpOp = void (*)(LaneSlot (&lanes)[32]);

// Deposits `mine` as this lane's operands, waits for the warp, returns this lane's slot after `op`
// (the same function at every lane: it names the collective) ran once over all 32 lanes.
LaneSlot warp_collective(const char* what, WarpOp op, const LaneSlot& mine);

// The calling thread's asynchronous copies (cp.async): queued, done when waited for.
void async_copy(void* dst, const void* src, size_t bytes);
void async_commit();
void async_wait(int keep_groups);

template <typename F>
struct Launcher {
  LaunchConfig cfg;
  const char* name;
  F kernel;  // calls the kernel with the launch's arguments
  template <typename... Args>
  void operator()(Args... args) const {
    run_grid(cfg, name, [&] { kernel(args...); });
  }
};

template <typename F>
Launcher<F> launch(const LaunchConfig& cfg, const char* name, F kernel) {
  return {cfg, name, kernel};
}

// __shfl_xor_sync over the full warp, for 4- and 8-byte values.
template <typename T>
T shfl_xor(unsigned mask, T v, int lane_mask);

// The warp-wide PTX instructions of kernels/cuda/ptx.cuh (operand layouts documented there).
void mma_m16n8k16(DType inputs, float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void ldmatrix_x4(bool trans, uint32_t (&r)[4], const uint16_t* smem);

}  // namespace lingbot::emu

#define threadIdx (::lingbot::emu::coords().thread_idx)
#define blockIdx (::lingbot::emu::coords().block_idx)
#define blockDim (::lingbot::emu::coords().block_dim)
#define gridDim (::lingbot::emu::coords().grid_dim)
#define __shared__ static thread_local
#define __launch_bounds__(...)
#define __restrict__

inline void __syncthreads() { ::lingbot::emu::sync_block(); }
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return ::lingbot::emu::shfl_xor(mask, v, lane_mask);
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}
// fmaf without a library call: the product of two floats is exact in double, so this is the fused
// result up to a rare double rounding (one ulp), and it vectorises (the SIMT attention kernel is
// mostly fmaf). Found by the kernels' unqualified calls inside lingbot::cuda before ::fmaf.
namespace lingbot::cuda {
inline float fmaf(float a, float b, float c) {
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b) + static_cast<double>(c));
}
}  // namespace lingbot::cuda
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
struct alignas(8) float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
