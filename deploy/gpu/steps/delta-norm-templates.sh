#!/usr/bin/env bash
# Issue 16's templates for linear_sigmoid_mul, fused_rmsnorm_quant, layer_norm and the
# linear-attention family, evaluated on a GPU: every CUDA template of those operators at its
# defaults, on every released shape, all gates, 2 seeds, 1 unseen shape, with timing.
#
# Usage (after a build): bash deploy/gpu/run-gpu-checks.sh deltaNorm --  [--variants] [op ...]
#   --variants: instead, correctness only (no timing, 2 seeds) on the variant shapes of
#   kernels/variants/delta_norm_shapes.json (row and reduction lengths off the vector and tile
#   sizes, value dims ending mid column block, key_dim 64 and 200, chunk_size 32, ...), which
#   drive the templates' fallback and tail paths; output delta-norm-variants.txt.
#   ATREX=path/to/atrex (default build/release/bin/atrex, else build/wip/bin/atrex)
# Output: $OUT/delta-norm-templates.txt ($OUT defaults to /tmp/atrex-gpu-out), written as it
# goes; one summary line per template at the end. Exit 1 when any shape is not ok.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
atrex=${ATREX:-$root/build/release/bin/atrex}
[ -x "$atrex" ] || atrex="$root/build/wip/bin/atrex"
out=${OUT:-/tmp/atrex-gpu-out}  # written as it goes, so a run cut short keeps what it did
mkdir -p "$out"
log="$out/delta-norm-templates.txt"
# Heaviest suite weight first, so a run cut short by a time limit keeps the ones that count most.
ops="gated_delta_rule_update chunk_gated_delta_rule_state chunk_delta_rule_output"
ops="$ops linear_sigmoid_mul fused_rmsnorm_quant layer_norm"
variants=0
if [ "${1:-}" = "--variants" ]; then variants=1; shift; fi
[ $# -gt 0 ] && ops="$*"
rc=0
if [ "$variants" = 1 ]; then
  suite=$(mktemp -d /tmp/atrex-delta-norm-variants.XXXXXX)
  cp -r "$root/problems/atrex-bench/." "$suite/"
  python3 - "$root/kernels/variants/delta_norm_shapes.json" "$suite" <<'PY'
import json, sys
for op, shapes in json.load(open(sys.argv[1])).items():
    with open(f"{sys.argv[2]}/data/{op}/shapes.json", "w") as f:
        json.dump(shapes, f)
PY
  log="$out/delta-norm-variants.txt"
  : > "$log"
  for op in $ops; do
    for tpl in "$root"/kernels/templates/"$op"/cuda/*.cu; do
      [ -f "$tpl" ] || continue
      echo "--- $tpl" | tee -a "$log"
      "$atrex" --suite "$suite" eval "$tpl" --operator "$op" --no-perf --seeds 2 --unseen-shapes 0 \
        --timeout 120 2>&1 | tee -a "$log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    done
  done
  rm -rf "$suite"
  exit $rc
fi
: > "$log"
summary=""
# Compile every template first, in parallel (correctness only, smallest shape): the timed runs
# below then find their builds in the compile cache.
pids=""
for op in $ops; do
  for tpl in "$root"/kernels/templates/"$op"/cuda/*.cu; do
    [ -f "$tpl" ] || continue
    "$atrex" eval "$tpl" --operator "$op" --no-perf --shapes smallest:1 --seeds 1 --unseen-shapes 0 \
      --no-range-probe --no-edge-cases --timeout 120 > "$out/warm-$op-$(basename "$tpl").txt" 2>&1 &
    pids+=" $!"
  done
done
for pid in $pids; do wait "$pid"; done
for op in $ops; do
  for tpl in "$root"/kernels/templates/"$op"/cuda/*.cu; do
    [ -f "$tpl" ] || continue
    echo "--- $tpl" | tee -a "$log"
    start=$(date +%s%N)
    "$atrex" eval "$tpl" --operator "$op" --seeds 2 --unseen-shapes 1 --timeout 60 2>&1 | tee -a "$log"
    status=${PIPESTATUS[0]}
    [ "$status" -eq 0 ] || rc=1
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    si=$(grep "S_i($op)" "$log" | tail -1)
    summary+="$op $(basename "$tpl") rc=$status ${ms}ms  ${si}"$'\n'
  done
done
echo "=== summary" | tee -a "$log"
printf '%s' "$summary" | tee -a "$log"
exit $rc
