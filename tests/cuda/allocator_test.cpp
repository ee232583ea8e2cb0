// CudaAllocator: zeroed device memory, exact accounting, clear errors.
#include <gtest/gtest.h>

#include <string>

#include "cuda_test_util.h"

using namespace lingbot;
using namespace lingbot::cuda;
using namespace lingbot::cuda::testing;

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
  const size_t huge = size_t{1} << 60;
  try {
    Buffer b(alloc, huge);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device allocation of 1152921504606846976 bytes on CUDA device 0 failed: "), std::string::npos)
        << msg;
  }
  EXPECT_EQ(alloc.bytes_allocated(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 0u);
}
