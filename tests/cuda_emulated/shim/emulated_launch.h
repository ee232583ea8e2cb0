#pragma once
// What every emulated kernel launch checks before it runs, as a device's launch would fail or fault:
// the launch configuration against the device limits (block at most 1024 threads and 1024 x 1024 x
// 64, grid at most (2^31 - 1) x 65535 x 65535, none of them 0), and every pointer argument (a raw
// pointer passed to the kernel; pointers inside struct arguments are not seen) against the shim's
// allocations: a non-null pointer that is not device memory (host memory, pinned host memory, a
// stack array) would fault on a device, so the launch aborts naming the kernel and the argument.
//
// The launches themselves are emulated_grid.h's. Included by the shim's cuda_runtime_api.h after its
// allocation registry. Test code only.
#include <cstdio>
#include <cstdlib>
#include <type_traits>

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

[[noreturn]] inline void launch_failure(const char* kernel, const char* what) {
  std::fprintf(stderr, "emulated CUDA: kernel %s: %s\n", kernel, what);
  std::abort();
}

inline void check_launch(const LaunchConfig& c, const char* kernel) {
  char msg[160];
  const unsigned long threads = static_cast<unsigned long>(c.block.x) * c.block.y * c.block.z;
  if (c.block.x == 0 || c.block.y == 0 || c.block.z == 0 || c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64 ||
      threads > 1024) {
    std::snprintf(msg, sizeof msg, "block (%u,%u,%u) outside the device limits (1..1024 threads, z <= 64)", c.block.x,
                  c.block.y, c.block.z);
    launch_failure(kernel, msg);
  }
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 0x7fffffffu || c.grid.y > 65535 ||
      c.grid.z > 65535) {
    std::snprintf(msg, sizeof msg, "grid (%u,%u,%u) outside the device limits (x 1..2^31-1, y and z 1..65535)",
                  c.grid.x, c.grid.y, c.grid.z);
    launch_failure(kernel, msg);
  }
}

template <typename T>
void check_argument(const char* kernel, int index, const T& arg) {
  if constexpr (std::is_pointer_v<T>) {
    if (arg != nullptr && !emulated_is_device(static_cast<const void*>(arg))) {
      char msg[160];
      std::snprintf(msg, sizeof msg, "argument %d (%p) is not device memory: a device would fault reading it", index,
                    static_cast<const void*>(arg));
      launch_failure(kernel, msg);
    }
  }
}

template <typename... Args>
void check_arguments(const char* kernel, const Args&... args) {
  int index = 0;
  (check_argument(kernel, index++, args), ...);
}

}  // namespace lingbot::emu
