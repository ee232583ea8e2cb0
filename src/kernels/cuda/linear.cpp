// The cuBLAS GEMMs behind cuda::linear (ops_cuda.h): host code only (the bias and rounding kernels
// live in model_ops.cu and ops.cu).
#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops_cuda.h"
#include "kernels/cuda/ops_cuda.h"

namespace lingbot::cuda {

void linear(const CudaContext& ctx, const float* x, int64_t n, int64_t in, const float* W, const float* b,
            int64_t out, float* y, int64_t x_stride, int64_t y_stride) {
  LINGBOT_CHECK(n >= 0 && in > 0 && out > 0, "cuda linear: bad shape n=", n, " in=", in, " out=", out);
  if (x_stride == 0) x_stride = in;
  if (y_stride == 0) y_stride = out;
  LINGBOT_CHECK(x_stride >= in, "cuda linear: x_stride ", x_stride, " < in ", in);
  LINGBOT_CHECK(y_stride >= out, "cuda linear: y_stride ", y_stride, " < out ", out);
  LINGBOT_CHECK(n <= INT_MAX && in <= INT_MAX && out <= INT_MAX && x_stride <= INT_MAX && y_stride <= INT_MAX,
                "cuda linear: dimensions exceed cuBLAS's int range");
  if (n == 0) return;
  // Row-major y[n,out] is column-major y^T [out, n]: y^T = W (col-major [in,out], transposed) · x^T.
  const float one = 1.0f, zero = 0.0f;
  LINGBOT_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(n),
                                   static_cast<int>(in), &one, W, static_cast<int>(in), x,
                                   static_cast<int>(x_stride), &zero, y, static_cast<int>(y_stride)));
  if (b) add_bias_rows(y, b, n, out, y_stride, ctx.stream());
}

void linear(const CudaContext& ctx, const float* x, int64_t n, int64_t in, const void* W, DType w_dtype,
            const float* b, int64_t out, float* y, void* x_scratch, int64_t x_stride, int64_t y_stride) {
  if (w_dtype == DType::F32)
    return linear(ctx, x, n, in, static_cast<const float*>(W), b, out, y, x_stride, y_stride);
  LINGBOT_CHECK(n >= 0 && in > 0 && out > 0, "cuda linear: bad shape n=", n, " in=", in, " out=", out);
  if (x_stride == 0) x_stride = in;
  if (y_stride == 0) y_stride = out;
  LINGBOT_CHECK(x_stride >= in, "cuda linear: x_stride ", x_stride, " < in ", in);
  LINGBOT_CHECK(y_stride >= out, "cuda linear: y_stride ", y_stride, " < out ", out);
  LINGBOT_CHECK(n <= INT_MAX && in <= INT_MAX && out <= INT_MAX && y_stride <= INT_MAX,
                "cuda linear: dimensions exceed cuBLAS's int range");
  if (n == 0) return;
  LINGBOT_CHECK(x_scratch != nullptr, "cuda linear: ", dtype_name(w_dtype), " weights need an activation scratch");
  store_rows(x, x_stride, x_scratch, w_dtype, in, n, in, ctx.stream());
  const cudaDataType_t t = w_dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.0f, zero = 0.0f;
  // Same column-major reading as the f32 overload: y^T [out, n] = W^T' · x^T.
  LINGBOT_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                    static_cast<int>(n), static_cast<int>(in), &one, W, t, static_cast<int>(in),
                                    x_scratch, t, static_cast<int>(in), &zero, y, CUDA_R_32F,
                                    static_cast<int>(y_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (b) add_bias_rows(y, b, n, out, y_stride, ctx.stream());
}

}  // namespace lingbot::cuda
