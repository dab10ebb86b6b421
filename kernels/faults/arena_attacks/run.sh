#!/usr/bin/env bash
# Evaluates the arena attack candidates of this folder on a GPU machine, from the atrex
# repository root (build/release/bin/atrex, or $ATREX; .gpu-bundle/lib on the library path as
# deploy/gpu/run-gpu-checks.sh does). One line per record: group tag, arena|memfd, shape,
# status, judge_reads, timing method, median us, s_j, then the error (300 chars).
#
# Usage: bash /path/to/arena-attacks/run.sh [GROUP...]   GROUP: base A B C D E (default: all)
# Budget: ~18 evaluations, roughly 8-15 minutes on an H100 (nvcc included); run groups in
# separate calls if one command may only last 10 minutes, e.g. `run.sh base A` then `run.sh B C D E`.
# Output: also saved under $OUT (if set) or /tmp/arena-attacks-out: results.txt and the JSONL.
set -u
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
out=${OUT:-/tmp/arena-attacks-out}
mkdir -p "$out"
work=/tmp/arena-attacks-variants
rm -rf "$work" && mkdir -p "$work"
results="$out/results.txt"
: > "$results"
say() { echo "$*" | tee -a "$results"; }

groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(base A B C D E)
want() { for g in "${groups[@]}"; do [ "$g" = "$1" ] && return 0; done; return 1; }

say "atrex: $atrex"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$results"
# The evaluation sandbox, as run-gpu-checks.sh probes it: where bwrap cannot start, no sandbox.
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

# ev TAG FILE MODE(arena|memfd) SHAPES [extra atrex eval args...]
ev() {
  local tag=$1 file=$2 mode=$3 shapes=$4
  shift 4
  local jsonl="$out/$tag-$mode.jsonl" log="$out/$tag-$mode.log"
  rm -f "$jsonl"
  local envset=(env -u ATREX_DEVICE_ARENA)
  [ "$mode" = memfd ] && envset=(env ATREX_DEVICE_ARENA=0)
  local t0=$SECONDS
  timeout 900 "${envset[@]}" "$atrex" eval "$file" --operator rms_norm --shapes "$shapes" \
    --backend cuda --out "$jsonl" "$@" > "$log" 2>&1
  local rc=$?
  if [ -s "$jsonl" ] && command -v python3 > /dev/null; then
    python3 - "$jsonl" "$tag" "$mode" "$rc" "$((SECONDS - t0))" << 'EOF' | tee -a "$results"
import json, sys
path, tag, mode, rc, secs = sys.argv[1:6]
for line in open(path):
    line = line.strip()
    if not line:
        continue
    try:
        r = json.loads(line)
    except Exception as e:
        print(f"{tag:34s} {mode:5s} unparsable record: {e}")
        continue
    t = r.get("timing") or {}
    extra = []
    if t.get("cupti_fallback"): extra.append("cupti_fallback=" + t["cupti_fallback"][:80])
    if t.get("graph_fallback"): extra.append("graph_fallback=" + t["graph_fallback"][:80])
    if t.get("cupti_records"): extra.append("records=" + json.dumps(t["cupti_records"]))
    if t.get("event_time_us_median") is not None: extra.append("ev_us=%.2f" % t["event_time_us_median"])
    if r.get("unlaunched_kernels"): extra.append("unlaunched=" + json.dumps(r["unlaunched_kernels"])[:80])
    if r.get("above_roofline"): extra.append("above_roofline")
    med = t.get("time_us_median")
    sj = r.get("s_j")
    print(f"{tag:34s} {mode:5s} shape={r.get('shape_id')} status={r.get('status')} "
          f"judge_reads={r.get('judge_reads')} method={t.get('method')} "
          f"us={'%.2f' % med if med is not None else None} t_roof={r.get('t_roofline_us')} "
          f"s_j={'%.3f' % sj if sj is not None else None} {' '.join(extra)} "
          f"| error: {(r.get('error') or '')[:300]}")
print(f"{tag:34s} {mode:5s} (atrex exit {rc}, {secs} s)")
EOF
  else
    say "$tag $mode: no records (atrex exit $rc); last lines of $log:"
    tail -n 8 "$log" | sed 's/^/    /' | tee -a "$results"
  fi
}

S=0,15,28
A="$here/cupti_escape_side_stream.cu"
B="$here/late_writer_races_judge.cu"
C="$here/remaps_arena_private.cu"
D="$here/mutates_input_after_first_check.cu"
E="$here/arena_probe.cu"

if want base; then
  say "=== base: the honest candidate (expected ok, judge_reads device_arena / memfd)"
  ev base-rms_norm_correct "$root/kernels/faults/rms_norm_correct.cu" arena "$S"
fi
if want A; then
  say "=== A: real kernel outside the CUPTI span on a non-blocking stream + pacer (expected: ok, s_j ~0.7-0.87 on shape 0, i.e. the pacer's time, whatever the real kernel costs)"
  ev A-cupti-pop "$(variant "$A" A-cupti-pop 'ATTACK=1')" arena "$S"
  ev A-worker-thread "$(variant "$A" A-worker-thread 'ATTACK=2')" arena "$S"
  ev A-cupti-pop "$(variant "$A" A-cupti-pop-m 'ATTACK=1')" memfd "$S"
  ev A-twin-honest "$(variant "$A" A-twin-honest 'ATTACK=0')" arena "$S"
  say "--- A with a real kernel of >= 20 ms: attack (expected ok at the pacer's ~us) vs its honest twin (expected ok at >= 20000 us)"
  ev A-slow20ms-attack "$(variant "$A" A-slow-attack 'ATTACK=1 SLOW_US=20000')" arena "$S" --unseen-shapes 0
  ev A-slow20ms-twin "$(variant "$A" A-slow-twin 'ATTACK=0 SLOW_US=20000')" arena "$S" --unseen-shapes 0
fi
if want B; then
  say "=== B: outputs written DELAY us after the call returned (checked calls only, --no-perf): arena vs memfd"
  for d in 0 100 2000; do
    f=$(variant "$B" "B-delay$d" "DELAY_US=$d")
    ev "B-late-writer-delay${d}us" "$f" arena "$S" --no-perf --unseen-shapes 0
    ev "B-late-writer-delay${d}us" "$f" memfd "$S" --no-perf --unseen-shapes 0
  done
fi
if want C; then
  say "=== C: the child remaps the arena VA to private memory (MIRROR 0: expected wrong_result, NaN; MIRROR 1: expected ok, no gain)"
  ev C-remap-nomirror "$(variant "$C" C-remap0 'MIRROR=0')" arena "$S" --unseen-shapes 0
  ev C-remap-mirror "$(variant "$C" C-remap1 'MIRROR=1')" arena "$S" --unseen-shapes 0
fi
if want D; then
  say "=== D: input left modified from the 2nd call on (expected wrong_result 'modified its input x' on every shape with the arena; first shape ~24% ok with memfd)"
  ev D-mutates-input "$D" arena "$S" --no-perf --unseen-shapes 0
  ev D-mutates-input "$D" memfd "$S" --no-perf --unseen-shapes 0
fi
if want E; then
  say "=== E: reconnaissance probe (expected wrong_result 'the candidate returned 9: arena probe: ...' with the facts)"
  ev E-arena-probe "$E" arena "$S" --no-perf --unseen-shapes 0
  ev E-arena-probe "$E" memfd "$S" --no-perf --unseen-shapes 0
fi
say "=== done; records and logs in $out"
exit 0
