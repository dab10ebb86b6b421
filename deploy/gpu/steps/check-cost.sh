#!/usr/bin/env bash
# What the correctness checks of large shapes cost (docs/sweeps.md "Timing of the default sweep"):
# `atrex eval` of chosen templates on chosen shapes (2 seeds, timing on), once with this build and,
# when BASELINE_BIN names another build's bin/ (share/ beside it), once with that build, side by
# side on the same card; one line per run: wall seconds and the record's phases (check, timing...).
# BASELINE_ENV="VAR=value ..." instead runs this build twice, first with that environment
# (BASELINE_ENV=ATREX_DEVICE_ARENA=0: the judge's device arena, the default, against its
# copies through the host).
#
# Usage: bash deploy/gpu/run-gpu-checks.sh checkCost -- [op:template:shapes ...]
#   default: fp8_blockscale_fused_moe:dequant_mma:1 unified_attention:flash_mma:13
# Output: $OUT/check-cost.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${OUT:-/tmp/atrex-gpu-out}
mkdir -p "$out"
log="$out/check-cost.txt"
specs="fp8_blockscale_fused_moe:dequant_mma:1 unified_attention:flash_mma:13"
[ $# -gt 0 ] && specs="$*"
bins="$root/build/release/bin"
[ -n "${BASELINE_BIN:-}" ] && bins="$BASELINE_BIN $bins"
[ -n "${BASELINE_ENV:-}" ] && bins="env:$bins $bins"
rc=0
export ATREX_CACHE_DIR=${ATREX_CACHE_DIR:-/tmp/atrex-check-cost-cache}
# Compiled first, so that no run's wall time holds nvcc (both builds share the compile cache).
for spec in $specs; do
  IFS=: read -r op tpl shapes <<< "$spec"
  "$root/build/release/bin/atrex" compile "$root/kernels/templates/$op/cuda/$tpl.cu" > /dev/null 2>&1 &
done
wait
for spec in $specs; do
  IFS=: read -r op tpl shapes <<< "$spec"
  for bin in $bins; do
    rec=$(mktemp)
    envs=()
    case "$bin" in env:*) bin=${bin#env:}; read -r -a envs <<< "$BASELINE_ENV" ;; esac
    t0=$(date +%s.%N)
    env "${envs[@]}" "$bin/atrex" eval "$root/kernels/templates/$op/cuda/$tpl.cu" \
      --operator "$op" --shapes "$shapes" --seeds 2 --out "$rec" > /dev/null 2>&1 || rc=1
    t1=$(date +%s.%N)
    python3 - "$rec" "$op" "$tpl" "${envs[*]} $bin" "$t0" "$t1" <<'PY' | tee -a "$log"
import json, sys
rec, op, tpl, bin_, t0, t1 = sys.argv[1:]
for line in open(rec):
    r = json.loads(line)
    phases = {k: round(v, 2) for k, v in (r.get("phases_s") or {}).items()}
    print(f"{op} {tpl} shape {r.get('shape_id')} {r.get('status')} "
          f"wall {float(t1) - float(t0):.1f} s (record {r.get('wall_s', 0):.1f} s) phases {phases} "
          f"[{bin_}]")
PY
    rm -f "$rec"
  done
done
exit $rc
