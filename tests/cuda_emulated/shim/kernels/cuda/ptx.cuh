#pragma once
// The host emulation's kernels/cuda/ptx.cuh (found before src/ on the emulated build's include
// path): the same functions, run by the warp-collective emulation of emulated_grid.h. Test code only.
#include <cstdint>

#include <cuda_runtime_api.h>  // the shim's, which brings emulated_grid.h

namespace lingbot::cuda::ptx {

inline void mma_m16n8k16_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::lingbot::emu::mma_m16n8k16(DType::F16, c, a, b0, b1);
}
inline void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::lingbot::emu::mma_m16n8k16(DType::BF16, c, a, b0, b1);
}
inline void cp_async16(void* smem, const void* gmem) {
  ::lingbot::emu::async_copy(smem, gmem, 16);
}
inline void cp_async_commit() { ::lingbot::emu::async_commit(); }
template <int N>
void cp_async_wait() {
  ::lingbot::emu::async_wait(N);
}
template <bool Trans>
void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* smem) {
  ::lingbot::emu::ldmatrix_x4(Trans, r, smem);
}

}  // namespace lingbot::cuda::ptx
