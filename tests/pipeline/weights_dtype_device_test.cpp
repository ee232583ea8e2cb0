// `--weights-dtype auto` per device (pipeline/session_backend.h): the CUDA rule over the compute
// capability, the CPU rule (kernels::auto_weights_dtype), and what each says it chose. The CUDA
// path on a device (or its host emulation) is tested in tests/cuda/session_cuda_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "kernels/cuda/attention_rule.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "pipeline/session_backend.h"

using namespace lingbot;

TEST(WeightsDtypeForDevice, CudaAutoIsBf16FromSm80) {
  EXPECT_EQ(cuda_auto_weights_dtype(6, 1), DType::F32);  // Pascal: no tensor cores
  EXPECT_EQ(cuda_auto_weights_dtype(7, 0), DType::F32);  // Volta: f16 tensor cores only
  EXPECT_EQ(cuda_auto_weights_dtype(7, 5), DType::F32);  // Turing
  EXPECT_EQ(cuda_auto_weights_dtype(8, 0), DType::BF16);  // A100
  EXPECT_EQ(cuda_auto_weights_dtype(8, 6), DType::BF16);  // RTX 30xx
  EXPECT_EQ(cuda_auto_weights_dtype(8, 9), DType::BF16);  // RTX 40xx
  EXPECT_EQ(cuda_auto_weights_dtype(9, 0), DType::BF16);  // H100 / H200
  EXPECT_EQ(cuda_auto_weights_dtype(12, 0), DType::BF16);
}

TEST(WeightsDtypeForDevice, CpuAutoFollowsTheCpuGemm) {
  const WeightsDtypeForDevice a = parse_weights_dtype("auto", Device::Cpu);
  EXPECT_EQ(a.dtype, kernels::auto_weights_dtype());
  EXPECT_EQ(a.rule, a.dtype == DType::BF16 ? "auto: bf16 (native bf16 GEMM on this CPU)"
                                           : "auto: f32 (no native bf16 GEMM on this CPU)");
  EXPECT_EQ(a.notice, "");  // auto never picks a dtype that needs a notice
  const std::pair<const char*, DType> names[] = {
      {"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16}, {"bfloat16", DType::BF16}};
  for (const auto& [name, dt] : names) {
    const WeightsDtypeForDevice w = parse_weights_dtype(name, Device::Cpu);
    EXPECT_EQ(w.dtype, dt) << name;
    EXPECT_EQ(w.rule, "") << name;  // an explicit dtype needs no explanation
    // A dtype without a native GEMM on this CPU works, with one line saying it is slower than f32.
    const std::string dn(dtype_name(dt));
    EXPECT_EQ(w.notice, kernels::gemm_path(dt) == kernels::GemmPath::PanelSgemm
                            ? "notice: no native " + dn + " GEMM on this CPU: " + dn +
                                  " weights halve their memory but each GEMM widens them to f32 (slower than f32)"
                            : "")
        << name;
  }
  EXPECT_NE(gemm_path_description(Device::Cpu, DType::BF16).find(kernels::gemm_path_description(DType::BF16)),
            std::string::npos);
}

TEST(WeightsDtypeForDevice, ErrorsNameTheProblem) {
  try {
    parse_weights_dtype("int8", Device::Cpu);
    FAIL() << "int8 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown weights dtype 'int8' (expected auto, f32, f16 or bf16)");
  }
  EXPECT_THROW(parse_weights_dtype("auto", Device::Auto), Error);  // the device is resolved first
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: tests/cuda covers auto on it";
  std::string why_none;
  cuda_device_count(&why_none);
  try {
    parse_weights_dtype("auto", Device::Cuda);
    FAIL() << "auto resolved for cuda without a device";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), cuda_compiled()
                                         ? "device cuda: no CUDA device is visible (cudaGetDeviceCount: " + why_none + ")"
                                         : "device cuda: this build has no CUDA support (configure with -DLINGBOT_CUDA=ON)");
  }
}

TEST(WeightsDtypeForDevice, CudaGemmDescriptionNamesCublas) {
  EXPECT_EQ(gemm_path_description(Device::Cuda, DType::F32), "cuBLAS f32 SGEMM (no TF32)");
  EXPECT_EQ(gemm_path_description(Device::Cuda, DType::BF16),
            "cuBLAS bf16 tensor cores, activations rounded to it, f32 accumulation");
}

// The banner names the CUDA attention kernel that runs (cuda::resolve_attention_impl's Auto): it said
// "f32 math" while the tensor-core kernel rounded Q and P to bf16.
TEST(WeightsDtypeForDevice, CudaAttentionDescriptionNamesTheKernelThatRuns) {
  EXPECT_EQ(attention_path_description(Device::Cuda, DType::BF16, DType::BF16, 64, 8),
            "CUDA: over the cache tensor cores (Q and P rounded to bf16, f32 accumulation) (bf16 K/V); encoder and "
            "frame blocks tensor cores (Q and P rounded to bf16, f32 accumulation) (bf16 weights)");
  EXPECT_EQ(attention_path_description(Device::Cuda, DType::F32, DType::F32, 64, 8),
            "CUDA: over the cache SIMT kernel, f32 math (f32 K/V); encoder and frame blocks SIMT kernel, f32 math "
            "(f32 weights)");
  EXPECT_EQ(attention_path_description(Device::Cuda, DType::F16, DType::F16, 32, 8),
            "CUDA: over the cache SIMT kernel on f16 K/V, f32 math (f16 K/V); encoder and frame blocks SIMT kernel, "
            "f32 math (f16 weights)");
  EXPECT_EQ(attention_path_description(Device::Cuda, DType::BF16, DType::BF16, 64, 7),
            "CUDA: over the cache SIMT kernel on bf16 K/V, f32 math (tensor cores need compute capability 8.0, this "
            "GPU is 7.x) (bf16 K/V); encoder and frame blocks SIMT kernel on bf16 K/V, f32 math (tensor cores need "
            "compute capability 8.0, this GPU is 7.x) (bf16 weights)");
  // The rule the banner shares with the dispatch: tensor cores only from compute capability 8.0 (a T4,
  // sm_75, runs the SIMT kernel on bf16 K/V at head_dim 64).
  EXPECT_TRUE(cuda::auto_runs_tensor_core_attention(DType::BF16, 64, 8));
  EXPECT_TRUE(cuda::auto_runs_tensor_core_attention(DType::F16, 64, 9));
  EXPECT_FALSE(cuda::auto_runs_tensor_core_attention(DType::BF16, 64, 7));
  EXPECT_FALSE(cuda::auto_runs_tensor_core_attention(DType::BF16, 128, 8));
  EXPECT_FALSE(cuda::auto_runs_tensor_core_attention(DType::F32, 64, 9));
}
