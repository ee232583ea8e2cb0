#include "core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace lingbot {
namespace {

// Allocations from this size on are anonymous mappings: zero-filled by the kernel on first touch, so
// reserved-but-unused capacity (a page pool's free pages, a grown dense buffer's tail) costs no
// resident memory and no memset time. Smaller ones come from the C heap.
constexpr size_t kMapThreshold = size_t{1} << 20;

size_t page_rounded(size_t bytes) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

void* HostAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  if (placement_ == HostPlacement::MapLarge && bytes >= kMapThreshold) {
    p = ::mmap(nullptr, page_rounded(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error(detail::concat("host allocation of ", bytes, " bytes failed: ", std::strerror(errno)));
  } else {
    const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
    p = std::aligned_alloc(64, rounded);
    if (!p) throw Error(detail::concat("host allocation of ", bytes, " bytes failed"));
    std::memset(p, 0, rounded);
  }
  bytes_ += bytes;
  ++count_;
  return p;
}

void HostAllocator::deallocate(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (placement_ == HostPlacement::MapLarge && bytes >= kMapThreshold) {
    ::munmap(p, page_rounded(bytes));
  } else {
    std::free(p);
  }
  bytes_ -= bytes;
}

}  // namespace lingbot
