#pragma once
// The PTX instructions the tensor-core kernels use (attention.cu), one inline function each, so a
// kernel reads as CUDA C++ and the instructions' operand layouts are written down once. The host
// emulation of the tests (tests/cuda_emulated/shim/kernels/cuda/ptx.cuh) implements the same functions
// from the PTX ISA's definitions, and runs the kernels on the CPU with them.
//
// Built for an architecture below sm_80 the functions trap: a kernel fails loudly rather than skip
// the math (the host code only launches them on compute capability 8.0+).
#include <cstdint>

namespace lingbot::cuda::ptx {

// D = A·B + C for one warp, m16n8k16, f16 inputs, f32 accumulators (C is overwritten by D).
// Lane l, g = l / 4, t = l % 4 holds:
//   a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]    a[2] = A[g][2t+8..2t+9]    a[3] = A[g+8][2t+8..2t+9]
//   b0   = B[2t..2t+1][g]    b1   = B[2t+8..2t+9][g]                       (two 16-bit values, low first)
//   c[0..1] = C[g][2t..2t+1]                          c[2..3] = C[g+8][2t..2t+1]
__device__ __forceinline__ void mma_m16n8k16_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// The same with bf16 inputs.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Asynchronous 16-byte copy global -> shared (both 16-byte aligned), bypassing L1. The data is in
// shared memory only after cp_async_wait has retired its group, and visible to other threads only
// after a __syncthreads that follows the wait.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Closes the calling thread's current group of cp_async16 copies.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of the calling thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Four 8x8 b16 matrices from shared memory in one warp instruction: lane l gives the (16-byte
// aligned) address of row l % 8 of matrix l / 8; register i receives matrix i's fragment: row
// l / 4, columns 2·(l % 4) and +1 (low half first), the B operand layout of mma.m16n8k16. Trans
// delivers the transposed matrices: rows 2·(l % 4) and +1 at column l / 4 of the stored ones.
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace lingbot::cuda::ptx
