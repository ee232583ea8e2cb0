// The emulated execution model itself (emulated_grid.h): barriers and shuffles order threads as on a
// device, and the bugs a device would punish with a hang, a fault or garbage abort with a message
// here: deadlocks, host pointers and out-of-range configurations at launch, races (results that
// depend on the order of the threads).
// Built with LINGBOT_EMULATED_GRID: the shim's runtime header brings the grid model.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/ptx.cuh"

namespace emu = lingbot::emu;
namespace ptx = lingbot::cuda::ptx;

namespace {

// n values of T in emulated device memory (the launch checks reject host pointers).
template <typename T>
struct DeviceArray {
  T* data = nullptr;
  size_t n;
  explicit DeviceArray(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceArray(size_t count, T fill) : DeviceArray(std::vector<T>(count, fill)) {}
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> host() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

// Every thread writes its id, then (after the barrier) reads its neighbour's: wrong without the
// barrier, since fibers run in order and thread i+1 has not written when thread i reads.
__global__ void rotate_kernel(int* out) {
  __shared__ int tile[128];
  const int i = threadIdx.x;
  tile[i] = i + 1000 * blockIdx.x;
  __syncthreads();
  out[blockIdx.x * 128 + i] = tile[(i + 1) % 128];
}

// rotate_kernel without its barrier: a race (thread i reads tile[i + 1] in the interval in which
// thread i + 1 writes it).
__global__ void racy_rotate_kernel(int* out) {
  __shared__ int tile[128];
  const int i = threadIdx.x;
  tile[i] = i + 1000 * blockIdx.x;
  out[blockIdx.x * 128 + i] = tile[(i + 1) % 128];
}

__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

__global__ void deadlock_kernel(float* out) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  }
}

__global__ void early_return_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Copies 16 bytes per thread with cp.async and reads them back with or without waiting first.
__global__ void async_copy_kernel(const float* src, float* out, bool wait) {
  alignas(16) __shared__ float tile[32 * 4];
  ptx::cp_async16(&tile[threadIdx.x * 4], src + threadIdx.x * 4);
  ptx::cp_async_commit();
  if (wait) ptx::cp_async_wait<0>();
  __syncthreads();
  const float v = tile[((threadIdx.x + 1) % 32) * 4];
  __syncthreads();  // nobody exits (landing its copies) before every thread has read
  out[threadIdx.x] = v;
}

// Reads its neighbour's cp.async data after waiting for its own copies only: a race (the neighbour's
// copies land at the neighbour's wait; a barrier after the waits is what makes them visible).
__global__ void racy_async_copy_kernel(const float* src, float* out) {
  alignas(16) __shared__ float tile[32 * 4];
  ptx::cp_async16(&tile[threadIdx.x * 4], src + threadIdx.x * 4);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  const float v = tile[((threadIdx.x + 1) % 32) * 4];
  __syncthreads();
  out[threadIdx.x] = v;
}

// Grid-stride loops as model_ops.cu writes them, and two bugs a one-thread run would not show: a
// loop stepping by the block instead of the grid (blocks repeat each other's elements), and threads
// writing the same element (the last writer wins, whichever that is on a device).
__global__ void add_one_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] += 1.0f;
}
__global__ void add_one_block_step_kernel(float* x, int64_t n) {
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] += 1.0f;
}
__global__ void overlapping_writes_kernel(int* out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  out[t / 2] = t;
}
__global__ void barrier_kernel(float* out) {
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

uint16_t bf16_bits(float f) { return lingbot::f32_to_bf16(f); }

// A 16x16 · 16x8 product through ldmatrix (A rows as four 8x8 matrices, B from its transpose) and
// mma, against the plain product: checks the two instructions' layouts against each other and
// against the documented fragment of D.
__global__ void gemm_kernel(const uint16_t* a_rows, const uint16_t* bt_rows, float* d) {
  alignas(16) __shared__ uint16_t as[16][16];
  alignas(16) __shared__ uint16_t bs[8][16];  // B transposed: row n = column n of B
  const int l = threadIdx.x;
  for (int i = l; i < 256; i += 32) as[i / 16][i % 16] = a_rows[i];
  for (int i = l; i < 128; i += 32) bs[i / 16][i % 16] = bt_rows[i];
  __syncthreads();
  // A fragment: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  uint32_t a[4];
  ptx::ldmatrix_x4<false>(a, &as[(l % 8) + 8 * ((l / 8) % 2)][8 * (l / 16)]);
  // B fragment (col-major 16x8 = row-major B^T): matrices (n 0-7, k 0-7) and (n 0-7, k 8-15), twice.
  uint32_t b[4];
  ptx::ldmatrix_x4<false>(b, &bs[l % 8][8 * ((l / 8) % 2)]);
  float c[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  ptx::mma_m16n8k16_bf16(c, a, b[0], b[1]);
  const int g = l / 4, t = l % 4;
  d[g * 8 + 2 * t] = c[0];
  d[g * 8 + 2 * t + 1] = c[1];
  d[(g + 8) * 8 + 2 * t] = c[2];
  d[(g + 8) * 8 + 2 * t + 1] = c[3];
}

}  // namespace

TEST(EmulatedGrid, SyncthreadsOrdersSharedMemoryAcrossBlocks) {
  for (emu::Schedule order : {emu::Schedule::Forward, emu::Schedule::Reverse, emu::Schedule::Shuffled, emu::Schedule::Greedy,
                              emu::Schedule::Compare}) {
    SCOPED_TRACE(emu::schedule_name(order));
    emu::ScheduleScope scope(order);
    DeviceArray<int> out(3 * 128, -1);
    emu::launch({dim3(3), dim3(128)}, "rotate_kernel", [](auto... a) { rotate_kernel(a...); })(out.data);
    const std::vector<int> got = out.host();
    for (int b = 0; b < 3; ++b)
      for (int i = 0; i < 128; ++i) ASSERT_EQ(got[b * 128 + i], (i + 1) % 128 + 1000 * b) << "block " << b << " i " << i;
  }
}

TEST(EmulatedGrid, ShuffleXorReducesTheWarp) {
  DeviceArray<float> out(64, -1.0f);
  emu::launch({dim3(1), dim3(64)}, "warp_sum_kernel", [](auto... a) { warp_sum_kernel(a...); })(out.data);
  const std::vector<float> got = out.host();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], 496.0f);        // 0 + ... + 31
  for (int i = 32; i < 64; ++i) EXPECT_EQ(got[i], 1520.0f);      // 32 + ... + 63
}

