// CudaPagedKVCache against the CPU PagedKVCache: the same random stream of scale-phase, keyframe
// and non-keyframe steps, every eviction option and dtype; the bookkeeping must be identical and
// every block's attention output must agree (tolerances as in attention_cuda_test.cpp: the Simt
// kernel 5e-5; the tensor-core kernel f16 2^-11, bf16 2^-8, relative to max(1, |cpu|): attention_tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_cuda.h"
#include "kvcache/cuda/kv_cache_cuda.h"
#include "kvcache/paged_kv_cache.h"

using namespace lingbot;
using namespace lingbot::cuda;
using namespace lingbot::cuda::testing;
namespace k = lingbot::kernels;

namespace {

struct Variant {
  const char* name;
  bool cross_frame_special = true;
  bool camera_only = false;
  bool include_scale_frames = true;
  bool round_pages_pow2 = false;
  int sliding_window = 4;
};

void run_stream(const Variant& var, DType dtype, AttentionImpl impl, int head_dim, uint32_t seed) {
  CacheOptions o;
  o.num_blocks = 2;
  o.heads = 2;
  o.head_dim = head_dim;
  o.num_special_tokens = 6;
  o.tokens_per_frame = 6 + 21;
  o.scale_frames = 3;
  o.sliding_window = var.sliding_window;
  o.cross_frame_special = var.cross_frame_special;
  o.camera_only = var.camera_only;
  o.include_scale_frames = var.include_scale_frames;
  o.round_pages_pow2 = var.round_pages_pow2;
  o.dtype = dtype;
  HostAllocator host;
  PagedKVCache cpu(o, host);
  CudaAllocator dev;
  CudaPagedKVCache gpu(o, dev);
  CudaAttentionParams gpu_params;
  gpu_params.scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
  gpu_params.impl = impl;
  const kernels::AttentionParams cpu_params{gpu_params.scale, 1, kernels::AttentionCompute::F32};
  const std::string what = detail::concat(var.name, " ", dtype_name(dtype), " ", attention_impl_name(impl),
                                          " head_dim ", head_dim);
  SCOPED_TRACE(what);

  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t row = int64_t{o.heads} * o.head_dim;
  double worst = 0;
  auto step = [&](FrameMode mode, int n) {
    cpu.begin_step(mode, n);
    gpu.begin_step(mode, n);
    ASSERT_EQ(cpu.keys_in_step(), gpu.keys_in_step());
    const int64_t tokens = int64_t{n} * o.tokens_per_frame;
    for (int b = 0; b < o.num_blocks; ++b) {
      std::vector<float> q(tokens * row), kk(tokens * row), vv(tokens * row), out(tokens * row);
      for (auto* vec : {&q, &kk, &vv})
        for (float& x : *vec) x = u(rng);
      Buffer qd = to_device(dev, q.data(), q.size() * 4), kd = to_device(dev, kk.data(), kk.size() * 4),
             vd = to_device(dev, vv.data(), vv.size() * 4), od(dev, out.size() * 4);
      // Both caches store and hand out keys; each backend's attention kernel reads them.
      kernels::attention({q.data(), static_cast<int>(tokens), o.heads, o.head_dim, row},
                         cpu.store(b, {kk.data(), vv.data(), DType::F32, static_cast<int>(tokens), row}), out.data(),
                         cpu_params);
      cuda::attention({static_cast<const float*>(qd.data()), static_cast<int>(tokens), o.heads, o.head_dim, row},
                      gpu.store(b, {kd.data(), vd.data(), DType::F32, static_cast<int>(tokens), row}),
                      static_cast<float*>(od.data()), gpu_params);
      LINGBOT_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> got = to_host<float>(od.data(), out.size());
      int bad = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const double err = std::fabs(double(got[i]) - out[i]) / std::max(1.0, std::fabs(double(out[i])));
        worst = std::max(worst, err);
        if (!(err <= attention_tolerance(impl, dtype)) && bad++ < 3)
          ADD_FAILURE() << "block " << b << " element " << i << " got " << got[i] << " want " << out[i];
      }
    }
    cpu.end_step();
    gpu.end_step();
    ASSERT_TRUE(cpu.state() == gpu.bookkeeping().state());
    const CacheStats a = cpu.stats(), g = gpu.stats();
    EXPECT_EQ(a.frames_stored, g.frames_stored);
    EXPECT_EQ(a.visible_tokens, g.visible_tokens);
    EXPECT_EQ(a.bytes_reserved, g.bytes_reserved);
  };
  step(FrameMode::ScalePhase, o.scale_frames);
  for (int f = 0; f < 14; ++f) step(rng() % 10 < 7 ? FrameMode::Keyframe : FrameMode::NonKeyframe, 1);
  gpu.bookkeeping().check_invariants();
  std::printf("  %s: max rel error %.3g\n", what.c_str(), worst);
  // Reset reuses the device memory.
  const uint64_t allocations = dev.allocation_count();
  cpu.reset();
  gpu.reset();
  step(FrameMode::ScalePhase, 2);
  step(FrameMode::Keyframe, 1);
  EXPECT_EQ(dev.allocation_count(), allocations + 2 * o.num_blocks * 4);  // only the test's q/k/v/out buffers
}

