#!/usr/bin/env bash
# Layering rules of DESIGN.md §3 that a grep can check, so they cannot regress:
#   1. no file in src/kernels/ includes a src/kvcache/ header (kernels know only views and page tables);
#   2. no file in src/kvcache/ includes a CPU compute kernel (src/kernels/cpu/) or calls an attention
#      kernel (paged_attention / dense_attention / attention): the cache stores K/V and hands out
#      views, its caller runs the kernel;
#   3. no file in src/model/ touches page ids or the paged cache's internals (page_ids, PageTableView,
#      PagePlan, PagedKVCache, kvcache/paged_kv_cache.h): the model passes the cache's views through;
#   4. no file in src/ includes a bench/ or tools/ header: measurement and harness code (calibration,
#      verify and its golden-case reader, GPU timings) lives beside the tools, outside the core libraries;
#   5. no file in src/model/ includes a backend's kernels (src/kernels/cpu/, src/kernels/cuda/, a
#      compute/<backend>/ header) or names the cuda namespace: the model runs every op through the
#      compute interface (src/compute/backend.h), so it has no per-backend branch.
# Comments are ignored (they may name the kernels the views are meant for).
# usage: check_layering.sh ROOT     prints each violation as FILE:LINE: rule: text; exit 1 if any
#        check_layering.sh --self-test   plants one violation of each rule in a scratch tree and
#                                        checks that each is reported (and a clean tree passes)
set -uo pipefail

# Lines of code (// and /* */ comments removed) of the C++/CUDA files under DIR matching ERE PATTERN.
code_matches() {
  local dir=$1 pattern=$2
  [ -d "$dir" ] || return 0
  find "$dir" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z |
    while IFS= read -r -d '' f; do
      sed -e 's://.*$::' "$f" | awk -v f="$f" -v pat="$pattern" '
        { line = $0
          while (1) {                       # strip /* ... */ (also across lines)
            if (in_c) { e = index(line, "*/"); if (!e) { line = ""; break } line = substr(line, e + 2); in_c = 0 }
            s = index(line, "/*"); if (!s) break
            rest = substr(line, s + 2); e = index(rest, "*/")
            if (e) line = substr(line, 1, s - 1) substr(rest, e + 2); else { line = substr(line, 1, s - 1); in_c = 1; break }
          }
          if (line ~ pat) print f ":" NR ": " $0 }'
    done
}

check() {
  local root=$1 found=0 out
  out=$(code_matches "$root/src/kernels" '#[ \t]*include[ \t]*"kvcache/')
  [ -n "$out" ] && { echo "$out" | sed 's/^/rule 1 (kernels include the cache): /'; found=1; }
  out=$(code_matches "$root/src/kvcache" '#[ \t]*include[ \t]*"kernels/cpu/')
  [ -n "$out" ] && { echo "$out" | sed 's/^/rule 2 (the cache includes a CPU kernel): /'; found=1; }
  out=$(code_matches "$root/src/kvcache" '(^|[^A-Za-z0-9_])(paged_|dense_)?attention[ \t]*\(')
  [ -n "$out" ] && { echo "$out" | sed 's/^/rule 2 (the cache calls an attention kernel): /'; found=1; }
  out=$(code_matches "$root/src/model" '(page_ids|PageTableView|PagePlan|PagedKVCache|kvcache/paged_kv_cache\.h)')
  [ -n "$out" ] && { echo "$out" | sed 's/^/rule 3 (the model touches page ids): /'; found=1; }
  out=$(code_matches "$root/src" '#[ \t]*include[ \t]*"(bench|tools)/')
  [ -n "$out" ] && { echo "$out" | sed 's/^/rule 4 (a library includes harness code): /'; found=1; }
  out=$(code_matches "$root/src/model" '(#[ \t]*include[ \t]*"(kernels/(cpu|cuda)|compute/[a-z_]+)/|(^|[^A-Za-z0-9_])cuda::|LINGBOT_HAVE_CUDA)')
  [ -n "$out" ] && { echo "$out" | sed 's/^/rule 5 (the model bypasses the compute interface): /'; found=1; }
  return $found
}

if [ "${1:-}" = "--self-test" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/src/kernels/cpu" "$tmp/src/kvcache/cuda" "$tmp/src/model"
  cat > "$tmp/src/kvcache/ok.cpp" <<'CPP'
// The caller runs paged_attention(q, keys) on what store() returns.
/* dense_attention(q, spans) is not called here either */
#include "kernels/attention_views.h"
int attentions = 0;  // a name that merely contains the word: attention_count(x) is not a call
CPP
  check "$tmp" > "$tmp/clean.txt" || { echo "self-test: a clean tree was reported:"; cat "$tmp/clean.txt"; exit 1; }
  echo '#include "kvcache/kv_cache.h"' > "$tmp/src/kernels/cpu/bad.cpp"
  echo '#include "kernels/cpu/attention.h"' > "$tmp/src/kvcache/bad_include.cpp"
  echo '  kernels::paged_attention(q, pool, table, {}, out, p);' > "$tmp/src/kvcache/bad_paged.cpp"
  echo '  cuda::attention (q, keys, out, params);' > "$tmp/src/kvcache/cuda/bad_cuda.cpp"
  echo '  const int32_t id = plan.page_ids[0];' > "$tmp/src/model/bad.cpp"
  mkdir -p "$tmp/src/pipeline"
  echo '#include "bench/harness/verify.h"' > "$tmp/src/pipeline/bad.cpp"
  echo '#include "kernels/cpu/ops.h"' > "$tmp/src/model/bad_kernel.cpp"
  echo '  if (on_gpu) cuda::linear(ctx, x, n, in, w, b, out, y);' > "$tmp/src/model/bad_branch.cpp"
  check "$tmp" > "$tmp/bad.txt" && { echo "self-test: violations were not reported"; exit 1; }
  status=0
  for want in "rule 1 (kernels include the cache): $tmp/src/kernels/cpu/bad.cpp:1:" \
              "rule 2 (the cache includes a CPU kernel): $tmp/src/kvcache/bad_include.cpp:1:" \
              "rule 2 (the cache calls an attention kernel): $tmp/src/kvcache/bad_paged.cpp:1:" \
              "rule 2 (the cache calls an attention kernel): $tmp/src/kvcache/cuda/bad_cuda.cpp:1:" \
              "rule 3 (the model touches page ids): $tmp/src/model/bad.cpp:1:" \
              "rule 4 (a library includes harness code): $tmp/src/pipeline/bad.cpp:1:" \
              "rule 5 (the model bypasses the compute interface): $tmp/src/model/bad_kernel.cpp:1:" \
              "rule 5 (the model bypasses the compute interface): $tmp/src/model/bad_branch.cpp:1:"; do
    grep -qF "$want" "$tmp/bad.txt" || { echo "self-test: missing report: $want"; status=1; }
  done
  [ "$(wc -l < "$tmp/bad.txt")" -eq 8 ] || { echo "self-test: expected 8 reports, got:"; cat "$tmp/bad.txt"; status=1; }
  [ $status -eq 0 ] && echo "self-test: every planted violation reported, the clean tree passed"
  exit $status
fi

root=${1:?usage: check_layering.sh ROOT | --self-test}
if check "$root"; then
  echo "layering rules hold in $root/src"
else
  exit 1
fi
