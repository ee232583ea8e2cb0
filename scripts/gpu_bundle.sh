#!/usr/bin/env bash
# Builds, on THIS machine (nvcc + the packages of scripts/setup.sh), one compressed file with
# everything scripts/gpu_check.sh runs, for a GPU machine that has the CUDA toolkit (nvcc 13,
# cudart, cuBLAS) but none of our other dependencies and no package registry (the device machines
# lent to sessions):
#   gpu-bundle.tar.xz, unpacking to gpu-bundle/:
#     test_cuda           the CUDA equivalence suite, built for sm_80 + sm_90 (A100, H100/H200)
#     lingbot-gpu-check   the CLI with only its version, verify and bench subcommands (verify
#                         --device cuda, bench model / kv / gpu --device cuda), linked --as-needed:
#                         without FFmpeg, cpp-httplib, tinygltf (CMakeLists.txt)
#     lib/                the shared libraries they need beyond glibc, the C++ runtime and CUDA's own
#                         (OpenBLAS, oneDNN, libgfortran, libquadmath, libgomp, libpng, libjpeg, zlib,
#                         tinygltf, the OpenCL ICD loader oneDNN links)
#     lib/compat/         this machine's libstdc++ and libgcc_s, put on the library path by
#                         gpu_check.sh only when the GPU machine's own are older than the binaries need
#     MANIFEST            git revision, date, nvcc version, sizes, ldd output
# About 27 MB compressed (about 110 MB unpacked); both `gpu-bundle/` and `gpu-bundle.tar.xz` are
# git-ignored. Then, on the GPU machine (carry gpu-bundle.tar.xz; it is unpacked under build-gpu-check/):
#   bash scripts/gpu_check.sh --bundle gpu-bundle.tar.xz
# Env: JOBS (default nproc), CUDA_ARCH (default "80;90"), BUILD (default build-gpu-bundle: an
# existing CUDA build folder can be reused, e.g. BUILD=build-cuda, as long as it is a Release build
# for those architectures).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=${BUILD:-build-gpu-bundle}
OUT=gpu-bundle
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLINGBOT_CUDA=ON -DLINGBOT_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-80;90}" >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target test_cuda lingbot-gpu-check
rm -rf "$OUT" "$OUT.tar.xz"
mkdir -p "$OUT/lib/compat"
cp "$BUILD/tests/test_cuda" "$BUILD/lingbot-gpu-check" "$OUT/"
strip --strip-unneeded "$OUT/test_cuda" "$OUT/lingbot-gpu-check"
BINS=("$OUT/test_cuda" "$OUT/lingbot-gpu-check")
# Everything ldd resolves except the C library family and CUDA's libraries (the GPU machine's
# toolkit and driver provide those, matched to its driver); the C++ runtime goes to lib/compat.
ldd "${BINS[@]}" | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
  case "$name" in
    # glibc's own libraries (libmvec, libresolv, ... read glibc-private data: only the machine's
    # glibc's copies work) and CUDA's.
    libc.so*|libm.so*|libmvec.so*|libdl.so*|librt.so*|libpthread.so*|libresolv.so*|libutil.so*|libanl.so*|\
    libnsl.so*|libnss_*|libBrokenLocale*|libthread_db*|ld-linux*|libcuda*|libcublas*) ;;
    libstdc++.so*|libgcc_s.so*) cp -L "$path" "$OUT/lib/compat/$name" ;;
    *) cp -L "$path" "$OUT/lib/$name" ;;
  esac
done
# The binaries must resolve with nothing but the bundle, glibc and CUDA on the library path.
cuda_lib=$(dirname "$(ldd "$OUT/lingbot-gpu-check" | awk '/libcudart/{print $3}')")
missing=$(env -i LD_LIBRARY_PATH="$PWD/$OUT/lib:$cuda_lib" /usr/bin/ldd "${BINS[@]}" | grep "not found" || true)
[ -z "$missing" ] || { echo "$missing"; echo "gpu_bundle.sh: the bundle is incomplete"; exit 1; }
{
  echo "git: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo -dirty)"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), CUDA archs ${CUDA_ARCH:-80;90}, $(ldd --version | head -1)"
  /usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 || true
  echo "unpacked: $(du -sb "$OUT" | cut -f1) bytes"
  ldd "${BINS[@]}"
} >"$OUT/MANIFEST"
XZ_OPT="-6 -T${JOBS}" tar -cJf "$OUT.tar.xz" "$OUT"
echo "gpu_bundle.sh: $OUT.tar.xz $(stat -c %s "$OUT.tar.xz") bytes ($(du -sh "$OUT" | cut -f1) unpacked in $OUT/)"
