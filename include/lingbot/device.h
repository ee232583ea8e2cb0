#pragma once
// Where a session runs the model: the CPU, a CUDA GPU, or `auto` (CUDA when this build has CUDA
// support and a device is visible that its kernels run on, else the CPU). One name for the concept everywhere: `device`
// (SessionOptions::device, `--device`, Python `device=`, summary.json options.device).
#include <cstdint>
#include <string>
#include <string_view>

namespace lingbot {

enum class Device : uint8_t { Auto, Cpu, Cuda };

std::string_view device_name(Device d);  // "auto" | "cpu" | "cuda"
// Throws Error("unknown device 'x' (expected auto, cpu or cuda)").
Device parse_device(std::string_view name);

bool cuda_compiled();     // this build has CUDA support (-DLINGBOT_CUDA=ON)
// Visible CUDA devices; 0 without CUDA support, without a driver or without a device, and then, when
// why_none is given, why ("this build has no CUDA support", or cudaGetDeviceCount's error such as
// "cudaErrorNoDevice: no CUDA-capable device is detected").
int cuda_device_count(std::string* why_none = nullptr);

// The device a session gets: Auto -> Cuda when cuda_device_count() > 0, the build's kernels run on
// device 0 (compiled for its architecture: CMAKE_CUDA_ARCHITECTURES) and it can be opened, else Cpu;
// when a device is visible but not used, *auto_note (when given; else cleared) says why, for a notice
// ("device auto runs on the CPU: cuda:0 is sm_75, and this build's kernels are compiled for sm 80, 90
// only"). Cuda without support or without a device throws Error naming what is missing (a device the
// kernels do not run on: the CUDA backend's error, naming its sm and the built ones).
Device resolve_device(Device requested, std::string* auto_note = nullptr);

}  // namespace lingbot
