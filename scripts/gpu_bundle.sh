#!/usr/bin/env bash
# Builds, on THIS machine (nvcc + the packages of scripts/setup.sh), a self-contained copy of the
# CUDA test binary and the GPU measurements for a GPU machine that has the CUDA toolkit but none of
# our other dependencies and no package registry (the device machines lent to sessions):
#   gpu-bundle/test_cuda      built for sm_80 + sm_90 (A100, H100/H200)
#   gpu-bundle/lingbot-gpu-bench  `lingbot-map bench gpu` without the CLI's dependencies
#   gpu-bundle/lib/           the shared libraries it needs beyond glibc, libstdc++ and CUDA's own
#                             (OpenBLAS, libgfortran, libquadmath, libgomp, libjpeg)
#   gpu-bundle/MANIFEST       git revision, date, nvcc version, ldd output
# About 46 MB; `gpu-bundle/` is git-ignored. Then, on the GPU machine (carry gpu-bundle):
#   bash scripts/gpu_check.sh --bundle gpu-bundle
# Env: JOBS (default nproc), CUDA_ARCH (default "80;90").
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=build-gpu-bundle
OUT=gpu-bundle
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLINGBOT_CUDA=ON -DLINGBOT_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-80;90}" >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target test_cuda lingbot-gpu-bench
rm -rf "$OUT"
mkdir -p "$OUT/lib"
cp "$BUILD/tests/test_cuda" "$BUILD/lingbot-gpu-bench" "$OUT/"
# Everything ldd resolves except the C library family, the C++ runtime and CUDA's libraries (the GPU
# machine's toolkit and driver provide those, matched to its driver).
ldd "$OUT/test_cuda" "$OUT/lingbot-gpu-bench" | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda*|libcublas*) ;;
    *) cp -L "$path" "$OUT/lib/$name" ;;
  esac
done
{
  echo "git: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo -dirty)"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), CUDA archs ${CUDA_ARCH:-80;90}"
  /usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 || true
  ldd "$OUT/test_cuda" "$OUT/lingbot-gpu-bench"
} >"$OUT/MANIFEST"
du -sh "$OUT"
ls -la "$OUT" "$OUT/lib"
