#pragma once
// Whether this build's kernels can run on a device: nvcc compiles them for the architectures of
// CMAKE_CUDA_ARCHITECTURES (default 80;90), and a GPU older than all of them (a T4 is sm_75) has no
// image to run, which would otherwise surface as cudaErrorNoKernelImageForDevice at the first launch.

namespace lingbot::cuda {

// True when `device` can run this build's kernels (machine code for it, or PTX it can compile); false
// when it has no image. Throws Error for any other CUDA failure (no such device, a driver error).
bool kernels_run_on(int device);

// The architectures the kernels were compiled for (e.g. "80, 90").
const char* built_architectures();

}  // namespace lingbot::cuda
