#!/usr/bin/env bash
# Runs the whole test suite: installs dependencies and builds (scripts/setup.sh --no-run), runs
# CTest and the Python module's pytest suite (tests/python) on the release build, then builds and
# runs the same CTest tests under AddressSanitizer+UBSan (build-asan/, clang-14; the Python module is not built
# there: an ASan extension cannot be loaded by an uninstrumented python3), then the libFuzzer targets
# for a fixed number of runs (build-fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)

scripts/setup.sh --no-run
# Every tool and codec setup.sh installs is required here: a test that would skip without one fails
# instead (tests/test_tools.h), and the viewer's browser tests must be registered (CMake registers them
# only where node, chromium and web/node_modules exist). A green run must not hide a missing install step.
export LINGBOT_REQUIRE_TEST_TOOLS=1
if [ "$(ctest --test-dir build -N -R '^ViewerBrowser\.' | sed -n 's/^Total Tests: //p')" -lt 2 ]; then
  echo "error: the viewer's browser tests are not registered in build/ (node, chromium or web/node_modules" \
       "missing: scripts/setup.sh installs them)" >&2
  exit 1
fi
echo "== tests (release build) ($(date +%T)) =="
ctest --test-dir build --output-on-failure -j"$JOBS"

# The Python module's tests, with Debian's interpreter and pytest (the module is built for it).
# pytest exits non-zero when it collects no test (5) or a test file fails to import, so a missing
# module or an empty suite fails this script rather than passing.
echo "== Python tests (lingbot_map module, /usr/bin/python3 -m pytest) ($(date +%T)) =="
OMP_NUM_THREADS=2 PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -p no:cacheprovider -q tests/python

# The sanitizer build uses clang (clang-14, as the fuzz targets do): it compiles this suite under
# ASan+UBSan about a third faster than GCC, the bulk of this step on a 2-core CI machine, and checks
# that the code builds warning-free with a second compiler. -O1 -g1 (line tables: sanitizer reports
# keep file:line) compiles about twice as fast as -O2 -g; the tests run somewhat slower.
# A unity build, as the release build (scripts/setup.sh) and the CUDA step below (scripts/gpu_check.sh
# builds without bundles: each file on its own, on the GPU machine).
# tests/lsan_suppressions.txt: LLVM's OpenMP runtime keeps its worker threads' bookkeeping to the end.
echo "== tests (AddressSanitizer + UndefinedBehaviorSanitizer build, clang) ($(date +%T)) =="
cmake -S . -B build-asan -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DLINGBOT_SANITIZE=ON -DLINGBOT_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON
cmake --build build-asan -j"$JOBS"
# Left to the release run above: tests that run none of our instrumented code (the header compile
# checks, the grep-based layering rules, the upstream-harness self-test in python), and the static
# viewer page in Chromium (its tests and the page's point budget), whose instrumented part (a demo run's viewer export, then `view`) the
# ExportViewer.* and View.* tests run here; the live viewer test stays (it drives the server during a run).
# Also left to the release run: the install-and-consume package test (it configures and builds a
# consumer of the installed library, 26 s under the sanitizers, none of it our instrumented code), and
# the CUDA session's device-memory and phase-time accounting on the
# emulated device (Emulated.CudaSession.DevicePeakBytes*, PhasesHave*), whose code paths
# Emulated.CudaSession.TinyModelMatchesTheCpuOnEveryOutput runs here, and the special-stream bound's
# sweep over windowed-tiny's 26 frames (AccuracySpecialBound.WindowedTinyFramesStreamed, 29 s here: a
# measurement; AccuracySpecialBound.TinyAgainstReference runs the same bound code on both backends).
# And two more for the 30-minute budget: the live viewer in Chromium (ViewerBrowser.Live, 31 s under
# the sanitizers; View.ServeFollowsTheRunAndReportsItsEnd drives the same server during a run here),
# and the emulated tensor-core cache comparison (Emulated.CudaPagedKVCache.TensorCorePathMatchesCpuPagedCache,
# 25 s; the tensor-core attention kernel's indexing runs here in Emulated.CudaAttention.*, e.g.
# RandomPagedProblemsMatchCpuAllDtypes and SplitKeysMatchTheCpuAndTheUnsplitKernel).
# And, since the CUDA step below also builds the Python module (38 s): three tests of
# option-parsing error lines that start dozens of CLI processes and run no frame (BenchKv.InvalidValues...,
# RunReliability.UsageErrorsExit2..., RunErrors.VerifyAndBenchModelTakeTheSameDevice: 10-11 s each here;
# the same parser runs under the sanitizers in every other CLI test), and the windowed scale-phase
# equivalence (WindowedTest.ScalePhasePredictionsMatchTheStepsRun, 16 s: a numerical comparison; the
# windowed session's code runs here in the other WindowedTest.* and RunModes.* tests).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions="$PWD/tests/lsan_suppressions.txt" \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" \
    -E '^(PublicHeader\.|Layering\.|UpstreamCompare\.SelfTest$|Package\.InstallAndConsume$|ViewerBrowser\.(Static|Budget|Live)$|Emulated\.CudaSession\.(DevicePeakBytesCoverTheKvCache|PhasesHaveDeviceTimeOnTheDeviceOnly)$|Emulated\.CudaPagedKVCache\.TensorCorePathMatchesCpuPagedCache$|AccuracySpecialBound\.WindowedTinyFramesStreamed$|BenchKv\.InvalidValuesGiveOneErrorLine$|RunReliability\.UsageErrorsExit2WithOneErrorLineAndAHelpHint$|RunErrors\.VerifyAndBenchModelTakeTheSameDevice$|WindowedTest\.ScalePhasePredictionsMatchTheStepsRun$)'

