#!/usr/bin/env bash
# Checks of the upstream comparison that need neither upstream nor torch: the scripts compile, and
# compare.sh, given a stand-in for our CLI and a saved upstream summary, prints the right ratios.
# Usage: selftest.sh [PYTHON]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

bash -n "$here/compare.sh" || fail "compare.sh syntax"
# compile() only: py_compile would write __pycache__ into the source tree
"$py" -c 'import sys
for f in sys.argv[1:]: compile(open(f).read(), f, "exec")' "$here/upstream_bench.py" "$here/ratios.py" || fail "compile"
"$py" "$here/upstream_bench.py" --help >/dev/null || fail "upstream_bench.py --help"

# Where this Python has torch: the scaled_dot_product_attention stub (whole and in query-row chunks)
# against explicit softmax(QK^T/sqrt(d) + mask)V; bool and float masks, is_causal.
if "$py" -c 'import torch' 2>/dev/null; then
  PYTHONDONTWRITEBYTECODE=1 "$py" - "$here" <<'PYEOF' || fail "scaled_dot_product_attention stub"
import sys
sys.path.insert(0, sys.argv[1])
import torch
import upstream_bench as ub
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 3, n, d, generator=g) for n, d in ((50, 16), (70, 16), (70, 8)))
bmask = torch.rand(2, 1, 50, 70, generator=g) > 0.3
bmask[..., 0] = True
fmask = torch.randn(1, 1, 50, 70, generator=g)
def ref(q, k, v, mask=None, causal=False):
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(), float("-inf"))
    return s.softmax(-1) @ v
for chunk in (ub.SDPA_CHUNK_SCORES, 7 * 70 * 6):  # the second: 7 query rows per chunk
    ub.SDPA_CHUNK_SCORES = chunk
    for got, want in ((ub._sdpa_math(q, k, v), ref(q, k, v)),
                      (ub._sdpa_math(q, k, v, attn_mask=bmask), ref(q, k, v, bmask)),
                      (ub._sdpa_math(q, k, v, attn_mask=fmask), ref(q, k, v, fmask)),
                      (ub._sdpa_math(q, k[..., :50, :], v[..., :50, :], is_causal=True),
                       ref(q, k[..., :50, :], v[..., :50, :], causal=True))):
        err = (got - want).abs().max().item()
        assert err < 1e-5, (chunk, err)
print("sdpa stub: matches explicit attention")
PYEOF
else
  echo "sdpa stub check skipped: $py has no torch"
fi

# A stand-in for `lingbot-map bench model`: fixed numbers, the summary keys and CSV columns of the real one.
cat >"$work/fake-lingbot" <<'EOF'
#!/usr/bin/env bash
csv="" d="" threads="" frames=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --csv) csv=$2; shift 2 ;; --weights-dtype) d=$2; shift 2 ;; --threads) threads=$2; shift 2 ;;
    --frames) frames=$2; shift 2 ;; *) shift ;;
  esac
done
k="w${d}_kv${d}"
{
  echo "config,weights_dtype,kv_dtype,push,results,wall_ms,cpu_ms,encoder_ms,frame_blocks_ms,global_blocks_ms,camera_ms,dpt_ms,writers_ms,rss_bytes,peak_rss_bytes,device_peak_bytes"
  echo "$k,$d,$d,1,0,1,1,0,0,0,0,0,0,1,1,"
  echo "$k,$d,$d,2,2,9000,9000,900,900,900,900,900,0,1,1,"
  echo "$k,$d,$d,3,1,1100,1000,200,300,400,50,50,0,1,1,"
  echo "$k,$d,$d,4,1,1100,1000,400,100,200,150,150,0,1,1,"
} >"$csv"
echo "summary: model=full size=224x224 frames=$frames threads=$threads device=cpu load_avg_start=0.1/0.1/0.1 load_avg_end=0.2/0.2/0.2 ${k}_frame_cpu_ms=1000 ${k}_frame_wall_ms=1100 ${k}_peak_rss_gib=2.50"
EOF
chmod +x "$work/fake-lingbot"
echo "summary: impl=upstream torch=1.13.1 dtype=f32 resolution=224 size=224x224 frames=4 scale_frames=2 kv_window=64 threads=1 seed=1 load_avg_start=0.1/0.1/0.1 load_avg_end=0.1/0.1/0.1 upstream_frame_cpu_ms=4000 upstream_frame_wall_ms=4400 upstream_encoder_cpu_ms=1200 upstream_frame_blocks_cpu_ms=800 upstream_global_blocks_cpu_ms=1200 upstream_camera_cpu_ms=400 upstream_dpt_cpu_ms=400 upstream_other_cpu_ms=0 peak_rss_gib=5.00" >"$work/up_f32.log"

out=$("$here/compare.sh" --lingbot "$work/fake-lingbot" --python "$py" --upstream-summary "$work/up_f32.log" \
  --resolution 224 --frames 4 --scale-frames 2 --threads 1 --dtypes f32 --out "$work/out") || fail "compare.sh exit status"
echo "$out"
expect() { grep -qF -- "$1" <<<"$out" || fail "missing: $1"; }
expect "reusing $work/up_f32.log"
expect "ours 1000 ms / upstream 4000 ms = 0.250"           # frame CPU
expect "ours 1100 ms / upstream 4400 ms = 0.250"           # frame wall
expect "encoder_cpu:       ours 300 ms / upstream 1200 ms = 0.250"  # mean of pushes 3 and 4 only
expect "global_blocks_cpu: ours 300 ms / upstream 1200 ms = 0.250"
expect "dpt_cpu:           ours 100 ms / upstream 400 ms = 0.250"
expect "ours 2.50 GiB / upstream 5.00 GiB = 0.500"          # peak RSS
expect "ratio_frame_cpu=0.250"
expect "compare: side_by_side=no "  # upstream's side was reused from another run
grep -q "^warning" <<<"$out" && fail "unexpected warning"

# A saved summary made with other settings gives no ratios: exit 1, naming what differs.
if out=$("$here/compare.sh" --lingbot "$work/fake-lingbot" --python "$py" --upstream-summary "$work/up_f32.log" \
  --resolution 224 --frames 4 --scale-frames 2 --threads 2 --dtypes f32 --out "$work/out2" 2>&1); then
  fail "compare.sh compared a threads-1 upstream summary with a threads-2 run"
fi
expect "differs from this comparison in threads (threads=1): no ratios"
grep -q "^ratio " <<<"$out" && fail "ratio lines of mismatched runs"

# No summary for bf16 and no --upstream: refused.
if "$here/compare.sh" --lingbot "$work/fake-lingbot" --python "$py" --upstream-summary "$work/up_f32.log" \
     --dtypes bf16 --out "$work/out3" >/dev/null 2>&1; then
  fail "compare.sh ran bf16 without --upstream or a bf16 summary"
fi
echo "selftest: PASS"
