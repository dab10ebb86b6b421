#!/usr/bin/env bash
# Evaluates the stray-work attacks of this folder (and their honest twins) on a GPU machine, from
# the atrex repository root: `bash /path/to/stray-attacks/run.sh` (binaries: $ATREX, else
# build/release/bin/atrex, .gpu-bundle/bin/atrex, build/ci/bin/atrex). rms_norm, --backend cuda,
# shapes 0,15 (some variants shape 0 only), --unseen-shapes 0. One line per record: tag, shape,
# status, method, median us, s_j, ev_us, records, cupti_fallback, error prefix.
# Budget: all variants are compiled first, in parallel (`atrex compile`, filling the compile
# cache), then evaluated one at a time; ~4-6 minutes on an H100. A deadline (DEADLINE_S, default
# 340 s from the start) skips the evaluations that would start after it.
# Output also saved under $OUT (if set) or /tmp/stray-attacks-out: results.txt, JSONL and logs.
set -u
t_start=$SECONDS
deadline=${DEADLINE_S:-340}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(pwd)
atrex=${ATREX:-}
if [ -z "$atrex" ]; then
  for c in "$root/build/release/bin/atrex" "$root/.gpu-bundle/bin/atrex" "$root/build/ci/bin/atrex"; do
    if [ -x "$c" ]; then atrex=$c; break; fi
  done
fi
if [ -z "$atrex" ]; then echo "no atrex binary (set ATREX=...)"; exit 2; fi
export LD_LIBRARY_PATH="$root/.gpu-bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
if [ -z "${ATREX_CACHE_DIR:-}" ]; then
  if [ -d "$root/.gpu-bundle/cache" ]; then export ATREX_CACHE_DIR="$root/.gpu-bundle/cache"; else export ATREX_CACHE_DIR=/tmp/atrex-cache; fi
fi
out=${OUT:-/tmp/stray-attacks-out}
mkdir -p "$out"
work=/tmp/stray-attacks-variants
rm -rf "$work" && mkdir -p "$work"
results="$out/results.txt"
: > "$results"
say() { echo "$*" | tee -a "$results"; }

say "atrex: $atrex"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$results"
probe=$("$atrex" eval "$root/kernels/faults/rms_norm_correct.cpp" --operator rms_norm --shapes 15 \
  --no-perf --unseen-shapes 0 --seeds 1 --backend cpu 2>&1)
if echo "$probe" | grep -q 'evaluation sandbox cannot start'; then
  export ATREX_NO_SANDBOX=1
  say "sandbox: UNAVAILABLE, running with ATREX_NO_SANDBOX=1 (no seccomp either)"
else
  say "sandbox: on"
fi

