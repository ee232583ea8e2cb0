#!/usr/bin/env bash
# Runs the whole test suite: installs dependencies and builds (scripts/setup.sh --no-run), runs
# CTest on the release build, then builds and runs the same tests under AddressSanitizer+UBSan
# (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)

scripts/setup.sh --no-run
echo "== tests (release build) =="
ctest --test-dir build --output-on-failure -j"$JOBS"

echo "== tests (AddressSanitizer + UndefinedBehaviorSanitizer build) =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINGBOT_SANITIZE=ON -DLINGBOT_BUILD_BENCH=OFF
cmake --build build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS"
