#!/usr/bin/env bash
# Ours vs upstream's PyTorch on the CPU, same settings, one after the other in the same session.
# See bench/upstream/README.md. Prints `ratio ...` lines and one `compare: ...` line per dtype.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

upstream=""
lingbot="$root/build/lingbot-map"
python=/usr/bin/python3
resolution=224
frames=3
scale=2
window=64
threads=1
dtypes=f32
seed=1
out=""
upstream_summaries=()

usage() {
  cat <<EOF
usage: $0 --upstream DIR [options]
  --upstream DIR            upstream checkout (holds lingbot_map/); not needed when every dtype has --upstream-summary
  --lingbot BIN             our CLI (default: $lingbot)
  --python PY               Python with torch for upstream (default: $python, Debian python3-torch)
  --resolution 224|518      (default $resolution)
  --frames F                frames pushed in total, > scale frames (default $frames)
  --scale-frames S          (default $scale)
  --kv-window W             (default $window)
  --threads T               (default $threads)
  --dtypes LIST             comma-separated f32,bf16 (default $dtypes): ours --weights-dtype D --kv-dtype D,
                            upstream --dtype D
  --seed N                  (default $seed)
  --upstream-summary FILE   reuse an earlier upstream run (a file with its summary: line, e.g. a saved
                            upstream_<dtype>.log) for the dtype named in it; repeatable
  --out DIR                 logs, CSVs and summaries (default: a new directory under /tmp)
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --upstream) upstream=$2; shift 2 ;;
    --lingbot) lingbot=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --resolution) resolution=$2; shift 2 ;;
    --frames) frames=$2; shift 2 ;;
    --scale-frames) scale=$2; shift 2 ;;
    --kv-window) window=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --upstream-summary) upstream_summaries+=("$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

case "$resolution" in 224|518) ;; *) echo "error: --resolution must be 224 or 518" >&2; exit 2 ;; esac
[[ -x "$lingbot" ]] || { echo "error: $lingbot not found (build it, or pass --lingbot BIN)" >&2; exit 2; }
for f in "${upstream_summaries[@]+"${upstream_summaries[@]}"}"; do
  grep -q '^summary:.* impl=upstream ' "$f" 2>/dev/null ||
    { echo "error: --upstream-summary $f: no upstream_bench.py summary: line in it" >&2; exit 2; }
done
[[ -n "$out" ]] || out=$(mktemp -d /tmp/upstream-compare.XXXXXX)
mkdir -p "$out"

# The saved upstream summary for dtype $1, if one was given.
saved_summary() {
  local f
  for f in "${upstream_summaries[@]+"${upstream_summaries[@]}"}"; do
    if grep '^summary:' "$f" | tail -n1 | grep -q " dtype=$1 "; then echo "$f"; return 0; fi
  done
  return 1
}

echo "compare: resolution=$resolution frames=$frames scale_frames=$scale kv_window=$window threads=$threads dtypes=$dtypes out=$out"
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
IFS=',' read -r -a dtype_list <<<"$dtypes"
for d in "${dtype_list[@]}"; do
  case "$d" in f32|bf16) ;; *) echo "error: dtype $d (f32 or bf16)" >&2; exit 2 ;; esac
  echo "== $d: ours"
  ours_log="$out/ours_$d.log"
  ours_csv="$out/ours_$d.csv"
  cmd=("$lingbot" bench model --resolution "$resolution" --frames "$frames" --scale-frames "$scale"
       --kv-window "$window" --threads "$threads" --weights-dtype "$d" --kv-dtype "$d"
       --calibrate off --writers off --seed "$seed" --csv "$ours_csv")
  echo "+ ${cmd[*]}"
  if ! "${cmd[@]}" >"$ours_log" 2>&1; then
    tail -n 20 "$ours_log"; echo "error: our bench failed (log: $ours_log)" >&2; exit 1
  fi
  grep '^summary:' "$ours_log" | tail -n1

  reused=()
  if up_summary=$(saved_summary "$d"); then
    echo "== $d: upstream: reusing $up_summary (not side by side: compare: side_by_side=no)"
    reused=(--upstream-reused)
  else
    [[ -n "$upstream" ]] || { echo "error: --upstream DIR needed for dtype $d (no --upstream-summary for it)" >&2; exit 2; }
    echo "== $d: upstream"
    up_summary="$out/upstream_$d.log"
    cmd=("$python" "$here/upstream_bench.py" --upstream "$upstream" --resolution "$resolution" --frames "$frames"
         --scale-frames "$scale" --kv-window "$window" --threads "$threads" --dtype "$d" --seed "$seed")
    echo "+ ${cmd[*]}"
    if ! "${cmd[@]}" >"$up_summary" 2>&1; then
      tail -n 20 "$up_summary"; echo "error: upstream bench failed (log: $up_summary)" >&2; exit 1
    fi
    grep -E '^(stub|manifest|dtype|calibration):' "$up_summary" || true
    grep '^summary:' "$up_summary" | tail -n1
  fi

  "$python" "$here/ratios.py" --dtype "$d" --ours-log "$ours_log" --ours-csv "$ours_csv" \
    --upstream-summary "$up_summary" --resolution "$resolution" --frames "$frames" \
    --scale-frames "$scale" --kv-window "$window" --threads "$threads" "${reused[@]}" || status=1
done
echo "logs: $out"
exit $status
