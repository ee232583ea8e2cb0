#!/usr/bin/env bash
# GPU acceptance check for the CUDA backend (issue #8), for a machine with an NVIDIA GPU
# (H100/H200 class). Two ways to get the binaries:
#   bash scripts/gpu_check.sh                      the packages of scripts/setup.sh are installed here:
#                                                  builds test_cuda + the CLI for this GPU
#   bash scripts/gpu_check.sh --bundle gpu-bundle  a bare CUDA machine: runs the test_cuda and
#                                                  lingbot-gpu-bench that scripts/gpu_bundle.sh built
#                                                  elsewhere (no CLI: step 5 is skipped, saying so)
# Steps:
#   1. builds the CUDA configuration (test_cuda + CLI, for this GPU's architecture), or takes the bundle,
#   2. runs the CUDA equivalence suite (must run, not skip),
#   3. runs the paged-vs-contiguous attention benchmark at the 518x378 streaming shape
#      (1005 queries, 72 frames + specials) and checks contiguous_time / paged_time >= 0.9
#      (`lingbot-map bench gpu attention`; the bundle: `lingbot-gpu-bench attention`, the same report),
#   4. runs the 10,000-frame device memory study (patch memory must stay flat; `bench gpu memory`),
#   5. runs `lingbot-map bench kv --device cuda` at the 518 streaming shape (table + TFLOP/s and GB/s as
#      fractions of the GPU's measured peaks; informational, no threshold).
# Output goes to stdout; the exit status is non-zero if any check fails.
# Env: JOBS (build jobs, default nproc), CUDA_ARCH (default native), LINGBOT_MEMORY_FRAMES (10000).
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=build-gpu-check
BUNDLE=
if [ "${1:-}" = "--bundle" ]; then
  BUNDLE=${2:?--bundle needs the folder scripts/gpu_bundle.sh wrote}
elif [ $# -gt 0 ]; then
  echo "usage: $0 [--bundle DIR]"; exit 2
fi
status=0
fail() { echo "CHECK FAILED: $*"; status=1; }
# test_cuda's whole-model test reads testdata/tiny of this checkout (a bundle runs away from the tree it was built in).
export LINGBOT_TESTDATA_DIR="$PWD/testdata"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "(nvidia-smi unavailable)"
start=$(date +%s)
if [ -n "$BUNDLE" ]; then
  [ -x "$BUNDLE/test_cuda" ] || { echo "no $BUNDLE/test_cuda (run scripts/gpu_bundle.sh first)"; exit 1; }
  cat "$BUNDLE/MANIFEST" | head -3
  # The bundle's own libraries, then the CUDA toolkit's (cudart, cuBLAS) wherever this machine has them.
  cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
  export LD_LIBRARY_PATH="$(cd "$BUNDLE/lib" && pwd):${cuda_libs}${LD_LIBRARY_PATH:-}"
  TEST_CUDA="$BUNDLE/test_cuda"
  [ -x "$BUNDLE/lingbot-gpu-bench" ] || { echo "no $BUNDLE/lingbot-gpu-bench (rerun scripts/gpu_bundle.sh)"; exit 1; }
  GPU_BENCH=("$BUNDLE/lingbot-gpu-bench")
  CLI=
  # No toolkit libraries in the usual places: fall back to the CUDA wheels' copies (e.g. PyTorch's venv).
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    if ldd "$TEST_CUDA" "${GPU_BENCH[0]}" | grep -q "$lib => not found"; then
      dir=$(find / -xdev -name "$lib" -not -path "*/proc/*" 2>/dev/null | head -1 | xargs -r dirname)
      [ -n "$dir" ] && export LD_LIBRARY_PATH="$dir:$LD_LIBRARY_PATH" && echo "using $lib from $dir"
    fi
  done
  missing=$(ldd "$TEST_CUDA" "${GPU_BENCH[0]}" | grep "not found" || true)
  [ -z "$missing" ] || { echo "$missing"; echo "bundle libraries missing on this machine"; exit 1; }
else
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLINGBOT_CUDA=ON -DLINGBOT_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}" >/dev/null || { echo "configure failed"; exit 1; }
  cmake --build "$BUILD" -j"$JOBS" --target test_cuda lingbot-map >"$BUILD.log" 2>&1 || { tail -50 "$BUILD.log"; echo "build failed"; exit 1; }
  echo "== build: $(( $(date +%s) - start )) s"
  TEST_CUDA="$BUILD/tests/test_cuda"
  CLI="$BUILD/lingbot-map"
  GPU_BENCH=("$CLI" bench gpu)
fi

echo "== 1. CUDA equivalence suite"
out=$("$TEST_CUDA" 2>&1); rc=$?
echo "$out" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |max rel error|Failure|got " | head -120
[ $rc -eq 0 ] || fail "test_cuda exited with $rc"
if echo "$out" | grep -q "no CUDA device: skipped"; then fail "test_cuda skipped: no CUDA device visible"; fi

echo "== 2. paged vs contiguous attention (streaming shape)"
out=$(timeout 300 "${GPU_BENCH[@]}" attention 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "benchmark exited with $rc"
ratio=$(echo "$out" | sed -n 's/.*contiguous_over_paged_time=\([0-9.]*\).*/\1/p')
if [ -z "$ratio" ]; then fail "no benchmark result"; 
elif awk -v r="$ratio" 'BEGIN { exit !(r >= 0.9) }'; then echo "CHECK OK: contiguous/paged time $ratio >= 0.9";
else fail "contiguous/paged time $ratio < 0.9"; fi

echo "== 3. ${LINGBOT_MEMORY_FRAMES:-10000}-frame device memory run"
out=$(timeout 400 "${GPU_BENCH[@]}" memory --frames "${LINGBOT_MEMORY_FRAMES:-10000}" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "memory run exited with $rc"
echo "$out" | grep -q "patch_bytes_flat=yes" && echo "CHECK OK: patch memory flat" || fail "patch memory not flat"

echo "== 4. bench kv --device cuda (518x378, bf16, 24 blocks, 400 frames, attention sampled every 20 frames)"
if [ -z "$CLI" ]; then
  echo "skipped: the bundle has no CLI (it links FFmpeg and more; build on a machine with scripts/setup.sh's packages)"
else
  timeout 300 "$CLI" bench kv --device cuda --resolution 518 --frames 400 --attend-every 20 \
    --csv "$BUILD-bench-kv-cuda.csv" 2>&1 | grep -v "^progress"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || fail "bench kv --device cuda exited with $rc"
fi

echo "== total $(( $(date +%s) - start )) s; status $status"
exit $status
