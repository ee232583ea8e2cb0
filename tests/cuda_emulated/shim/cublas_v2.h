#pragma once
// Host emulation of the cuBLAS subset the CUDA backend calls (see cuda_runtime_api.h here): column-
// major SGEMM through CBLAS, and GemmEx with f16 / bf16 inputs widened to f32 first (the real call
// accumulates in f32 too). Test code only.
#include <cblas.h>

#include <vector>

#include "cuda_runtime_api.h"
#include "lingbot/dtype.h"

typedef void* cublasHandle_t;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cudaDataType_t { CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };

inline const char* cublasGetStatusName(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}
inline const char* cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "invalid value"; }
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  static int handle;
  *h = &handle;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }

inline CBLAS_TRANSPOSE emulated_op(cublasOperation_t o) { return o == CUBLAS_OP_T ? CblasTrans : CblasNoTrans; }

inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
  // The leading-dimension rules cuBLAS enforces (a wrong layout fails here as it would on a device).
  if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (*beta == 0.0f)  // cuBLAS does not read C when beta is 0 (it may hold NaN)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) C[i + static_cast<size_t>(j) * ldc] = 0.0f;
  cblas_sgemm(CblasColMajor, emulated_op(ta), emulated_op(tb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

inline std::vector<float> emulated_widen(const void* p, cudaDataType_t t, size_t n) {
  std::vector<float> v(n);
  lingbot::convert_to_f32(p, t == CUDA_R_16BF ? lingbot::DType::BF16 : lingbot::DType::F16, v.data(), n);
  return v;
}

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                                   cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t, cublasGemmAlgo_t) {
  if (ct != CUDA_R_32F || at == CUDA_R_32F || bt != at) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t a_cols = ta == CUBLAS_OP_T ? m : k, b_cols = tb == CUBLAS_OP_T ? k : n;
  const std::vector<float> a = emulated_widen(A, at, static_cast<size_t>(lda) * a_cols);
  const std::vector<float> b = emulated_widen(B, bt, static_cast<size_t>(ldb) * b_cols);
  return cublasSgemm(h, ta, tb, m, n, k, static_cast<const float*>(alpha), a.data(), lda, b.data(), ldb,
                     static_cast<const float*>(beta), static_cast<float*>(C), ldc);
}