# libFuzzer targets (clang 14, ASan+UBSan): every parser runs a fixed number of inputs from its
# committed seed corpus and the mutations libFuzzer derives from it; any crash, sanitizer report,
# leak or timeout fails the suite. Longer campaigns: scripts/fuzz.sh SECONDS (figures in docs/fuzzing.md).
echo "== fuzz targets (fixed number of runs) ($(date +%T)) =="
# fuzz_video decodes a whole video per input (~15 ms under the sanitizers, 150 s for 10,000 on
# the 2-core CI machine): it gets 3,000 inputs so the suite stays well inside CI's 30 minutes.
scripts/fuzz.sh --runs 10000 --runs-of fuzz_video 3000

# CUDA configuration, only where nvcc exists: compiles and links the CLI and the CUDA tests with
# -DLINGBOT_CUDA=ON (every library layer is built for them; the CPU test executables were already
# built and run above) and runs the CUDA tests (they skip with a visible "no CUDA device" message on
# machines without a GPU). -j2 keeps nvcc's memory use modest. Host code is compiled at -O0: this step
# checks that everything compiles and links (the release build above checks the optimised CPU code;
# scripts/gpu_bundle.sh builds the optimised GPU binaries), and -O0 compiles the host code fastest.
# A unity build, as the others: 2.4 min instead of 5.2 (host files on their own) on 2 cores.
# One GPU architecture (sm_80): the kernels have no code that differs between sm_80 and sm_90 (ptx.cuh
# tests __CUDA_ARCH__ >= 800 only), and each architecture doubles nvcc's device compile; the default
# build and the bundle compile both.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== CUDA build (compile + link; CUDA tests run or skip visibly) ($(date +%T)) =="
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_CUDA_FLAGS_DEBUG=-O0 \
    -DLINGBOT_CUDA=ON -DLINGBOT_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=80 -DCMAKE_UNITY_BUILD=ON
  cmake --build build-cuda -j2 --target lingbot-map lingbot-gpu-check test_cuda _lingbot_map
  ctest --test-dir build-cuda --output-on-failure -j"$JOBS" -R '^Cuda'
else
  echo "== CUDA build skipped: nvcc not found =="
fi
echo "== done ($(date +%T)) =="
