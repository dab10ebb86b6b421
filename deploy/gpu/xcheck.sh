#!/usr/bin/env bash
# Cross-check of every operator's CUDA reference against an independent PyTorch implementation
# (deploy/gpu/xcheck.py, docs/evaluation.md "Cross-check against PyTorch"). Runs on the GPU
# machine from the repository root with the release build in build/release/bin:
#   for each operator: `atrex problems dump OP --shapes xcheck --backend cuda` (smallest, middle
#   and largest shape by input elements) into /tmp, recompute the outputs with torch on the GPU,
#   print one row per shape, delete the dumps (one operator at a time bounds the disk used).
# The table is teed into $OUT/xcheck.txt when OUT is set. Exit code 1 when any row fails.
# Usage: deploy/gpu/xcheck.sh [extra xcheck.py flags, e.g. --operators rms_norm,l2_norm]
# XCHECK_MAX_INPUT_MIB caps the shapes' input size (default 2048 MiB: larger shapes are skipped
# and listed at the end) to keep the run within a few minutes.
set -uo pipefail
root=$(pwd)
export LD_LIBRARY_PATH="$root/.gpu-bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
python=${PYTHON:-python3}
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "xcheck: $python cannot import torch; set PYTHON to an interpreter that has it" >&2
  exit 2
fi
work=/tmp/atrex-xcheck
log=/tmp/atrex-xcheck.txt
"$python" "$root/deploy/gpu/xcheck.py" --atrex "$root/build/release/bin/atrex" --backend cuda --shapes xcheck \
  --max-input-mib "${XCHECK_MAX_INPUT_MIB:-2048}" --work "$work" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
rm -rf "$work"
[ -n "${OUT:-}" ] && cp "$log" "$OUT/xcheck.txt"
exit "$rc"
