// kernels/cuda/pinned_staging: host -> device copies through pinned chunks. The caller's memory is
// overwritten right after each call (the staging must have taken its copy), the device contents are
// compared after one synchronisation, and chunks are reused once their transfers finished. Runs on a
// device and under the host emulation (tests/cuda_emulated); skips visibly otherwise.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/pinned_staging.h"

using namespace lingbot;

TEST(CudaPinnedStaging, CallerMemoryIsReusableAtOnceAndChunksAreReused) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  cudaStream_t stream = nullptr;
  LINGBOT_CUDA_CHECK(cudaStreamCreate(&stream));
  cuda::CudaAllocator alloc(0);
  std::mt19937 rng(7);
  // Sizes below, at and above the 4 KiB minimum chunk, and one of several MiB (a 518x378 frame is 2.3 MB).
  const std::vector<size_t> sizes = {1, 24, 4095, 4096, 4097, 65536, 2349672, 100, 3 * 1024 * 1024 + 5};
  std::vector<Buffer> dst;
  std::vector<std::vector<uint8_t>> want;
  {
    cuda::PinnedStaging staging;
    for (int round = 0; round < 3; ++round) {
      for (size_t n : sizes) {
        std::vector<uint8_t> src(n);
        for (auto& b : src) b = static_cast<uint8_t>(rng());
        dst.emplace_back(alloc, n);
        staging.copy_to_device(dst.back().data(), src.data(), n, stream);
        want.push_back(src);
        std::fill(src.begin(), src.end(), uint8_t{0xA5});  // reused at once: the staging copied it
      }
    }
    EXPECT_LE(staging.chunks(), 3 * sizes.size());
    LINGBOT_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < dst.size(); ++i)
      EXPECT_EQ(cuda::testing::to_host<uint8_t>(dst[i].data(), want[i].size()), want[i]) << "copy " << i;
    // Every transfer has finished: the next copies reuse chunks instead of pinning more memory.
    const size_t chunks = staging.chunks(), pinned = staging.pinned_bytes();
    EXPECT_GE(pinned, 3 * 1024 * 1024 + 5u);
    for (size_t n : sizes) {
      const std::vector<uint8_t> src(n, 0x3C);
      Buffer d(alloc, n);
      staging.copy_to_device(d.data(), src.data(), n, stream);
      LINGBOT_CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(cuda::testing::to_host<uint8_t>(d.data(), n), src) << n << " bytes";
    }
    EXPECT_EQ(staging.chunks(), chunks);
    EXPECT_EQ(staging.pinned_bytes(), pinned);
    staging.copy_to_device(dst[0].data(), want[0].data(), 0, stream);  // nothing to copy: no chunk
    EXPECT_EQ(staging.chunks(), chunks);
  }  // the destructor waits for the transfers and frees the chunks
  LINGBOT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// With no room for more pinned memory, a burst of copies in flight waits for the one chunk it has
// (on a device the later copies find it busy) instead of pinning a chunk per copy.
TEST(CudaPinnedStaging, PinnedMemoryCapMakesABurstReuseBusyChunks) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  cudaStream_t stream = nullptr;
  LINGBOT_CUDA_CHECK(cudaStreamCreate(&stream));
  cuda::CudaAllocator alloc(0);
  {
    cuda::PinnedStaging staging(/*max_pinned_bytes=*/0);
    const size_t n = size_t{1} << 20;
    std::vector<Buffer> dst;
    for (int i = 0; i < 20; ++i) {
      const std::vector<uint8_t> src(n, static_cast<uint8_t>(i + 1));
      dst.emplace_back(alloc, n);
      staging.copy_to_device(dst.back().data(), src.data(), n, stream);
    }
    EXPECT_EQ(staging.chunks(), 1u);
    EXPECT_EQ(staging.pinned_bytes(), n);
    LINGBOT_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < 20; ++i)
      EXPECT_EQ(cuda::testing::to_host<uint8_t>(dst[static_cast<size_t>(i)].data(), n),
                std::vector<uint8_t>(n, static_cast<uint8_t>(i + 1)))
          << "copy " << i;
  }
  LINGBOT_CUDA_CHECK(cudaStreamDestroy(stream));
}
