#!/usr/bin/env bash
# Issue 16's MoE-family templates (fused_moe, fp8_blockscale_fused_moe, moe_align_block_size,
# topk_filter, moe_count_and_sort) evaluated on a GPU: every CUDA template of those operators at
# its defaults, all gates, 2 seeds, 1 unseen shape, with timing. The simt_stream templates
# (weight streaming without tensor cores, slow on the largest shapes) run on a subset: the first
# shape of each routing class (MOE_SIMT_SHAPES, default 0,8,9: two classes) and two fp8
# shapes with one token (FP8_SIMT_SHAPES, default 2,4); they run last.
#
# Usage (after a build): bash deploy/gpu/run-gpu-checks.sh moe --  [op ...]
#   ATREX=path/to/atrex (default build/release/bin/atrex, else build/wip/bin/atrex)
# Output: $OUT/moe-templates.txt ($OUT defaults to /tmp/atrex-gpu-out), written as it goes; one
# summary line per template at the end. Exit 1 when any shape is not ok.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
atrex=${ATREX:-$root/build/release/bin/atrex}
[ -x "$atrex" ] || atrex="$root/build/wip/bin/atrex"
out=${OUT:-/tmp/atrex-gpu-out}
mkdir -p "$out"
log="$out/moe-templates.txt"
ops="fused_moe fp8_blockscale_fused_moe moe_align_block_size topk_filter moe_count_and_sort"
[ $# -gt 0 ] && ops="$*"
simt_shapes=${MOE_SIMT_SHAPES:-0,8,9}
fp8_simt_shapes=${FP8_SIMT_SHAPES:-2,4}
rc=0
: > "$log"
summary=""
shapes_of() {  # template -> --shapes value
  case "$1" in
    */fused_moe/cuda/simt_stream.cu) echo "$simt_shapes" ;;
    */fp8_blockscale_fused_moe/cuda/simt_stream.cu) echo "$fp8_simt_shapes" ;;
    *) echo all ;;
  esac
}
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
# Evaluation order: the tensor-core and routing templates first, the slow simt_stream ones last
# (a run cut short by a time limit keeps the most informative part).
tpls=""
for op in $ops; do
  for tpl in "$root"/kernels/templates/"$op"/cuda/*.cu; do
    [ -f "$tpl" ] && [ "$(basename "$tpl")" != simt_stream.cu ] && tpls+=" $op:$tpl"
  done
done
for op in $ops; do
  tpl="$root/kernels/templates/$op/cuda/simt_stream.cu"
  [ -f "$tpl" ] && tpls+=" $op:$tpl"
done
for item in $tpls; do
  op=${item%%:*}
  tpl=${item#*:}
  echo "--- $tpl" | tee -a "$log"
  start=$(date +%s%N)
  "$atrex" eval "$tpl" --operator "$op" --shapes "$(shapes_of "$tpl")" --seeds 2 --unseen-shapes 1 \
    --timeout 60 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
  [ "$status" -eq 0 ] || rc=1
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  si=$(grep "S_i($op)" "$log" | tail -1)
  summary+="$op $(basename "$tpl") rc=$status ${ms}ms  ${si}"$'\n'
done
echo "=== summary" | tee -a "$log"
printf '%s' "$summary" | tee -a "$log"
exit $rc
