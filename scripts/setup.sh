#!/usr/bin/env bash
# Installs every dependency (Debian 12, apt-get, idempotent), configures and builds the release
# build in build/, then runs the main job: a demo reconstruction into demo-out/.
# Usage: scripts/setup.sh [--no-run]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config git
  libopenblas-dev           # BLAS (CBLAS) for GEMM
  libdnnl-dev               # oneDNN: bf16 GEMM for reduced-precision weights
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
  libpng-dev libstb-dev     # images
  libjpeg62-turbo-dev       # JPEG decoding as PIL does it (libjpeg-turbo)
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev  # video input
  libavdevice-dev           # live input from devices (V4L2 cameras)
  libcpp-httplib-dev        # tests: a local HTTP stream for the live input
  libboost-context-dev      # tests: the emulated CUDA threads are Boost.Context fibers (tests/cuda_emulated)
  gnuplot-nox               # benchmark plots
  clang-14 libclang-rt-14-dev libomp-14-dev  # libFuzzer targets (scripts/fuzz.sh, -DLINGBOT_FUZZ=ON)
  libtinygltf-dev           # scene.glb export (glTF 2.0)
  colmap                    # tests: COLMAP reads the colmap/ export
  python3-numpy python3-open3d  # tests: numpy loads the NPZ exports, Open3D reads points.ply
  nodejs                    # tests: the Khronos glTF validator (web/node_modules, npm ci below)
  libcpp-httplib-dev        # the viewer's HTTP server (view, run --serve)
  chromium                  # tests: the headless browser of the viewer tests (driven by playwright-core)
  python3-dev pybind11-dev    # the lingbot_map Python module (build/python)
  python3-pytest            # its tests (tests/python)
  python3-pil               # tests: Pillow, upstream's image reader and resizer, checks ours bit for bit
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian ships npm apart from nodejs; NodeSource's nodejs package contains it.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# three.js (built into the viewer page) and the JS tools of the test suite (glTF validator, playwright-core),
# pinned by web/package-lock.json; before the build, which embeds three.js.
if [ ! -f web/node_modules/.package-lock.json ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
  (cd web && npm ci --no-audit --no-fund)
fi

JOBS=$(nproc)
# A unity build (CMake bundles each target's .cpp files, 8 at a time, into one translation unit):
# the headers every file includes are parsed once per bundle, which makes a full build several times
# faster. For edit-compile cycles on one file, configure a separate build folder without it.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON
cmake --build build -j"$JOBS"

if [ "${1:-}" != "--no-run" ]; then
  ./build/lingbot-map run --demo --out demo-out
fi
