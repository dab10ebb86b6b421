#!/usr/bin/env bash
# Runs on the lent GPU machine (device tool), from the repository root, after
# deploy/gpu/bundle.sh ran on the development machine and the call carried build/release/bin,
# build/release/share and .gpu-bundle:
#   1. the `gpu` test label (GPU gates: CUDA events timing, illegal address, all-zero output);
#   2. `atrex eval` of each covered operator's CUDA templates on all shapes (EVAL_OPS="op1 op2"
#      limits it to those operators);
#   3. the local sweep on the cuda backend (embedded default: all shapes of covered operators);
#   4. xcheck: every operator's CUDA reference against an independent PyTorch implementation on
#      3 shapes each (deploy/gpu/xcheck.sh; needs python3 with torch);
#   timing:  `atrex bench timing` (timer calibration table);
#   measure: `atrex hardware measure` (the GPU's measured profile, saved as measured-gpu.yaml);
#   benchEval: `atrex bench eval` (full evaluation of fused_add_rms_norm and l2_norm, cold and warm
#            cache); BASELINE_BIN=<another build's bin/> runs the same with that build, side by side;
#   refs:    every reference candidate (.cu) on its 2 smallest and its largest shape
#            (REFS_OPS="op1 op2" limits the operators, REFS_SELECT="smallest:2" the shapes,
#            REFS_JOBS=N evaluates N operators at once: correctness only, nothing is timed).
# Everything printed is also saved under $OUT (when set) for the issue notes.
#   dumpcmp: `atrex problems dump` of small shapes on --backend cpu and cuda, cmp of every tensor:
#            GPU-drawn inputs must be bit-identical (DUMPCMP_SPECS="op=shapes ..." overrides the set).
#   daemon:  a cluster sweep (local launcher, Redis from .gpu-bundle/redis) whose candidates hit an
#            illegal address, a hang and an out-of-memory: one `atrex runner --device 0` survives them.
#   twogpu:  the embedded default sweep with one runner per GPU (the 2-GPU machine kind), GPU
#            utilisation sampled per index.
#   sandbox: the evaluation sandbox on the GPU (docs/evaluation.md "Sandbox"): a CUDA template and
#            three CUDA fault candidates with the sandbox and without, the cpu attack candidates on
#            this host (what each could do), the records' `sandbox` field.
#   sandboxBench: `atrex bench eval` (fused_add_rms_norm, l2_norm; SANDBOX_BENCH_OPS="op ..."
#            to choose) with the sandbox on vs off, alternating, twice each.
#   judge:   the judge (docs/evaluation.md "The judge"): the GPU tests of the judge (relay,
#            forged timing, a bent event clock, honest kernels in every timing mode), the cpu
#            judge attacks on this host, and the CUDA attack twins through `atrex eval` per timing
#            mode (what each record says).
#   attacks: the attack round of the second session on this host (docs/evaluation.md "Threat
#            model"): the SandboxTest cases of the new attacks, then each cpu attack through
#            `atrex --log-level debug eval` (what each record says, and the line that says which
#            cgroup the children got on this host).
#   fresh:   fresh values (docs/evaluation.md "Checks around timing", "Edge-case inputs", "Guard
#            regions"): the CUDA twins of the edge-case shortcuts, the guard overruns and their
#            honest twins through `atrex eval` (one line each: file shape mode status error), and
#            the cpu attacks on this host. Expected: shortcuts wrong_result naming "edge case (",
#            overruns rejected naming the side, every honest twin ok with `edge_case` set.
#   python:  Python candidates (docs/python-candidates.md) with the site's Python (ATREX_PYTHON,
#            default /opt/torch/.venv/bin/python3): the Triton rms_norm and silu_and_mul of
#            kernels/python/ on all shapes (2 seeds; per-shape table, S_i, dsl_share per record),
#            the torch-only rms_norm on cuda (dsl_share 0), and `atrex bench eval` of the Triton
#            rms_norm next to the native CUDA template on the same shapes (PY_BENCH_SHAPES,
#            default smallest:2). Needs bin/libatrex-python-shim.so next to atrex-eval-cuda.
#   Before any step the script probes the sandbox; where bwrap cannot make its namespaces here
#   every step runs with ATREX_NO_SANDBOX=1 (records say `sandbox: none`) and the output says why.
#   checkCost (named only): what the checks of large shapes cost, this build and BASELINE_BIN's
#            side by side (deploy/gpu/steps/check-cost.sh; op:template:shapes after `--`);
#            BASELINE_ENV="VAR=value" runs this build a second time with that environment instead
#            (BASELINE_ENV=ATREX_DEVICE_ARENA=0: the judge's device arena, the default, against
#            its memfd copies).
#   arenaAttacks (named only): the attack candidates of kernels/faults/arena_attacks (an attack
#            helper's, 2026-12-07: CUPTI/side-stream fake-fast, late writer, remapped arena,
#            input mutation, arena probe), each with the arena and with ATREX_DEVICE_ARENA=0;
#            ARENA_ATTACK_GROUPS="base A" / "B C D E" splits it (about 8-15 minutes in all).
#   strayAttacks (named only): the attack candidates of kernels/faults/stray_attacks (an attack
#            helper's, 2026-12-07, against the rules for device work outside the timed calls:
#            callback- and signal-deferred work under a harness kernel's name, made-up CUPTI ids,
#            device-launched graphs), each with its honest twin (about 4-6 minutes).
#   arenaBench (named only): `atrex bench eval` (ARENA_BENCH_OPS, default fused_add_rms_norm
#            l2_norm) with the judge's device arena (the default) vs its memfd copies
#            (ATREX_DEVICE_ARENA=0), alternating, twice each.
#   honest (named only): false-positive check of the gates: the first CUDA template of every
#            operator (HONEST_OPS="op ..." to choose) on its smallest and its largest shape, 2 seeds,
#            timed; one line per record (op shape status method median_us error prefix). Every
#            record should be ok (about 3-5 minutes on an H100).
#   moe, deltaNorm, tailVariants (named only, not part of `all`): the CUDA templates of the
#            MoE family (fused_moe, fp8_blockscale_fused_moe, the routing operators, topk_filter;
#            timed, 2 seeds), of the delta-rule and norm operators (`-- --variants` on variant
#            shapes) and of the long tail on variant shapes (deploy/gpu/steps/*.sh; operators
#            after `--` limit them, e.g. `run-gpu-checks.sh moe -- fp8_blockscale_fused_moe`).
# Usage: deploy/gpu/run-gpu-checks.sh [tests|eval|variants|sweep|smoke|xcheck|timing|measure|benchEval|refs|dumpcmp|daemon|twogpu|sandbox|sandboxBench|arenaBench|arenaAttacks|strayAttacks|honest|checkCost|judge|attacks|fresh|python|moe|deltaNorm|tailVariants|all]... [-- step arguments]
#   variants: VARIANTS="op/name:P=V,P=V[@ids] ..." templates at chosen parameters (1 seed, timing
#          only), on VARIANT_SHAPES (default all) or an entry's own @ids.
#   smoke: `atrex eval` of one CUDA template per operator on 3 shapes and the short
#          deploy/gpu/smoke-sweep.yaml, for a quick check within a few minutes.
set -uo pipefail
root=$(pwd)
# Work under /tmp; at the end everything is packed into $OUT (which returns at most 8 files).
out=/tmp/atrex-gpu-out
rm -rf "$out"
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/.gpu-bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
# The compile cache bundle.sh filled (warm start), else a fresh one.
if [ -d "$root/.gpu-bundle/cache" ]; then export ATREX_CACHE_DIR="$root/.gpu-bundle/cache"; else export ATREX_CACHE_DIR=/tmp/atrex-cache; fi
atrex="$root/build/release/bin/atrex"
# Steps before `--`, the arguments of the template steps (moe, deltaNorm, tailVariants) after it.
steps=() step_args=()
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then shift; step_args=("$@"); break; fi
  steps+=("$1"); shift
