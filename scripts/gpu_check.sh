#!/usr/bin/env bash
# GPU acceptance check for the CUDA backend (issue #8), for a machine with an NVIDIA GPU
# (H100/H200 class) and the packages of scripts/setup.sh already installed:
#   1. builds the CUDA configuration (test_cuda only, for this GPU's architecture),
#   2. runs the CUDA equivalence suite (must run, not skip),
#   3. runs the paged-vs-contiguous attention benchmark at the 518x378 streaming shape
#      (1005 queries, 72 frames + specials) and checks contiguous_time / paged_time >= 0.9,
#   4. runs the 10,000-frame device memory study (patch memory must stay flat),
#   5. runs `lingbot-map bench kv --device cuda` at the 518 streaming shape (table + TFLOP/s and GB/s as
#      fractions of the GPU's measured peaks; informational, no threshold).
# Output goes to stdout; the exit status is non-zero if any check fails.
# Env: JOBS (build jobs, default nproc), CUDA_ARCH (default native), LINGBOT_MEMORY_FRAMES (10000).
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=build-gpu-check
status=0
fail() { echo "CHECK FAILED: $*"; status=1; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "(nvidia-smi unavailable)"
start=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLINGBOT_CUDA=ON -DLINGBOT_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}" >/dev/null || { echo "configure failed"; exit 1; }
cmake --build "$BUILD" -j"$JOBS" --target test_cuda lingbot-map >"$BUILD.log" 2>&1 || { tail -50 "$BUILD.log"; echo "build failed"; exit 1; }
echo "== build: $(( $(date +%s) - start )) s"

echo "== 1. CUDA equivalence suite"
out=$("$BUILD/tests/test_cuda" 2>&1); rc=$?
echo "$out" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |max rel error|Failure|got " | head -120
[ $rc -eq 0 ] || fail "test_cuda exited with $rc"
if echo "$out" | grep -q "no CUDA device: skipped"; then fail "test_cuda skipped: no CUDA device visible"; fi

echo "== 2. paged vs contiguous attention (streaming shape)"
out=$(timeout 300 "$BUILD/tests/test_cuda" --gtest_also_run_disabled_tests \
  --gtest_filter='CudaBench.DISABLED_PagedVsContiguousStreamingShape' 2>&1); rc=$?
echo "$out" | grep -vE "^\[ |^$|^Note:"
[ $rc -eq 0 ] || fail "benchmark exited with $rc"
ratio=$(echo "$out" | sed -n 's/.*contiguous_over_paged_time=\([0-9.]*\).*/\1/p')
if [ -z "$ratio" ]; then fail "no benchmark result"; 
elif awk -v r="$ratio" 'BEGIN { exit !(r >= 0.9) }'; then echo "CHECK OK: contiguous/paged time $ratio >= 0.9";
else fail "contiguous/paged time $ratio < 0.9"; fi

echo "== 3. ${LINGBOT_MEMORY_FRAMES:-10000}-frame device memory run"
out=$(timeout 400 "$BUILD/tests/test_cuda" --gtest_also_run_disabled_tests \
  --gtest_filter='CudaBench.DISABLED_TenThousandFrameDeviceMemory' 2>&1); rc=$?
echo "$out" | grep -vE "^\[ |^$|^Note:"
[ $rc -eq 0 ] || fail "memory run exited with $rc"
echo "$out" | grep -q "patch_bytes_flat=yes" && echo "CHECK OK: patch memory flat" || fail "patch memory not flat"

echo "== 4. bench kv --device cuda (518x378, bf16, 24 blocks, 400 frames, attention sampled every 20 frames)"
timeout 300 "$BUILD/lingbot-map" bench kv --device cuda --resolution 518 --frames 400 --attend-every 20 \
  --csv "$BUILD-bench-kv-cuda.csv" 2>&1 | grep -v "^progress"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail "bench kv --device cuda exited with $rc"

echo "== total $(( $(date +%s) - start )) s; status $status"
exit $status
