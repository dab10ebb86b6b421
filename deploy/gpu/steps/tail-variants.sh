#!/usr/bin/env bash
# The long-tail CUDA templates (issue 16) on parameter variants that no released shape has:
# kernels/variants/tail_shapes.json replaces those operators' shapes in a copy of the suite (GPT-J
# and interleaved mrope, partial rotary dims, group-limited routing, expert counts that are not a
# multiple of 4, odd conv widths and rows that cross 16-byte packs, group sizes that force the
# scalar paths). Each template at its defaults, 2 seeds, no timing, no unseen shapes.
#
# Usage (after the release build): bash deploy/gpu/run-gpu-checks.sh tailVariants --  [op ...]
# Output: /tmp/atrex-gpu-out/tail-variants.txt (also copied into $OUT when set). Exit 1 when any
# shape is not ok.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
atrex="$root/build/release/bin/atrex"
out=/tmp/atrex-gpu-out
mkdir -p "$out"
suite=$(mktemp -d /tmp/atrex-tail-variants.XXXXXX)
cp -r "$root/problems/atrex-bench/." "$suite/"
ops=$(python3 - "$root/kernels/variants/tail_shapes.json" "$suite" <<'PY'
import json, sys
variants = json.load(open(sys.argv[1]))
for op, shapes in variants.items():
    with open(f"{sys.argv[2]}/data/{op}/shapes.json", "w") as f:
        json.dump(shapes, f)
print(" ".join(variants))
PY
)
[ $# -gt 0 ] && ops="$*"
rc=0
: > "$out/tail-variants.txt"
for op in $ops; do
  for tpl in "$root"/kernels/templates/"$op"/cuda/*.cu; do
    [ -f "$tpl" ] || continue
    echo "--- $tpl" | tee -a "$out/tail-variants.txt"
    "$atrex" --suite "$suite" eval "$tpl" --operator "$op" --no-perf --seeds 2 --unseen-shapes 0 \
      --timeout 120 2>&1 | tee -a "$out/tail-variants.txt" || rc=1
  done
done
[ -n "${OUT:-}" ] && cp "$out/tail-variants.txt" "$OUT/"
rm -rf "$suite"
exit $rc