# variant SRC NAME 'MACRO=VALUE ...': a copy of SRC with its `#define MACRO ...` lines replaced.
variant() {
  local src=$1 defs=$3 dst="$work/$2.cu"
  cp "$src" "$dst"
  for d in $defs; do
    local m=${d%%=*} v=${d#*=}
    sed -i "s/^#define $m .*/#define $m $v/" "$dst"
  done
  echo "$dst"
}

D="$here/deferred_after_drain.cu"
B="$here/bogus_external_id.cu"
G="$here/device_graph_untraced.cu"
# tag|file|shapes|expected
plan=(
  "twin-honest|$(variant "$D" twin 'ATTACK=0')|0,15|ok at the honest time (the baseline)"
  "D1-callback-harnessname|$(variant "$D" d1c1 'ATTACK=1 CAMO=1')|0,15|ok at the pacer's time (shape 0 s_j ~0.7-0.85)"
  "D1-callback-bogusid|$(variant "$D" d1c2 'ATTACK=1 CAMO=2')|0,15|ok at the pacer's time"
  "D1-callback-CONTROL-nocamo|$(variant "$D" d1c0 'ATTACK=1 CAMO=0')|0,15|rejected: device work outside the timed calls ... not one of the harness's kernels"
  "D2-signal-harnessname|$(variant "$D" d2c1 'ATTACK=2 CAMO=1')|0,15|ok at the pacer's time (or wrong_result on a missed signal + re-check)"
  "D1-harnessname-slow20ms|$(variant "$D" d1c1s 'ATTACK=1 CAMO=1 SLOW_US=20000')|0|ok at the pacer's ~us (20 ms real work per call)"
  "twin-slow20ms|$(variant "$D" twins 'ATTACK=0 SLOW_US=20000')|0|ok at >= 20000 us"
  "B-bogusid-side|$(variant "$B" b1 'ATTACK=1 SIDE=1')|0,15|ok at the pacer's time"
  "B-bogusid-side-slow12us|$(variant "$B" b1s 'ATTACK=1 SIDE=1 SLOW_US=12')|0|ok at the pacer's time (twin >= 12 us)"
  "G-devicegraph|$(variant "$G" g1 'ATTACK=1')|0,15|ok at the pacer's time (or ok honest if the span holds the child)"
  "G-devicegraph-slow12us|$(variant "$G" g1s 'ATTACK=1 SLOW_US=12')|0|ok at the pacer's time (twin >= 12 us)"
  "twin-slow12us|$(variant "$D" twin12 'ATTACK=0 SLOW_US=12')|0|ok at >= 12 us"
)

# Compile everything first, in parallel (the compile cache then serves the evaluations).
say "=== compiling ${#plan[@]} variants ($(nproc) cores)"
pids=()
for p in "${plan[@]}"; do
  IFS='|' read -r tag file shapes expect <<< "$p"
  ( "$atrex" compile --arch sm_90a "$file" > "$out/$tag.compile.log" 2>&1 || echo "compile FAILED: $tag (see $out/$tag.compile.log)" ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
say "compiled in $((SECONDS - t_start)) s"

ev() {
  local tag=$1 file=$2 shapes=$3 expect=$4
  if [ $((SECONDS - t_start)) -gt "$deadline" ]; then say "$tag: SKIPPED (deadline ${deadline}s passed)"; return; fi
  local jsonl="$out/$tag.jsonl" log="$out/$tag.log" t0=$SECONDS
  rm -f "$jsonl"
  say "--- $tag (expected: $expect)"
  timeout 150 "$atrex" eval "$file" --operator rms_norm --backend cuda --shapes "$shapes" \
    --unseen-shapes 0 --out "$jsonl" > "$log" 2>&1
  local rc=$?
  if [ -s "$jsonl" ] && command -v python3 > /dev/null; then
    python3 - "$jsonl" "$tag" "$rc" "$((SECONDS - t0))" << 'PYEOF' | tee -a "$results"
import json, sys
path, tag, rc, secs = sys.argv[1:5]
for line in open(path):
    line = line.strip()
    if not line:
        continue
    try:
        r = json.loads(line)
    except Exception as e:
        print(f"{tag:30s} unparsable record: {e}")
        continue
    t = r.get("timing") or {}
    extra = []
    if t.get("event_time_us_median") is not None: extra.append("ev_us=%.2f" % t["event_time_us_median"])
    if t.get("cupti_records"): extra.append("records=" + json.dumps(t["cupti_records"], separators=(',', ':')))
    if t.get("cupti_fallback"): extra.append("cupti_fallback=" + t["cupti_fallback"][:70])
    if t.get("graph_fallback"): extra.append("graph_fallback=" + t["graph_fallback"][:50])
    if r.get("above_roofline"): extra.append("above_roofline")
    med = t.get("time_us_median")
    sj = r.get("s_j")
    print(f"{tag:30s} shape={r.get('shape_id')} status={r.get('status')} method={t.get('method')} "
          f"us={'%.2f' % med if med is not None else None} s_j={'%.3f' % sj if sj is not None else None} "
          f"t_roof={r.get('t_roofline_us')} {' '.join(extra)} | error: {(r.get('error') or '')[:220]}")
print(f"{tag:30s} (atrex exit {rc}, {secs} s)")
PYEOF
  else
    say "$tag: no records (atrex exit $rc); last lines of $log:"
    tail -n 8 "$log" | sed 's/^/    /' | tee -a "$results"
  fi
}

for p in "${plan[@]}"; do
  IFS='|' read -r tag file shapes expect <<< "$p"
  ev "$tag" "$file" "$shapes" "$expect"
done
say "=== done in $((SECONDS - t_start)) s; records and logs in $out"
exit 0