done
[ ${#steps[@]} -eq 0 ] && steps=(all)
want() { for s in "${steps[@]}"; do [ "$s" = all ] || [ "$s" = "$1" ] && return 0; done; return 1; }
# Steps `all` leaves out (minutes each): only when named.
named() { for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
# A redis-server for the cluster steps (daemon, twogpu): the Debian build's, from bundle.sh.
rdir=/tmp/atrex-gpu-redis port=${GPU_REDIS_PORT:-6399}
start_redis() {
  rm -rf "$rdir" && mkdir -p "$rdir"
  LD_LIBRARY_PATH="$root/.gpu-bundle/redis" "$root/.gpu-bundle/redis/redis-server" --port "$port" --bind 127.0.0.1 \
    --dir "$rdir" --appendonly yes --maxmemory-policy noeviction --daemonize yes --pidfile "$rdir/redis.pid" \
    --logfile "$rdir/redis.log" && sleep 1
}
stop_redis() { kill "$(cat "$rdir/redis.pid" 2>/dev/null)" 2>/dev/null; sleep 1; }
rc=0

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"

# The evaluation sandbox: the image's bwrap, else the bundle's (build/release/bin/bwrap, from
# bundle.sh). One cpu evaluation tells whether it starts here.
probe=$("$atrex" eval kernels/faults/rms_norm_correct.cpp --operator rms_norm --shapes 15 --no-perf --hardware H20 \
  --unseen-shapes 0 --seeds 1 2>&1)
if echo "$probe" | grep -q 'evaluation sandbox cannot start'; then
  echo "sandbox: UNAVAILABLE here, every step runs with ATREX_NO_SANDBOX=1: $(echo "$probe" | grep -m1 'sandbox cannot start')" | tee "$out/sandbox-probe.txt"
  export ATREX_NO_SANDBOX=1
else
  echo "sandbox: bwrap ($(command -v bwrap || echo "$root/build/release/bin/bwrap")); probe (cpu, correctness only): shape 15 $(echo "$probe" | awk '$1 == "15" { print $2; exit }')" | tee "$out/sandbox-probe.txt"
fi

if want tests; then
  echo "=== gpu test label"
  "$root/build/release/bin/atrex_runner_gpu_tests" 2>&1 | tee "$out/gpu-tests.txt" || rc=1
  # The triton- and torch-target agents' sweep (the site's Python: ATREX_PYTHON, as `python`).
  ATREX_PYTHON="${ATREX_PYTHON:-/opt/torch/.venv/bin/python3}" \
    "$root/build/release/bin/atrex_openai_gpu_tests" 2>&1 | tee -a "$out/gpu-tests.txt" || rc=1
  [ -n "${OUT:-}" ] && cp "$out/gpu-tests.txt" "$OUT/"
fi

if want eval; then
  echo "=== atrex eval: every CUDA template at its defaults, all shapes"
  for tpl in kernels/templates/*/cuda/*.cu; do
    op=$(basename "$(dirname "$(dirname "$tpl")")")
    # EVAL_OPS="op1 op2" limits the step to those operators' templates.
    if [ -n "${EVAL_OPS:-}" ] && ! [[ " $EVAL_OPS " == *" $op "* ]]; then continue; fi
    # EVAL_TEMPLATES="name1 name2" (file names without .cu) limits it further.
    if [ -n "${EVAL_TEMPLATES:-}" ] && ! [[ " $EVAL_TEMPLATES " == *" $(basename "$tpl" .cu) "* ]]; then continue; fi
    echo "--- $tpl"
    "$atrex" eval "$tpl" --operator "$op" --shapes all --out "$out/eval-$op-$(basename "$tpl" .cu).jsonl" 2>&1 \
      | grep -v '^  shape ' | tee -a "$out/eval.txt" || rc=1
  done
fi

if want variants; then
  # VARIANTS="op/name:P=V,P=V[@shape,shape] ..." (kernels/templates/<op>/cuda/<name>.cu) and
  # VARIANT_SHAPES (default all; @ids after an entry override it for that entry): each template
  # with those parameters set (#define lines ahead of the file, as the search renders them),
  # evaluated with 1 seed and no unseen shapes, for timing.
  echo "=== variants: CUDA templates at chosen parameters" | tee "$out/variants.txt"
  for v in ${VARIANTS:-}; do
    shapes="${VARIANT_SHAPES:-all}"; case "$v" in *@*) shapes="${v#*@}"; v="${v%%@*}";; esac
    tpl="kernels/templates/${v%%:*}"; tpl="${tpl%/*}/cuda/${tpl##*/}.cu"; op=$(echo "${v%%:*}" | cut -d/ -f1)
    defs="${v#*:}"; f="/tmp/atrex-variant-$(echo "$v" | tr '/:,=' '____').cu"
    { for d in ${defs//,/ }; do echo "#define ${d%%=*} ${d#*=}"; done; cat "$tpl"; } > "$f"
    echo "--- $tpl $defs (shapes $shapes)" | tee -a "$out/variants.txt"
    "$atrex" eval "$f" --operator "$op" --shapes "$shapes" --seeds 1 --unseen-shapes 0 2>&1 \
      | grep -v '^  shape ' | tee -a "$out/variants.txt" || rc=1
  done
  [ -n "${OUT:-}" ] && cp "$out/variants.txt" "$OUT/"
fi

if want smoke; then
  echo "=== smoke: atrex eval of one CUDA template per operator on 3 shapes"
  for op in rms_norm fused_add_rms_norm silu_and_mul l2_norm moe_sum_reduce reshape_and_cache \
            paged_attention_decode mla_decode_attention; do
    tpl=$(ls kernels/templates/$op/cuda/*.cu | head -1)
    n=$("$atrex" problems show "$op" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["shapes"]))')
    ids=$(python3 -c "n=$n; print(','.join(sorted({'0', str(n//2), str(n-1)}, key=int)))")
    echo "--- $tpl shapes $ids"
    timeout 120 "$atrex" eval "$tpl" --operator "$op" --shapes "$ids" --out "$out/eval-$op.jsonl" 2>&1 \
      | grep -v '^  shape ' | tee -a "$out/eval.txt" || rc=1
    [ -n "${OUT:-}" ] && cp "$out/eval.txt" "$OUT/"
  done
  echo "=== smoke: atrex sweep run deploy/gpu/smoke-sweep.yaml"
  timeout 300 "$atrex" sweep run deploy/gpu/smoke-sweep.yaml --out "$out/sweep" 2>&1 | tee "$out/sweep.txt" || rc=1
  [ -n "${OUT:-}" ] && cp "$out/sweep.txt" "$OUT/" && cp "$out/sweep/report.md" "$OUT/sweep-report.md" 2>/dev/null
fi

if named honest; then
  echo "=== honest: first CUDA template of every operator, smallest and largest shape" | tee "$out/honest.txt"
  # The first CUDA template of each chosen operator.
  honest_templates() {
    for d in kernels/templates/*/; do
      op=$(basename "$d")
      if [ -n "${HONEST_OPS:-}" ] && ! [[ " $HONEST_OPS " == *" $op "* ]]; then continue; fi
      ls "$d"cuda/*.cu 2>/dev/null | head -1
    done
  }
  # Compiled first, 8 at a time (the compile cache then serves the evaluations).
  t0=$SECONDS
  honest_templates \
    | xargs -P 8 -I{} sh -c '"$0" compile --arch sm_90a "$1" > /dev/null 2>&1 || echo "compile FAILED: $1"' "$atrex" {} \
    | tee -a "$out/honest.txt"
  echo "compiled in $((SECONDS - t0)) s" | tee -a "$out/honest.txt"
  for tpl in $(honest_templates); do
    op=$(basename "$(dirname "$(dirname "$tpl")")")
    n=$("$atrex" problems show "$op" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["shapes"]))')
    timeout 240 "$atrex" eval "$tpl" --operator "$op" --shapes "0,$((n - 1))" --seeds 2 --unseen-shapes 0 \
      --out "$out/honest-$op.jsonl" > "$out/honest-$op.log" 2>&1
    python3 - "$op" "$tpl" "$out/honest-$op.jsonl" <<'PY' | tee -a "$out/honest.txt"
import json, sys
op, tpl, path = sys.argv[1:4]
try:
    rows = [json.loads(l) for l in open(path) if l.strip()]
except OSError:
    rows = []
if not rows:
    print(f"{op} {tpl} NO RECORDS")
for r in rows:
    t = r.get("timing") or {}
    print(op, r.get("shape_id"), r.get("status"), t.get("method", "-"),
          t.get("time_us_median", "-"), (r.get("error") or "")[:120].replace("\n", " "))
PY
  done
  bad=$(grep -v '^===\|^compiled in' "$out/honest.txt" | awk '$3 != "ok"' | wc -l)
  echo "honest: $bad record(s) not ok" | tee -a "$out/honest.txt"
  [ "$bad" = 0 ] || rc=1
  [ -n "${OUT:-}" ] && cp "$out/honest.txt" "$OUT/"
fi

if want refs; then
  echo "=== reference candidates: correctness on the 2 smallest and the largest shape of every operator"
  # REFS_JOBS=N evaluates N operators at once (correctness only, --no-perf: nothing is timed, so
  # sharing the GPU changes no figure but the wall times); each block is appended whole.
  ref_one() {
    local op=$1 sel=$2 tag="$1-${2%%:*}" t0 t1 r shapes
    t0=$(date +%s.%N)
    timeout 150 "$atrex" eval "$src_dir/$op/naive.cu" --operator "$op" --shapes "$sel" --seeds 2 --no-perf --timeout 120 \
      --out "$out/refs-$tag.jsonl" > "$out/refs-$tag.txt" 2>&1
    r=$?
    t1=$(date +%s.%N)
    shapes=$(grep -E '^ +[0-9]+ ' "$out/refs-$tag.txt" | awk '{printf "%s:%s ", $1, $2}')
    {
      printf '%-30s %-10s rc=%d %6.1fs  %s\n' "$op" "$sel" "$r" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$shapes"
      [ $r -ne 0 ] && grep -v '^ *[0-9]* ' "$out/refs-$tag.txt" | tail -3 | sed 's/^/    | /'
      python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l); print("    shape", j.get("shape_id"), j.get("status"), "sandbox", j.get("sandbox"), "wall_s", round(j.get("wall_s",0),2), "phases_s", {k: round(v,2) for k,v in (j.get("phases_s") or {}).items()})' "$out/refs-$tag.jsonl" 2>/dev/null
    } > "$out/refs-$tag.block"
    cat "$out/refs-$tag.block" >> "$out/refs.txt"
    cat "$out/refs-$tag.block"
    [ -n "${OUT:-}" ] && cp "$out/refs.txt" "$OUT/"
    return $r
  }
  src_dir=kernels/reference
  jobs=${REFS_JOBS:-1}
  for src in "$src_dir"/*/naive.cu; do
    op=$(basename "$(dirname "$src")")
    if [ -n "${REFS_OPS:-}" ] && ! [[ " $REFS_OPS " == *" $op "* ]]; then continue; fi
    for sel in ${REFS_SELECT:-smallest:2 largest:1}; do
      while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || rc=1; done
      ref_one "$op" "$sel" &
    done
  done
  while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || rc=1; done
  [ -n "${OUT:-}" ] && cp "$out/refs.txt" "$OUT/"
fi

if want timing; then
  echo "=== atrex bench timing"
  "$atrex" bench timing 2>&1 | tee "$out/bench-timing.txt" || rc=1
  [ -n "${OUT:-}" ] && cp "$out/bench-timing.txt" "$OUT/"
fi
if want measure; then
  echo "=== atrex hardware measure"
  "$atrex" hardware measure --out "$out/measured-gpu.yaml" 2>&1 | tee "$out/hardware-measure.txt" || rc=1
  [ -n "${OUT:-}" ] && cp "$out/hardware-measure.txt" "$out/measured-gpu.yaml" "$OUT/" 2>/dev/null
fi
if want benchEval; then
  echo "=== atrex bench eval"
  "$atrex" bench eval --operator fused_add_rms_norm 2>&1 | tee "$out/bench-eval.txt" || rc=1
  "$atrex" bench eval --operator l2_norm 2>&1 | tee -a "$out/bench-eval.txt" || rc=1
  # The same two benchmarks from another commit's release build, in the same call (ratios on one
  # card at one time): BASELINE_BIN names its bin/ folder (share/ beside it), with a cache of its own.
  if [ -n "${BASELINE_BIN:-}" ]; then
    for op in fused_add_rms_norm l2_norm; do
      echo "--- baseline $BASELINE_BIN: $op"
      ATREX_CACHE_DIR=/tmp/atrex-baseline-cache "$BASELINE_BIN/atrex" bench eval --operator "$op" 2>&1 | tee -a "$out/bench-eval-baseline.txt" || rc=1
    done
    [ -n "${OUT:-}" ] && cp "$out/bench-eval-baseline.txt" "$OUT/"
  fi
  [ -n "${OUT:-}" ] && cp "$out/bench-eval.txt" "$OUT/"
fi
if want bsmm; then
  echo "=== block_scaled_mm: tiled CUDA reference bit-identical to the CPU definition, and its time"
  for b in cpu cuda; do
    "$atrex" problems dump block_scaled_mm --shapes smallest:3 --backend $b --out "/tmp/bsmm-$b" > /dev/null 2>&1 || rc=1
  done
  for d in /tmp/bsmm-cpu/block_scaled_mm/*/; do
    s=$(basename "$d")
    for f in "$d"*.bin; do
      cmp -s "$f" "/tmp/bsmm-cuda/block_scaled_mm/$s/$(basename "$f")" && r=identical || { r=DIFFERENT; rc=1; }
      echo "shape $s $(basename "$f"): $r"
    done
  done 2>&1 | tee "$out/bsmm.txt"
  t0=$(date +%s.%N)
  "$atrex" problems dump block_scaled_mm --shapes 11 --backend cuda --out /tmp/bsmm-big 2>&1 | tail -2 | tee -a "$out/bsmm.txt"
  echo "largest shape (11) dump on cuda: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}') s" | tee -a "$out/bsmm.txt"
  rm -rf /tmp/bsmm-cpu /tmp/bsmm-cuda /tmp/bsmm-big
  [ -n "${OUT:-}" ] && cp "$out/bsmm.txt" "$OUT/"
fi
if want dumpcmp; then
  # Inputs drawn on the GPU (moe_gemm_inputs_cuda.cu) must equal the CPU backend's bit for bit;
  # references are compared too: block_scaled_mm's is bit-identical, the tiled fused-MoE and
  # attention references need only agree within tolerance (the count of differing bytes).
  echo "=== dumpcmp: atrex problems dump, --backend cpu vs cuda, cmp of every tensor"
  dc=/tmp/atrex-dumpcmp
  rm -rf "$dc" && mkdir -p "$dc"
  for spec in ${DUMPCMP_SPECS:-block_scaled_mm=smallest:2 fused_moe=smallest:2 fp8_blockscale_fused_moe=4 attention_forward=smallest:3}; do
    op=${spec%%=*} sel=${spec#*=}
    for b in cpu cuda; do
      t0=$(date +%s.%N)
      "$atrex" problems dump "$op" --shapes "$sel" --backend $b --out "$dc/$b" > "$dc/$op-$b.log" 2>&1 || { rc=1; tail -3 "$dc/$op-$b.log"; }
      echo "$op $sel --backend $b: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}') s"
    done
    for d in "$dc/cpu/$op"/*/; do
      s=$(basename "$d")
      for f in "$d"*.bin; do
        g="$dc/cuda/$op/$s/$(basename "$f")"
        if cmp -s "$f" "$g"; then r=identical
        else
          case "$(basename "$f")" in
            input.*) r="DIFFERENT (inputs must be identical)"; rc=1 ;;
            *) r="differs in $(cmp -l "$f" "$g" 2>/dev/null | wc -l) of $(stat -c %s "$f") bytes (reference outputs: tolerance, see xcheck)" ;;
          esac
        fi
        echo "  $op shape $s $(basename "$f"): $r"
      done
    done
  done 2>&1 | tee "$out/dumpcmp.txt"
  grep -q DIFFERENT "$out/dumpcmp.txt" && rc=1
  [ -n "${OUT:-}" ] && cp "$out/dumpcmp.txt" "$OUT/"
  rm -rf "$dc"
fi
if want sweep; then
  # SWEEP_LIMIT_S stops the sweep (SIGINT, as Ctrl-C) after that many seconds so that a call ends
  # in time; the folder is packed into $OUT/sweep-results.tgz (work/ left out), and a later call
  # that carries it back as SWEEP_RESUME=<that tgz> resumes the sweep where it stopped (finished
  # evaluations reused from results.jsonl, each operator's search from its audit trail).
  sdir=results/gpu-sweep
  echo "=== atrex sweep run (embedded default, cuda backend) into $sdir"
  mkdir -p results
  if [ ! -d "$sdir" ] && [ -n "${SWEEP_RESUME:-}" ] && [ -f "$SWEEP_RESUME" ]; then
    tar xzf "$SWEEP_RESUME" -C results && echo "resuming from $SWEEP_RESUME: $(wc -l < $sdir/results.jsonl) records"
  fi
  t0=$(date +%s)
  if [ -n "${SWEEP_LIMIT_S:-}" ]; then
    timeout -s INT -k 30 "$SWEEP_LIMIT_S" "$atrex" sweep run --backend cuda --out "$sdir" 2>&1 | tee -a "$out/sweep.txt"
  else
    "$atrex" sweep run --backend cuda --out "$sdir" 2>&1 | tee -a "$out/sweep.txt" || rc=1
  fi
  echo "sweep call: $(( $(date +%s) - t0 )) s wall" | tee -a "$out/sweep.txt"
  cp $sdir/report.md "$out/sweep-report.md" 2>/dev/null
  # The HTML report (roofline plots with memory/compute-bound shapes, the correctness-illusion
  # view with CUPTI's target-DSL shares) and the JUnit file of the same sweep (docs/reports.md).
  cp $sdir/report.html "$out/sweep-report.html" 2>/dev/null
  # The manifest: what produced the results (the builds entry: atrex commit, nvcc and its flags).
  cp $sdir/manifest.json "$out/sweep-manifest.json" 2>/dev/null
  [ -n "${OUT:-}" ] && cp "$out/sweep.txt" "$out/sweep-report.md" "$out/sweep-report.html" \
    "$out/sweep-manifest.json" "$OUT/" 2>/dev/null
  [ -n "${OUT:-}" ] && tar czf "$OUT/sweep-results.tgz" --exclude=gpu-sweep/work -C results gpu-sweep
fi
if want daemon; then
  echo "=== runner daemon through Redis: illegal address, hang, out-of-memory (deploy/gpu/daemon-faults.yaml)"
  # redis-server and its libraries come from this repo's Debian build machine (bundle.sh).
  rm -rf results/gpu-daemon-faults && mkdir -p results
  start_redis || rc=1
  {
    t0=$(date +%s.%N)
    "$atrex" sweep submit deploy/gpu/daemon-faults.yaml --redis "redis://127.0.0.1:$port" --launcher local \
      --out results/gpu-daemon-faults --metrics 127.0.0.1:0 || rc=1
    # Scrape every worker's /metrics (found through its file_sd target file) every 2 s while the
    # sweep runs; the last scrape of each is kept (wait stops the workers and removes the files).
    (
      while [ ! -e results/gpu-daemon-faults/.scrape-stop ]; do
        for f in results/gpu-daemon-faults/metrics/targets/*.json; do
          [ -e "$f" ] || continue
          t=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["targets"][0])' "$f" 2>/dev/null) || continue
          python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
            "http://$t/metrics" >"$f.scrape.tmp" 2>/dev/null &&
            mv "$f.scrape.tmp" "results/gpu-daemon-faults/$(basename "$f" .json).metrics"
        done
        sleep 2
      done
    ) &
    scraper=$!
    runner_pids=$(python3 -c 'import json; m=json.load(open("results/gpu-daemon-faults/manifest.json")); print(" ".join(str(p["pid"]) for p in m.get("workers",{}).get("processes",[]) if p.get("name","").startswith("runner")))' 2>/dev/null)
    echo "runner pid(s) at submit: ${runner_pids:-unknown}"
    timeout 420 "$atrex" sweep wait results/gpu-daemon-faults || rc=1
    echo "sweep finished in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}') s"
    touch results/gpu-daemon-faults/.scrape-stop && wait "$scraper"
    echo "--- last /metrics scrape of each worker (atrex_ series, histogram buckets left out)"
    for m in results/gpu-daemon-faults/*.metrics; do
      [ -e "$m" ] || { echo "no worker was scraped" && rc=1 && break; }
      echo "# $(basename "$m" .metrics)"; grep '^atrex_' "$m" | grep -v '_bucket{' || true
    done
    "$atrex" sweep status results/gpu-daemon-faults
    python3 - <<'PY' || rc=1
import json, glob
for f in glob.glob("results/gpu-daemon-faults/audit/*/*.jsonl"):
    for line in open(f):
        e = json.loads(line)
        if e.get("event") != "evaluated": continue
        t = e.get("provenance", {}).get("template", "?")
        for r in e.get("records", []):
            print(f"{t:40s} shape {r['shape_id']:>3}  {r['status']:12s} {r.get('time_us_median', 0) or 0:9.3f} us  {(r.get('error') or '')[:110]}")
print(open("results/gpu-daemon-faults/report.md").read()[:1500])
PY
    echo "--- runner and agent-worker logs (first and last lines)"
    for l in results/gpu-daemon-faults/logs/*.log; do echo "# $l"; head -3 "$l"; tail -4 "$l"; done
    for p in $runner_pids; do kill -0 "$p" 2>/dev/null && echo "runner $p still alive after the faults" || echo "runner $p has exited"; done
    "$atrex" sweep cancel results/gpu-daemon-faults 2>&1 | tail -2
  } 2>&1 | tee "$out/daemon.txt"
  stop_redis
  [ -n "${OUT:-}" ] && cp "$out/daemon.txt" "$OUT/"
fi
if want twogpu; then
  echo "=== one runner per GPU (local launcher, Redis from .gpu-bundle/redis): the embedded default sweep"
  ngpu=$(nvidia-smi -L | wc -l)
  rm -rf results/gpu-two && mkdir -p results
  start_redis || rc=1
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$out/twogpu-smi.csv" &
  smi=$!
  {
    t0=$(date +%s.%N)
    "$atrex" sweep submit --redis "redis://127.0.0.1:$port" --launcher local --runners "$ngpu" --agent-workers 4 \
      --backend cuda --out results/gpu-two || rc=1
    timeout 480 "$atrex" sweep wait results/gpu-two || rc=1
    echo "sweep with $ngpu runner(s) finished in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}') s"
    kill "$smi" 2>/dev/null
    "$atrex" sweep status results/gpu-two
    head -c 2500 results/gpu-two/report.md
    "$atrex" sweep cancel results/gpu-two 2>&1 | tail -1
    sleep 2
    echo "--- runner logs"
    for l in results/gpu-two/logs/runner-*.log; do echo "# $l"; grep -E "serving|stopped after" "$l"; done
    python3 - "$out/twogpu-smi.csv" <<'PY'
import sys, collections
busy = collections.defaultdict(list); mem = collections.defaultdict(int)
for line in open(sys.argv[1]):
    try:
        i, u, m = (int(x) for x in line.split(","))
    except ValueError:
        continue
    busy[i].append(u); mem[i] = max(mem[i], m)
for i in sorted(busy):
    u = busy[i]
    print(f"GPU {i}: {len(u)} samples, utilization mean {sum(u)/len(u):.1f}%, busy (>0%) in {sum(1 for x in u if x > 0)} samples, max memory used {mem[i]} MiB")
PY
  } 2>&1 | tee "$out/twogpu.txt"
  stop_redis
  [ -n "${OUT:-}" ] && cp "$out/twogpu.txt" "$OUT/"
fi
if want sandbox; then
  echo "=== sandbox: CUDA candidates with the sandbox and without"
  for mode in bwrap none; do
    flag=(); [ "$mode" = none ] && flag=(--no-sandbox)
    for cand in kernels/templates/rms_norm/cuda/block_row.cu kernels/faults/rms_norm_illegal_address.cu \
        kernels/faults/rms_norm_unjoined_stream.cu kernels/faults/rms_norm_cublas_fallback.cu; do
      echo "--- $mode: $cand"
      timeout 300 "$atrex" eval "$cand" --operator rms_norm --shapes smallest:3 "${flag[@]}" \
        --out "$out/sandbox-$mode-$(basename "$cand" .cu).jsonl" 2>&1 | grep -v '^  shape ' | tee -a "$out/sandbox.txt"
    done
  done
  echo "--- the cpu attack candidates on this host (docs/evaluation.md \"Threat model\"; each reports what it could do)" | tee -a "$out/sandbox.txt"
  for f in rms_norm_sandbox_honest rms_norm_forges_records rms_norm_network rms_norm_file_system \
      rms_norm_fork_bomb rms_norm_huge_file rms_norm_reads_parent; do
    "$atrex" eval "kernels/faults/$f.cpp" --operator rms_norm --shapes 15 --hardware H20 --no-perf \
      --unseen-shapes 0 --seeds 1 --out "$out/sandbox-attack-$f.jsonl" > /dev/null 2>&1
    python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(sys.argv[2], r["sandbox"], r["status"], r["error"][:300])' \
      "$out/sandbox-attack-$f.jsonl" "$f" 2>&1 | tee -a "$out/sandbox.txt"
  done
  echo "--- records per sandbox field (file: count)" | tee -a "$out/sandbox.txt"
  grep -c '"sandbox":"bwrap"' "$out"/sandbox-*.jsonl | tee -a "$out/sandbox.txt"
  [ -n "${OUT:-}" ] && cp "$out/sandbox.txt" "$OUT/"
fi
if want judge; then
  echo "=== judge: the reference and the clock out of the candidate's reach" | tee "$out/judge.txt"
  "$root/build/release/bin/atrex_runner_gpu_tests" \
    --gtest_filter='GpuGatesTest.RelayThatRewritesVerdictsMeetsTheJudge:GpuGatesTest.ForgedTimingIsRejected:GpuGatesTest.BentEventClockIsRefutedByTheJudgesClock:GpuGatesTest.HonestKernelsPassTheJudgesClockInEveryTimingMode' \
    2>&1 | tee -a "$out/judge.txt" || rc=1
  echo "--- the cpu judge attacks on this host (file shape: sandbox status error)" | tee -a "$out/judge.txt"
  for spec in "rms_norm_scans_for_answer 15" "rms_norm_relay_rewrites_verdict 15" \
      "rms_norm_relay_forges_timing 0" "rms_norm_slows_clock 0" "rms_norm_correct 0"; do
    set -- $spec
    "$atrex" eval "kernels/faults/$1.cpp" --operator rms_norm --shapes "$2" --hardware H20 \
      --unseen-shapes 0 --seeds 2 --out "$out/judge-cpu-$1.jsonl" > /dev/null 2>&1
    python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(sys.argv[2], r["sandbox"], r["status"], (r.get("timing") or {}).get("time_us_median"), r["error"][:300])' \
      "$out/judge-cpu-$1.jsonl" "$1 $2" 2>&1 | tee -a "$out/judge.txt"
  done
  echo "--- CUDA twins per timing mode (file shape mode: status median_us s_j error)" | tee -a "$out/judge.txt"
  for cand in rms_norm_slows_clock rms_norm_relay_forges_timing rms_norm_relay_rewrites_verdict rms_norm_correct; do
    for mode in auto graph eager; do
      timeout 300 "$atrex" eval "kernels/faults/$cand.cu" --operator rms_norm --shapes 0 --timing-mode "$mode" \
        --unseen-shapes 0 --out "$out/judge-cuda-$cand-$mode.jsonl" > /dev/null 2>&1
      python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(sys.argv[2], r["status"], (r.get("timing") or {}).get("time_us_median"), r.get("s_j"), r["error"][:300])' \
        "$out/judge-cuda-$cand-$mode.jsonl" "$cand 0 $mode" 2>&1 | tee -a "$out/judge.txt"
    done
  done
  [ -n "${OUT:-}" ] && cp "$out/judge.txt" "$OUT/"
fi
if want attacks; then
  echo "=== attacks: the second session's attack round on this host" | tee "$out/attacks.txt"
  "$root/build/release/bin/atrex_runner_tests" \
    --gtest_filter='SandboxTest.HostKernelSettingsAreReadOnly:SandboxTest.MemoryPastTheAddressSpaceLimitStopsAtTheCgroupLimit:SandboxTest.ThreadBombStopsAtTheCgroupTaskLimit:SandboxTest.TerminalInputIsDenied:SandboxTest.OtherSystemCallAbisAreKilled:SandboxTest.SlowedClockIsRefutedByTheJudgesClock:TimingCrossCheck.*' \
    2>&1 | tee -a "$out/attacks.txt" || rc=1
  echo "--- cpu attacks (file shape: sandbox status median_us s_j error)" | tee -a "$out/attacks.txt"
  for spec in "rms_norm_host_sysctl 15" "rms_norm_unaccounted_memory 15" "rms_norm_thread_bomb 15" \
      "rms_norm_terminal_input 15" "rms_norm_seccomp_abi 15" "rms_norm_slows_clock 0" \
      "rms_norm_relay_empties_brackets 3" "rms_norm_async_output 3" "rms_norm_correct 3"; do
    set -- $spec
    "$atrex" --log-level debug eval "kernels/faults/$1.cpp" --operator rms_norm --shapes "$2" --hardware H20 \
      --unseen-shapes 0 --seeds 2 --out "$out/attack-$1.jsonl" > "$out/attack-$1.log" 2>&1
    grep -h -E "children's cgroup|judge's shortest bracket" "$out/attack-$1.log" | head -3 | tee -a "$out/attacks.txt"
    python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(sys.argv[2], r["sandbox"], r["status"], (r.get("timing") or {}).get("time_us_median"), r.get("s_j"), r["error"][:300])' \
      "$out/attack-$1.jsonl" "$1 $2" 2>&1 | tee -a "$out/attacks.txt"
  done
  echo "--- host kernel settings after the attacks (expect unchanged)" | tee -a "$out/attacks.txt"
  cat /proc/sys/kernel/core_pattern | tee -a "$out/attacks.txt"
  [ -n "${OUT:-}" ] && cp "$out/attacks.txt" "$OUT/"
fi
if want fresh; then
  echo "=== fresh values: edge-case sets, rotation with re-checks, guard regions" | tee "$out/fresh.txt"
  # One `atrex eval` of FILE on OP at SHAPES in timing MODE; prints one line per record.
  fresh_eval() {
    local file=$1 op=$2 shapes=$3 mode=$4 tag=$5
    timeout 300 "$atrex" eval "$file" --operator "$op" --shapes "$shapes" --timing-mode "$mode" \
      --unseen-shapes 0 --seeds 2 --out "$out/fresh-$tag-$mode.jsonl" > /dev/null 2>&1
    python3 -c 'import json,sys
for line in open(sys.argv[1]):
    r=json.loads(line); print(sys.argv[2], r["shape_id"], r["status"], "edge_case=" + repr(r.get("edge_case")), (r.get("timing") or {}).get("time_us_median"), r["error"][:300])' \
      "$out/fresh-$tag-$mode.jsonl" "$tag $mode" 2>&1 | tee -a "$out/fresh.txt"
  }
  for spec in "topk_filter_edge_keeps_exactly_k topk_filter 3,7,2" \
      "paged_attention_decode_edge_ignores_block_table paged_attention_decode 5,0,3" \
      "reshape_and_cache_edge_ignores_slot_mapping reshape_and_cache 1,3"; do
    set -- $spec
    fresh_eval "kernels/faults/$1.cu" "$2" "$3" auto "$1"
    fresh_eval "kernels/reference/$2/naive.cu" "$2" "$3" auto "$2-reference"
  done
  for mode in auto graph eager; do
    fresh_eval kernels/faults/rms_norm_guard_writes_out_of_bounds.cu rms_norm 15,5 "$mode" guard-overrun-1
    sed 's/^#define ATTACK_OVERRUN 1/#define ATTACK_OVERRUN 7/' kernels/faults/rms_norm_guard_writes_out_of_bounds.cu > /tmp/rms_norm_guard_7.cu
    fresh_eval /tmp/rms_norm_guard_7.cu rms_norm 15,5 "$mode" guard-overrun-7
    sed 's/^#define ATTACK_BEFORE 0/#define ATTACK_BEFORE 1/' kernels/faults/rms_norm_guard_writes_out_of_bounds.cu > /tmp/rms_norm_guard_before.cu
    fresh_eval /tmp/rms_norm_guard_before.cu rms_norm 15,5 "$mode" guard-before
    fresh_eval kernels/faults/rms_norm_correct.cu rms_norm 15,5,0 "$mode" rms_norm-correct
  done
  echo "--- cpu attacks on this host" | tee -a "$out/fresh.txt"
  fresh_eval kernels/faults/rms_norm_replays_by_content.cpp rms_norm 5 eager replay-by-content
  fresh_eval kernels/faults/topk_filter_edge_keeps_exactly_k.cpp topk_filter 3 eager topk-keeps-k-cpu
  [ -n "${OUT:-}" ] && cp "$out/fresh.txt" "$OUT/"
fi
if want python; then
  echo "=== python: Python candidates (Triton and torch) through the gates" | tee "$out/python.txt"
  export ATREX_PYTHON="${ATREX_PYTHON:-/opt/torch/.venv/bin/python3}"
  "$ATREX_PYTHON" -c 'import sys, sysconfig, torch, triton; print("site:", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "LIBDIR", sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME"))' 2>&1 | tee -a "$out/python.txt"
  # One line per record: shape, status, median us, S_j, dsl_share, the first kernels, the error.
  py_table() {
    python3 -c 'import json,sys
for line in open(sys.argv[1]):
    r=json.loads(line); t=r.get("timing") or {}
    ks=sorted(t.get("kernels") or [], key=lambda k: -k.get("share",0))[:2]
    print(sys.argv[2], r["shape_id"], r["status"], t.get("time_us_median"), r.get("s_j"), "dsl_share=%s" % r.get("dsl_share"),
          t.get("cupti_fallback","")[:60], [(k.get("name","")[:40], round(k.get("share",0),3), k.get("own")) for k in ks], r["error"][:300])' "$1" "$2" 2>&1 | tee -a "$out/python.txt"
  }
  for op in rms_norm silu_and_mul; do
    t0=$(date +%s)
    timeout 150 "$atrex" eval "kernels/python/$op/generated_kernel.py" --operator "$op" --backend cuda --shapes "${PY_SHAPES:-all}" \
      --seeds 2 --out "$out/python-$op.jsonl" 2>&1 | tee -a "$out/python.txt" || rc=1
    echo "--- $op triton: $(( $(date +%s) - t0 )) s wall" | tee -a "$out/python.txt"
    py_table "$out/python-$op.jsonl" "$op-triton"
  done
  timeout 40 "$atrex" eval kernels/faults/python/rms_norm_torch.py --operator rms_norm --backend cuda --shapes 15,5 --seeds 2 \
    --out "$out/python-rms_norm-torch.jsonl" 2>&1 | grep -v '^  shape ' | tee -a "$out/python.txt" || rc=1
  py_table "$out/python-rms_norm-torch.jsonl" rms_norm-torch-cuda
  for cand in "kernels/python/rms_norm/generated_kernel.py" ""; do
    echo "--- bench eval rms_norm ${cand:-native CUDA template}" | tee -a "$out/python.txt"
    timeout 60 "$atrex" bench eval --operator rms_norm --backend cuda --shapes "${PY_BENCH_SHAPES:-smallest:2}" ${cand:+--candidate "$cand"} 2>&1 \
      | tee -a "$out/python.txt" || rc=1
  done
  [ -n "${OUT:-}" ] && cp "$out/python.txt" "$OUT/"
fi
if want sandboxBench; then
  echo "=== sandbox: atrex bench eval, sandbox on vs off, twice each (target: within 10%)" | tee "$out/sandbox-bench.txt"
  for op in ${SANDBOX_BENCH_OPS:-fused_add_rms_norm l2_norm}; do
    for mode in bwrap none bwrap none; do
      flag=(); [ "$mode" = none ] && flag=(--no-sandbox)
      echo "--- $op sandbox $mode" | tee -a "$out/sandbox-bench.txt"
      "$atrex" bench eval --operator "$op" "${flag[@]}" 2>&1 | tee -a "$out/sandbox-bench.txt" || rc=1
    done
  done
  [ -n "${OUT:-}" ] && cp "$out/sandbox-bench.txt" "$OUT/"
fi
if named arenaAttacks; then
  # The attack round on the device arena (kernels/faults/arena_attacks/README.md: what each
  # candidate tries and the verdict predicted; ARENA_ATTACK_GROUPS="base A" etc. to split it
  # over calls of 10 minutes).
  echo "=== attacks on the judge's device arena (kernels/faults/arena_attacks, groups ${ARENA_ATTACK_GROUPS:-all})"
  OUT="$out/arena-attacks" bash "$root/kernels/faults/arena_attacks/run.sh" ${ARENA_ATTACK_GROUPS:-} || rc=1
  [ -n "${OUT:-}" ] && cp "$out/arena-attacks/results.txt" "$OUT/arena-attacks.txt"
fi
if named strayAttacks; then
  # The attack round on the stray-work and drain rules (kernels/faults/stray_attacks/README.md:
  # what each candidate tries, the attacker's prediction and the maintainers' after the fixes).
  echo "=== attacks on the rules for device work outside the timed calls (kernels/faults/stray_attacks)"
  OUT="$out/stray-attacks" bash "$root/kernels/faults/stray_attacks/run.sh" || rc=1
  [ -n "${OUT:-}" ] && cp "$out/stray-attacks/results.txt" "$OUT/stray-attacks.txt"
fi
if named arenaBench; then
  echo "=== the judge's device arena: atrex bench eval, the arena (the default) vs memfd copies (ATREX_DEVICE_ARENA=0), twice each" | tee "$out/arena-bench.txt"
  for op in ${ARENA_BENCH_OPS:-fused_add_rms_norm l2_norm}; do
    for mode in arena copies arena copies; do
      echo "--- $op $mode" | tee -a "$out/arena-bench.txt"
      if [ "$mode" = arena ]; then setting=(env -u ATREX_DEVICE_ARENA); else setting=(env ATREX_DEVICE_ARENA=0); fi
      "${setting[@]}" "$atrex" bench eval --operator "$op" 2>&1 | tee -a "$out/arena-bench.txt" || rc=1
    done
  done
  [ -n "${OUT:-}" ] && cp "$out/arena-bench.txt" "$OUT/"
fi
if want xcheck; then
  echo "=== xcheck: CUDA references vs independent PyTorch implementations"
  deploy/gpu/xcheck.sh || rc=1
  cp /tmp/atrex-xcheck.txt "$out/xcheck.txt" 2>/dev/null
fi
# The template families' own runs (deploy/gpu/steps/): named steps only, arguments after `--`.
if named moe; then
  echo "=== MoE-family CUDA templates (steps/moe-templates.sh ${step_args[*]})"
  bash "$root/deploy/gpu/steps/moe-templates.sh" "${step_args[@]}" || rc=1
fi
if named checkCost; then
  echo "=== the checks' cost on large shapes (steps/check-cost.sh ${step_args[*]})"
  bash "$root/deploy/gpu/steps/check-cost.sh" "${step_args[@]}" || rc=1
fi
if named deltaNorm; then
  echo "=== delta-rule and norm CUDA templates (steps/delta-norm-templates.sh ${step_args[*]})"
  bash "$root/deploy/gpu/steps/delta-norm-templates.sh" "${step_args[@]}" || rc=1
fi
if named tailVariants; then
  echo "=== long-tail CUDA templates on variant shapes (steps/tail-variants.sh ${step_args[*]})"
  bash "$root/deploy/gpu/steps/tail-variants.sh" "${step_args[@]}" || rc=1
fi
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/gpu-run.tar.gz" -C "$out" .
  cp "$out"/*.txt "$OUT"/ 2>/dev/null
fi
exit $rc
