#include "lingbot/device.h"

#include "core/error.h"

#if LINGBOT_HAVE_CUDA
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/device_support.h"
#endif

namespace lingbot {

std::string_view device_name(Device d) {
  switch (d) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
    case Device::Auto: break;
  }
  return "auto";
}

Device parse_device(std::string_view name) {
  if (name == "auto") return Device::Auto;
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  throw Error(detail::concat("unknown device '", name, "' (expected auto, cpu or cuda)"));
}

bool cuda_compiled() {
#if LINGBOT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if LINGBOT_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

namespace {
bool cuda_kernels_run() {
#if LINGBOT_HAVE_CUDA
  return cuda::kernels_run_on(0);
#else
  return false;
#endif
}
}  // namespace

Device resolve_device(Device requested) {
  if (requested == Device::Cpu) return Device::Cpu;
  const int devices = cuda_device_count();
  // auto: the GPU only when this build's kernels run on it (not on one older than every built
  // architecture, where --device cuda names the cause).
  if (requested == Device::Auto) return devices > 0 && cuda_kernels_run() ? Device::Cuda : Device::Cpu;
  LINGBOT_CHECK(cuda_compiled(), "device cuda: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)");
  LINGBOT_CHECK(devices > 0, "device cuda: no CUDA device is visible (cudaGetDeviceCount found none)");
  return Device::Cuda;
}

}  // namespace lingbot