const Variant kVariants[] = {
    {"default"},
    {"camera_only", true, true},
    {"no_cross_frame_special", false},
    {"no_scale_frames", true, false, false},
    {"pow2_pages", true, false, true, true},
    // The scale phase (3 frames) is larger than the window: its excess frames are evicted after its
    // attention, in end_step, as on the CPU.
    {"no_scale_frames_window_2", true, false, false, false, 2},
};

}  // namespace

TEST(CudaPagedKVCache, MatchesCpuPagedCacheForEveryOptionAndDtype) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 1;
  for (const Variant& v : kVariants)
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) run_stream(v, dt, AttentionImpl::Simt, 16, seed++);
}

TEST(CudaPagedKVCache, TensorCorePathMatchesCpuPagedCache) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 100;
  for (const Variant& v : kVariants)
    for (DType dt : {DType::F16, DType::BF16}) run_stream(v, dt, AttentionImpl::TensorCore, 64, seed++);
}

TEST(CudaPagedKVCache, OnlyThePagedBackendExistsOnCuda) {
  CudaAllocator alloc;
  CacheOptions o;
  o.tokens_per_frame = 6 + 16;
  try {
    make_cuda_kv_cache(KVBackend::Dense, o, alloc);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "KV backend 'dense' is not available on CUDA (only 'paged')");
  }
  EXPECT_EQ(alloc.allocation_count(), 0u);
}

namespace {
// One block of one 8-wide head, 4 patch tokens a frame, window 2, 4 unpinned scale frames.
CacheOptions one_block_options() {
  CacheOptions o;
  o.num_blocks = 1;
  o.heads = 1;
  o.head_dim = 8;
  o.tokens_per_frame = 6 + 4;
  o.include_scale_frames = false;
  o.sliding_window = 2;
  o.scale_frames = 4;
  return o;
}
}  // namespace

TEST(CudaPagedKVCache, StepRulesAreChecked) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
  CudaAllocator alloc;
  CudaPagedKVCache cache(one_block_options(), alloc);
  try {
    cache.end_step();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "end_step: no step in progress");
  }
  cache.begin_step(FrameMode::ScalePhase, 3);
  try {
    cache.begin_step(FrameMode::Keyframe, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "begin_step: the previous ScalePhase step was not ended (call end_step first)");
  }
  try {
    cache.end_step();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "end_step: block 0 was not stored in this ScalePhase step (its K/V would be missing)");
  }
}

// A frame step's tables (patch page table, special-stream runs) go up through pinned memory: from
// pageable memory each upload would wait for the previous frame's queued work on the device.
TEST(CudaPagedKVCache, StepTablesUploadThroughPinnedMemory) {
  LINGBOT_REQUIRE_CUDA_DEVICE();
#ifndef LINGBOT_CUDA_RUNTIME_SHIM
  GTEST_SKIP() << "counts the host emulation's pageable copies (tests/cuda_emulated)";
#else
  CudaAllocator alloc;
  CudaPagedKVCache cache(one_block_options(), alloc);
  const long before = emulated_pageable_uploads();
  cache.begin_step(FrameMode::ScalePhase, 3);
  EXPECT_GT(cache.keys_in_step(), 0);
  EXPECT_EQ(emulated_pageable_uploads(), before);
#endif
}

// Needs no device: the allocator kind is checked before any pool is allocated.
TEST(CudaPagedKVCache, RejectsAHostAllocator) {
  CacheOptions o;
  o.num_blocks = 1;
  o.heads = 2;
  o.head_dim = 16;
  o.num_special_tokens = 6;
  o.tokens_per_frame = 6 + 4;
  HostAllocator host;
  try {
    CudaPagedKVCache cache(o, host);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "CudaPagedKVCache: the allocator must provide device memory (got a host allocator)");
  }
  EXPECT_EQ(host.allocation_count(), 0u);
}
