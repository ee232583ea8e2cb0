#pragma once
// Allocator interface: where large buffers (KV page pools, weights, activations) live.
// The CPU implementation is aligned host memory; a CUDA backend provides device memory through the
// same interface. Buffers are RAII (Buffer frees through the allocator that made it).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace lingbot {

enum class MemoryKind : uint8_t { Host, Device };

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns zero-initialised memory of `bytes` bytes aligned to at least 64 bytes; throws on failure.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  virtual MemoryKind kind() const = 0;
  // Bytes currently allocated through this allocator (exact accounting for stats).
  virtual size_t bytes_allocated() const = 0;
  // Number of allocate() calls so far (lets tests prove "no new allocation").
  virtual uint64_t allocation_count() const = 0;
};

// How HostAllocator places buffers of 1 MiB and more.
enum class HostPlacement : uint8_t {
  // Anonymous mappings: zero pages, resident only when written (reserved-but-unused capacity is
  // free). For long-lived pools (KV pages, dense caches).
  MapLarge,
  // The C heap for every size: freed memory is reused without page faults. For short-lived,
  // recycled buffers (a backend's activations).
  Heap,
};

// 64-byte aligned, zero-initialised host memory with exact byte accounting.
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(HostPlacement placement = HostPlacement::MapLarge) : placement_(placement) {}
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  MemoryKind kind() const override { return MemoryKind::Host; }
  size_t bytes_allocated() const override { return bytes_; }
  uint64_t allocation_count() const override { return count_; }

 private:
  HostPlacement placement_ = HostPlacement::MapLarge;
  size_t bytes_ = 0;
  uint64_t count_ = 0;
};

// Shared process-wide host allocator is deliberately absent: owners pass an Allocator& explicitly.

// An owning buffer. Move-only; frees through its allocator.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& alloc, size_t bytes) : alloc_(&alloc), bytes_(bytes), data_(bytes ? alloc.allocate(bytes) : nullptr) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : alloc_(o.alloc_), bytes_(o.bytes_), data_(o.data_) { o.release_(); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      alloc_ = o.alloc_;
      bytes_ = o.bytes_;
      data_ = o.data_;
      o.release_();
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() noexcept {
    if (data_) alloc_->deallocate(data_, bytes_);
    release_();
  }
  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Allocator* allocator() const { return alloc_; }

 private:
  void release_() noexcept {
    alloc_ = nullptr;
    bytes_ = 0;
    data_ = nullptr;
  }
  Allocator* alloc_ = nullptr;
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace lingbot
