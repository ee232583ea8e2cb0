// CudaAllocator and StreamPoolAllocator: zeroed device memory, exact accounting, clear errors.
#include <gtest/gtest.h>

#include <string>

#include "cuda_test_util.h"
#include "kernels/cuda/stream_pool_allocator.h"

using namespace lingbot;
using namespace lingbot::cuda;
using namespace lingbot::cuda::testing;

namespace {

// A 2^60-byte request fails with an error naming the size and the device, and accounts nothing.
void expect_out_of_memory_error(Allocator& alloc) {
  try {
    Buffer b(alloc, size_t{1} << 60);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device allocation of 1152921504606846976 bytes on CUDA device 0 failed: "), std::string::npos)
        << msg;
  }
  EXPECT_EQ(alloc.bytes_allocated(), 0u);
}

}  // namespace

TEST(CudaAllocator, ReportsDeviceKindWithoutTouchingTheDevice) {
  CudaAllocator alloc;
  EXPECT_EQ(alloc.kind(), MemoryKind::Device);
  EXPECT_EQ(alloc.bytes_allocated(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 0u);
  EXPECT_EQ(alloc.device(), 0);
}

TEST(CudaAllocator, RejectsNegativeDevice) {
  try {
    CudaAllocator alloc(-1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "CudaAllocator: device must be >= 0, got -1");
  }
}

TEST(CudaAllocator, AllocatesZeroedMemoryWithExactAccounting) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  CudaAllocator alloc;
  {
    Buffer a(alloc, 1000);
    Buffer b(alloc, 24);
    EXPECT_EQ(alloc.bytes_allocated(), 1024u);
    EXPECT_EQ(alloc.allocation_count(), 2u);
    const auto bytes = to_host<unsigned char>(a.data(), 1000);
    for (unsigned char c : bytes) ASSERT_EQ(c, 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    cudaPointerAttributes attr{};
    LINGBOT_CUDA_CHECK(cudaPointerGetAttributes(&attr, a.data()));
    EXPECT_EQ(attr.type, cudaMemoryTypeDevice);  // plain cudaMalloc, not managed memory
  }
  EXPECT_EQ(alloc.bytes_allocated(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 2u);
}

TEST(CudaAllocator, OutOfMemoryIsAnErrorNamingTheSize) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  CudaAllocator alloc;
  expect_out_of_memory_error(alloc);
  EXPECT_EQ(alloc.allocation_count(), 0u);
}

TEST(CudaStreamPoolAllocator, ZeroedStreamOrderedMemoryWithPeakAccounting) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  cudaStream_t stream = nullptr;
  LINGBOT_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    StreamPoolAllocator alloc(0, stream);
    EXPECT_EQ(alloc.kind(), MemoryKind::Device);
    {
      Buffer a(alloc, 1000);
      {
        Buffer b(alloc, 3000);
        EXPECT_EQ(alloc.bytes_allocated(), 4000u);
      }
      Buffer c(alloc, 500);  // reuses pool memory freed on the stream
      EXPECT_EQ(alloc.bytes_allocated(), 1500u);
      LINGBOT_CUDA_CHECK(cudaStreamSynchronize(stream));  // the zeroing runs on the stream
      for (unsigned char x : to_host<unsigned char>(c.data(), 500)) ASSERT_EQ(x, 0);
      cudaPointerAttributes attr{};
      LINGBOT_CUDA_CHECK(cudaPointerGetAttributes(&attr, a.data()));
      EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
    }
    EXPECT_EQ(alloc.bytes_allocated(), 0u);
    EXPECT_EQ(alloc.allocation_count(), 3u);
    EXPECT_EQ(alloc.peak_bytes(), 4000u);
  }
  LINGBOT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(CudaStreamPoolAllocator, OutOfMemoryIsAnErrorNamingTheSize) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  StreamPoolAllocator alloc(0, nullptr);
  expect_out_of_memory_error(alloc);
}