TEST(EmulatedGrid, AsyncCopiesLandAtTheWait) {
  std::vector<float> host(32 * 4);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  const DeviceArray<float> src(host);  // malloc'ed: 16-byte aligned
  DeviceArray<float> out(32, 0.0f);
  auto run = [&](bool wait) {
    emu::launch({dim3(1), dim3(32)}, "async_copy_kernel", [](auto... a) { async_copy_kernel(a...); })(
        static_cast<const float*>(src.data), out.data, wait);
    return out.host();
  };
  const std::vector<float> waited = run(true);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(waited[i], static_cast<float>(((i + 1) % 32) * 4));
  // Without the wait the data has not landed: NaN, as garbage would be on a device.
  const std::vector<float> early = run(false);
  for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(early[i])) << i;
}

TEST(EmulatedGrid, LdmatrixAndMmaComputeTheProduct) {
  std::vector<uint16_t> a(256), bt(128);
  std::vector<float> af(256), btf(128);
  for (int i = 0; i < 256; ++i) af[i] = lingbot::bf16_to_f32(a[i] = bf16_bits(0.125f * ((i * 7) % 13) - 0.75f));
  for (int i = 0; i < 128; ++i) btf[i] = lingbot::bf16_to_f32(bt[i] = bf16_bits(0.25f * ((i * 5) % 11) - 1.25f));
  const DeviceArray<uint16_t> da(a), dbt(bt);
  DeviceArray<float> d(128, 0.0f);
  emu::launch({dim3(1), dim3(32)}, "gemm_kernel", [](auto... x) { gemm_kernel(x...); })(
      static_cast<const uint16_t*>(da.data), static_cast<const uint16_t*>(dbt.data), d.data);
  const std::vector<float> got = d.host();
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double want = 1.0;
      for (int k = 0; k < 16; ++k) want += static_cast<double>(af[m * 16 + k]) * btf[n * 16 + k];
      EXPECT_FLOAT_EQ(got[m * 8 + n], static_cast<float>(want)) << "m " << m << " n " << n;
    }
}

