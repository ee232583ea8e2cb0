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

int cuda_device_count(std::string* why_none) {
#if LINGBOT_HAVE_CUDA
  return cuda::device_count(why_none);
#else
  if (why_none) *why_none = "this build has no CUDA support";
  return 0;
#endif
}

Device resolve_device(Device requested, std::string* auto_note) {
  if (auto_note) auto_note->clear();
  if (requested == Device::Cpu) return Device::Cpu;
#if LINGBOT_HAVE_CUDA
  std::string why_none;
  const int devices = cuda::device_count(&why_none);
  if (requested == Device::Cuda) {
    LINGBOT_CHECK(devices > 0, "device cuda: no CUDA device is visible (cudaGetDeviceCount: ", why_none, ")");
    return Device::Cuda;
  }
  // auto: the GPU only when this build's kernels run on it (not on one older than every built
  // architecture, where --device cuda names the cause) and it can be opened (not taken by another
  // process in exclusive mode, not out of memory); otherwise the CPU, and the note says why.
  if (devices == 0) return Device::Cpu;
  std::string why;
  try {
    if (cuda::kernels_run_on(0)) return Device::Cuda;
    const cuda::ComputeCapability cc = cuda::compute_capability(0);
    why = detail::concat("cuda:0 is sm_", cc.major, cc.minor, ", and this build's kernels are compiled for sm ",
                         cuda::built_architectures(), " only");
  } catch (const Error& e) {
    why = detail::concat("cuda:0 cannot be used (", e.what(), ")");
  }
  if (auto_note) *auto_note = "device auto runs on the CPU: " + why;
  return Device::Cpu;
#else
  LINGBOT_CHECK(requested != Device::Cuda, "device cuda: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)");
  return Device::Cpu;
#endif
}

}  // namespace lingbot
