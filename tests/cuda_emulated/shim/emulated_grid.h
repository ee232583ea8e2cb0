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
//   * __shared__ variables are function statics, shared by the fibers of a block. tests/CMakeLists.txt
//     follows each declaration with declare_shared(), which fills the variable with 0xff bytes (NaN)
//     when the first thread of a block reaches it, so data left by an earlier block or launch is
//     never read as if written (a kernel that reads shared memory nobody wrote computes NaN). Being
//     one per process, they allow kernels on one host thread at a time (a second aborts).
//   * The threads of a block run in an order (Schedule) that a device does not promise. A kernel
//     whose results depend on that order has a race: a thread reads shared memory that another
//     writes in the same barrier interval, or reads another thread's cp.async data before a barrier.
//     Schedule::Compare finds them: it runs each launch under several orders from the same device
//     memory and aborts unless all device memory ends bitwise equal. cp.async poisons its
//     destination when issued, so an overwrite of data another warp still reads shows too.
//   * Every launch is checked first as a device would (emulated_launch.h: limits, device pointers).
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

#include "emulated_launch.h"
#include "lingbot/dtype.h"

namespace lingbot::emu {

// The order of a block's runnable threads, each running until its next barrier or collective:
//   Forward   rounds over the threads, thread 0 first (the default): warps advance in step;
//   Reverse   the same rounds, the last thread first;
//   Shuffled  a new pseudo-random order every round (fixed seeds: reproducible);
//   Greedy    always the first runnable thread: warp 0 runs ahead to its next __syncthreads before
//             warp 1 starts, and so on (what finds a warp overwriting shared memory, a cp.async
//             included, that a slower warp still reads);
//   Compare   each launch runs Forward, then again from the same device memory Reverse, Shuffled and
//             Greedy; a difference in any byte of device memory aborts naming the kernel, the order
//             and the first differing byte (a race, see above).
// LINGBOT_EMU_SCHEDULE=forward|reverse|shuffled|greedy|compare sets it for a whole run (an unknown
// value aborts); a ScheduleScope overrides it for the launches of the thread that holds the scope.
enum class Schedule : uint8_t { Forward, Reverse, Shuffled, Greedy, Compare };
const char* schedule_name(Schedule s);

class ScheduleScope {
 public:
  explicit ScheduleScope(Schedule s);
  ~ScheduleScope();
  ScheduleScope(const ScheduleScope&) = delete;
  ScheduleScope& operator=(const ScheduleScope&) = delete;

 private:
  int previous_;  // the scope this one replaced (-1: none)
};

// The calling fiber's coordinates (valid inside a kernel only).
struct ThreadCoords {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadCoords& coords();

// Runs body() once per thread of the grid (see above). Aborts on a deadlock.
void run_grid(const LaunchConfig& cfg, const char* kernel_name, const std::function<void()>& body);
// Runs body() once per thread of the grid, each thread to completion before the next, without
// fibers: for kernels without barriers, warp collectives or shared memory (model_ops.cu's
// grid-stride loops), at the cost of a function call per thread. Under Compare the grid runs forward
// and then, from the same device memory, in reverse thread order (threads whose writes overlap
// differ). A barrier or collective in such a kernel aborts.
void run_grid_one_pass(const LaunchConfig& cfg, const char* kernel_name, const std::function<void()>& body);

// __syncthreads().
void sync_block();

// Follows every `__shared__ T name...;` declaration (see above): poisons the variable once per block.
void declare_shared(void* variable, size_t bytes);

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
    check_launch(cfg, name);
    check_arguments(name, args...);
    run_grid(cfg, name, [&] { kernel(args...); });
  }
};

template <typename F>
Launcher<F> launch(const LaunchConfig& cfg, const char* name, F kernel) {
  return {cfg, name, kernel};
}

template <typename F>
struct OnePassLauncher {
  LaunchConfig cfg;
  const char* name;
  F kernel;
  template <typename... Args>
  void operator()(Args... args) const {
    check_launch(cfg, name);
    check_arguments(name, args...);
    run_grid_one_pass(cfg, name, [&] { kernel(args...); });
  }
};

// The launch of a kernel without barriers (run_grid_one_pass).
template <typename F>
OnePassLauncher<F> launch_one_pass(const LaunchConfig& cfg, const char* name, F kernel) {
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
#define __shared__ static
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