// Without the barrier a thread reads its neighbour's slot before or after the neighbour wrote it,
// as the order of the threads has it: before, it reads the poison of an unwritten __shared__
// variable (0xff bytes, -1). Forward, every thread but the last reads early; in reverse only the last
// (its neighbour is thread 0).
TEST(EmulatedGrid, TheThreadOrderDecidesARacyKernelsResult) {
  auto run = [](emu::Schedule order) {
    emu::ScheduleScope scope(order);
    DeviceArray<int> out(128, -2);
    emu::launch({dim3(1), dim3(128)}, "racy_rotate_kernel", [](auto... a) { racy_rotate_kernel(a...); })(out.data);
    return out.host();
  };
  const std::vector<int> forward = run(emu::Schedule::Forward), reverse = run(emu::Schedule::Reverse);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(forward[i], i < 127 ? -1 : 0) << i;
    EXPECT_EQ(reverse[i], i < 127 ? i + 1 : -1) << i;
  }
}

TEST(EmulatedGrid, OnePassLaunchesRunEveryThreadOfTheGrid) {
  DeviceArray<float> x(1000, 0.0f);
  emu::launch_one_pass({dim3(3), dim3(128)}, "add_one_kernel", [](auto... a) { add_one_kernel(a...); })(x.data,
                                                                                                      int64_t{1000});
  for (float v : x.host()) ASSERT_EQ(v, 1.0f);
  // Stepping by the block: each of the 3 blocks adds 1 to every element.
  emu::launch_one_pass({dim3(3), dim3(128)}, "add_one_block_step_kernel",
                       [](auto... a) { add_one_block_step_kernel(a...); })(x.data, int64_t{1000});
  for (float v : x.host()) ASSERT_EQ(v, 4.0f);
}

TEST(EmulatedGridDeathTest, CompareFindsThreadsWritingTheSameElement) {
  DeviceArray<int> out(128, -1);
  EXPECT_DEATH(
      {
        emu::ScheduleScope scope(emu::Schedule::Compare);
        emu::launch_one_pass({dim3(2), dim3(128)}, "overlapping_writes_kernel",
                             [](auto... a) { overlapping_writes_kernel(a...); })(out.data);
      },
      "emulated CUDA: kernel overlapping_writes_kernel: a race: device memory differs between the forward and reverse "
      "thread orders \\(allocation of 512 bytes, first at byte 0\\)");
}

TEST(EmulatedGridDeathTest, ABarrierInAOnePassKernelAborts) {
  DeviceArray<float> out(32, 0.0f);
  EXPECT_DEATH(
      emu::launch_one_pass({dim3(1), dim3(32)}, "barrier_kernel", [](auto... a) { barrier_kernel(a...); })(out.data),
      "emulated CUDA: __syncthreads in a kernel launched as one pass \\(no barriers\\): launch it as a grid of "
      "fibers");
}

TEST(EmulatedGridDeathTest, ADeadlockAbortsNamingTheKernel) {
  DeviceArray<float> out(32, 0.0f);
  EXPECT_DEATH(emu::launch({dim3(1), dim3(32)}, "deadlock_kernel", [](auto... a) { deadlock_kernel(a...); })(out.data),
               "emulated CUDA: deadlock: 1 threads at __syncthreads, 31 at a warp collective, 0 returned \\(kernel "
               "deadlock_kernel, block \\(0,0,0\\)\\)");
}

