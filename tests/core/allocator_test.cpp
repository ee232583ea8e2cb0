// HostAllocator: zero-filled, 64-byte aligned, exact accounting; large buffers are lazily committed
// (reserved capacity costs no resident memory until written).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/allocator.h"
#include "core/memory_stats.h"

using namespace lingbot;

TEST(HostAllocator, ZeroFilledAlignedAndAccountedAtEverySize) {
  for (const HostPlacement placement : {HostPlacement::MapLarge, HostPlacement::Heap}) {
    HostAllocator alloc(placement);
    // Below, at and above the size where allocations switch from the heap to anonymous mappings.
    for (size_t bytes : {size_t{1}, size_t{63}, size_t{4096}, (size_t{1} << 20) - 1, size_t{1} << 20,
                         (size_t{3} << 20) + 5}) {
      {
        Buffer b(alloc, bytes);
        ASSERT_NE(b.data(), nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << bytes;
        const auto* p = static_cast<const unsigned char*>(b.data());
        size_t nonzero = 0;
        for (size_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
        EXPECT_EQ(nonzero, 0u) << bytes;
        std::memset(b.data(), 0xAB, bytes);  // the whole range is writable
        EXPECT_EQ(alloc.bytes_allocated(), bytes);
      }
      EXPECT_EQ(alloc.bytes_allocated(), 0u);
    }
    EXPECT_EQ(alloc.allocation_count(), 6u);
  }
}

TEST(HostAllocator, HeapPlacementCommitsLargeBuffersAtOnce) {
  // The heap placement zero-fills eagerly (a recycled activation buffer must not fault again).
  if (current_rss_bytes() == 0) GTEST_SKIP() << "/proc/self/status has no VmRSS here";
  HostAllocator alloc(HostPlacement::Heap);
  const size_t before = current_rss_bytes();
  Buffer b(alloc, size_t{64} << 20);
  EXPECT_GT(current_rss_bytes(), before + (size_t{60} << 20)) << "a heap buffer is resident when handed out";
}

TEST(HostAllocator, LargeBuffersCostNoResidentMemoryUntilWritten) {
  if (current_rss_bytes() == 0) GTEST_SKIP() << "/proc/self/status has no VmRSS here";
  HostAllocator alloc;
  constexpr size_t kBytes = size_t{512} << 20;
  const size_t before = current_rss_bytes();
  Buffer b(alloc, kBytes);
  const size_t reserved = current_rss_bytes();
  EXPECT_LT(reserved, before + (size_t{32} << 20)) << "a fresh 512 MiB buffer is already resident";
  std::memset(b.data(), 1, kBytes / 2);
  EXPECT_GT(current_rss_bytes(), reserved + (size_t{200} << 20)) << "written half not resident";
}
