#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser with libFuzzer (clang 14, ASan + UBSan).
#
#   scripts/fuzz.sh SECONDS [TARGET...]   fuzz each target for SECONDS (default: all targets)
#   scripts/fuzz.sh --runs N [--runs-of TARGET M]... [TARGET...]
#                                         run each target for N inputs (TARGET: M), seed 1 (CI: scripts/test.sh)
#
# Builds build-fuzz/ (-DLINGBOT_FUZZ=ON) first. Each target starts from its committed seeds
# (fuzz/corpus/<target>/, never modified) plus the corpus it grew before (build-fuzz/corpus/<target>/).
# A crash, sanitizer report, leak, timeout (> 10 s per input) or out-of-memory (> 2 GiB) stops the
# target, leaves the input in build-fuzz/crashes/<target>/ and makes the script exit 1. The last
# lines print per target: executions, coverage (edges), features, corpus size, wall and CPU seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(fuzz_pickle fuzz_zip fuzz_torch fuzz_safetensors fuzz_image fuzz_video fuzz_golden_case)
RUNS=""
SECONDS_PER_TARGET=""
declare -A RUNS_OF=()
if [ "${1:-}" = "--runs" ]; then
  RUNS="${2:?--runs needs a number}"
  shift 2
  while [ "${1:-}" = "--runs-of" ]; do
    target="${2:?--runs-of needs a target}" count="${3:?--runs-of needs a number}"
    [[ " ${ALL_TARGETS[*]} " == *" $target "* ]] || { echo "fuzz.sh: --runs-of: unknown target '$target'" >&2; exit 2; }
    [[ "$count" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --runs-of $target: '$count' is not a number" >&2; exit 2; }
    RUNS_OF["$target"]="$count"
    shift 3
  done
else
  SECONDS_PER_TARGET="${1:?usage: scripts/fuzz.sh SECONDS|--runs N [TARGET...]}"
  shift
fi
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")

BUILD=build-fuzz
LAUNCHER=()
command -v ccache >/dev/null 2>&1 && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# -O1, as libFuzzer's documentation builds its targets (and as the sanitizer build of scripts/test.sh):
# it compiles faster than -O2 -g (the sanitizer build, measured: about twice as fast). A unity build
# (as the release and sanitizer builds): 1.7 min instead of 3.0 on 2 cores.
cmake -S . -B "$BUILD" -DCMAKE_UNITY_BUILD=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DLINGBOT_FUZZ=ON -DLINGBOT_BUILD_TESTS=OFF -DLINGBOT_BUILD_BENCH=OFF "${LAUNCHER[@]}" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]}"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
report=()
for t in "${TARGETS[@]}"; do
  seeds="fuzz/corpus/$t"
  work="$BUILD/corpus/$t"
  crashes="$BUILD/crashes/$t"
  mkdir -p "$work" "$crashes"
  limit=(-max_total_time="$SECONDS_PER_TARGET")
  # --runs (CI) uses a fixed seed, so a CI run is reproducible; timed campaigns explore with fresh ones.
  runs="${RUNS_OF[$t]:-$RUNS}"
  [ -n "$RUNS" ] && limit=(-runs="$runs" -seed=1)
  log="$BUILD/$t.log"
  echo "== $t (${RUNS:+$runs runs}${SECONDS_PER_TARGET:+$SECONDS_PER_TARGET s})"
  start=$(date +%s.%N)
  TIMEFORMAT='%U %S'  # CPU seconds of the target (user, system), for the report
  if ! { time "$BUILD/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$crashes/" "$work" "$seeds" >"$log" 2>&1; } 2>"$BUILD/$t.cpu"; then
    echo "FINDING in $t: see $log and $crashes/"
    tail -40 "$log"
    status=1
  fi
  end=$(date +%s.%N)
  cpu=$(awk '{ printf "%.0f", $1 + $2 }' "$BUILD/$t.cpu")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  line=$(grep -E '^#[0-9]+.*cov:' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$line")
  report+=("$(printf '%-18s %12s execs  cov %6s  ft %6s  corpus %5s  %6.0f s wall  %6s s CPU' "$t" "${execs:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "${cpu:-?}")")
done
echo "== fuzz summary"
printf '%s\n' "${report[@]}"
exit $status