TEST(EmulatedGridDeathTest, AShuffleWithAReturnedLaneAborts) {
  DeviceArray<float> out(32, 0.0f);
  EXPECT_DEATH(
      emu::launch({dim3(1), dim3(32)}, "early_return_kernel", [](auto... a) { early_return_kernel(a...); })(out.data),
      "emulated CUDA: (a lane returned while its warp waits at __shfl_xor_sync|__shfl_xor_sync while a lane of the "
      "warp has returned) \\(kernel early_return_kernel");
}

TEST(EmulatedGridDeathTest, CompareFindsARaceInSharedMemory) {
  DeviceArray<int> out(128, -1);
  EXPECT_DEATH(
      {
        emu::ScheduleScope scope(emu::Schedule::Compare);
        emu::launch({dim3(1), dim3(128)}, "racy_rotate_kernel", [](auto... a) { racy_rotate_kernel(a...); })(out.data);
      },
      "emulated CUDA: kernel racy_rotate_kernel: a race: device memory differs between the forward and reverse thread "
      "orders \\(allocation of 512 bytes, first at byte 0\\)");
}

TEST(EmulatedGridDeathTest, CompareFindsAnotherThreadsAsyncCopyReadBeforeABarrier) {
  std::vector<float> host(32 * 4);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  const DeviceArray<float> src(host);
  DeviceArray<float> out(32, 0.0f);
  EXPECT_DEATH(
      {
        emu::ScheduleScope scope(emu::Schedule::Compare);
        emu::launch({dim3(1), dim3(32)}, "racy_async_copy_kernel", [](auto... a) { racy_async_copy_kernel(a...); })(
            static_cast<const float*>(src.data), out.data);
      },
      "emulated CUDA: kernel racy_async_copy_kernel: a race: device memory differs between the forward and reverse "
      "thread orders");
}

TEST(EmulatedGridDeathTest, AHostPointerArgumentAbortsTheLaunch) {
  std::vector<float> host(32);
  EXPECT_DEATH(emu::launch({dim3(1), dim3(32)}, "warp_sum_kernel", [](auto... a) { warp_sum_kernel(a...); })(host.data()),
               "emulated CUDA: kernel warp_sum_kernel: argument 0 \\(0x[0-9a-f]+\\) is not device memory: a device "
               "would fault reading it");
  // One-pass launches (model_ops.cu's) are checked the same way.
  EXPECT_DEATH(emu::launch_one_pass({dim3(1), dim3(256)}, "one_pass_kernel", [](auto...) {})(1, host.data()),
               "emulated CUDA: kernel one_pass_kernel: argument 1 \\(0x[0-9a-f]+\\) is not device memory");
}

TEST(EmulatedGridDeathTest, ConfigurationsOutsideTheDeviceLimitsAbort) {
  DeviceArray<float> out(64, 0.0f);
  EXPECT_DEATH(emu::launch({dim3(1, 70000), dim3(32)}, "warp_sum_kernel", [](auto... a) { warp_sum_kernel(a...); })(
                   out.data),
               "emulated CUDA: kernel warp_sum_kernel: grid \\(1,70000,1\\) outside the device limits \\(x "
               "1..2\\^31-1, y and z 1..65535\\)");
  EXPECT_DEATH(emu::launch({dim3(0), dim3(32)}, "warp_sum_kernel", [](auto... a) { warp_sum_kernel(a...); })(out.data),
               "grid \\(0,1,1\\) outside the device limits");
  EXPECT_DEATH(emu::launch_one_pass({dim3(1), dim3(2048)}, "one_pass_kernel", [](auto...) {})(out.data),
               "emulated CUDA: kernel one_pass_kernel: block \\(2048,1,1\\) outside the device limits \\(1..1024 "
               "threads, z <= 64\\)");
}
