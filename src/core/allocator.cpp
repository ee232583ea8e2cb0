#include "core/allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace lingbot {

void* HostAllocator::allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw Error(detail::concat("host allocation of ", bytes, " bytes failed"));
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  bytes_ += bytes;
  ++count_;
  return p;
}

void HostAllocator::deallocate(void* p, size_t bytes) noexcept {
  std::free(p);
  bytes_ -= bytes;
}

}  // namespace lingbot
