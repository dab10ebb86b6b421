#!/usr/bin/env bash
# One night of the nightly regression benchmark (docs/reports.md "Nightly"):
#   1. re-measure the fixed kernels of sweeps/nightly.yaml (the reference candidates, and with
#      ATREX_NIGHTLY_KERNELS_FROM the best kernel per operator of that sweep) into
#      $ATREX_NIGHTLY_ROOT/<night>/, on this machine (`sweep run`) or, with ATREX_NIGHTLY_REDIS,
#      on the cluster (`sweep submit --launcher slurm` + `sweep wait`);
#   2. `atrex regress` it against the previous nights that completed (up to
#      ATREX_NIGHTLY_BASELINES of them) into <night>/regress/ (regress.md, regress.json,
#      regress-junit.xml);
#   3. delete night folders beyond the newest ATREX_NIGHTLY_KEEP.
# Started by deploy/nightly/atrex-nightly.service (systemd timer) or deploy/slurm/nightly.scrontab.
#
# Usage: atrex-nightly.sh [ENV_FILE]   (ENV_FILE: KEY=VALUE lines, e.g. /etc/atrex/nightly.env)
# Settings (environment, or ENV_FILE):
#   ATREX_NIGHTLY_ROOT        folder of the nights (required)
#   ATREX_BIN                 the atrex binary (default: atrex on PATH)
#   ATREX_NIGHTLY_SWEEP       the sweep file (default: sweeps/nightly.yaml next to this script's
#                             checkout, else /usr/share/atrex/sweeps/nightly.yaml)
#   ATREX_NIGHTLY_KERNELS_FROM  a results folder whose best kernels are re-measured too
#   ATREX_NIGHTLY_KEEP        night folders kept (default 14; at least 2)
#   ATREX_NIGHTLY_BASELINES   previous nights compared against (default 3)
#   ATREX_NIGHTLY_REDIS       cluster mode: the Redis URL for `sweep submit` (launcher slurm)
#   ATREX_NIGHTLY_TIMEOUT_S   cluster mode: `sweep wait --timeout` (default 39600)
#   ATREX_NIGHTLY_ARGS        extra arguments of `sweep run` / `sweep submit` (word-split)
#   ATREX_NIGHTLY_REGRESS_ARGS  extra arguments of `atrex regress` (thresholds, --alpha ...)
#   ATREX_SWEEP_NIGHT         the night's name (default: today's UTC date, YYYY-MM-DD)
#   ATREX_SWEEP_*             passed on to the sweep file (docs/sweeps.md "Variables")
# Exit code: the sweep's when it failed (2 bad input, 130/143 interrupted); else regress's:
# 0 no regression (or no previous night yet), 1 a regression, 2 bad input.
set -euo pipefail

die() { echo "atrex-nightly: $*" >&2; exit 2; }

if [[ $# -gt 1 ]]; then die "usage: atrex-nightly.sh [ENV_FILE]"; fi
if [[ $# -eq 1 ]]; then
  [[ -r $1 ]] || die "$1: cannot read the settings file"
  set -a
  # shellcheck disable=SC1090
  source "$1"
  set +a
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${ATREX_NIGHTLY_ROOT:-}
[[ -n $root ]] || die "ATREX_NIGHTLY_ROOT is not set (the folder that holds the nights)"
atrex=${ATREX_BIN:-atrex}
command -v "$atrex" >/dev/null || die "ATREX_BIN: $atrex not found"
sweep=${ATREX_NIGHTLY_SWEEP:-}
if [[ -z $sweep ]]; then
  if [[ -f $here/../../sweeps/nightly.yaml ]]; then sweep=$here/../../sweeps/nightly.yaml
  else sweep=/usr/share/atrex/sweeps/nightly.yaml; fi
fi
[[ -f $sweep ]] || die "ATREX_NIGHTLY_SWEEP: $sweep not found"
keep=${ATREX_NIGHTLY_KEEP:-14}
baselines=${ATREX_NIGHTLY_BASELINES:-3}
[[ $keep =~ ^[0-9]+$ && $keep -ge 2 ]] || die "ATREX_NIGHTLY_KEEP: expected an integer >= 2, got '$keep'"
[[ $baselines =~ ^[0-9]+$ && $baselines -ge 1 ]] ||
  die "ATREX_NIGHTLY_BASELINES: expected an integer >= 1, got '$baselines'"
night=${ATREX_SWEEP_NIGHT:-$(date -u +%F)}
[[ $night =~ ^[A-Za-z0-9._-]+$ ]] || die "ATREX_SWEEP_NIGHT: '$night' is not a plain folder name"
export ATREX_SWEEP_NIGHT=$night
mkdir -p "$root"
root=$(cd "$root" && pwd)
out=$root/$night

read -r -a extra <<<"${ATREX_NIGHTLY_ARGS:-}"
read -r -a regress_extra <<<"${ATREX_NIGHTLY_REGRESS_ARGS:-}"
kernels=()
if [[ -n ${ATREX_NIGHTLY_KERNELS_FROM:-} ]]; then kernels=(--kernels-from "$ATREX_NIGHTLY_KERNELS_FROM"); fi

echo "atrex-nightly: night $night -> $out"
rc=0
if [[ -n ${ATREX_NIGHTLY_REDIS:-} ]]; then
  "$atrex" sweep submit "$sweep" --redis "$ATREX_NIGHTLY_REDIS" --launcher slurm --out "$out" \
    "${kernels[@]}" "${extra[@]}" || rc=$?
  if [[ $rc -eq 0 ]]; then
    "$atrex" sweep wait "$out" --timeout "${ATREX_NIGHTLY_TIMEOUT_S:-39600}" || rc=$?
  fi
else
  "$atrex" sweep run "$sweep" --out "$out" "${kernels[@]}" "${extra[@]}" || rc=$?
fi
if [[ $rc -ne 0 ]]; then
  echo "atrex-nightly: the sweep of $night ended with exit code $rc; no comparison" >&2
  exit "$rc"
fi

# Night folders: the entries of $root holding a manifest.json, oldest first (names sort by
# date). Only those with a report.json (a sweep that finished) serve as baselines.
nights=()
for d in "$root"/*/; do
  d=${d%/}
  [[ -f $d/manifest.json ]] && nights+=("$d")
done
previous=()
for d in "${nights[@]}"; do
  [[ $d != "$out" && $(basename "$d") < $night && -f $d/report.json ]] && previous+=("$d")
done
if [[ ${#previous[@]} -gt $baselines ]]; then previous=("${previous[@]: -$baselines}"); fi

status=0
if [[ ${#previous[@]} -eq 0 ]]; then
  echo "atrex-nightly: no earlier night in $root to compare with; $night is the first baseline"
else
  "$atrex" regress --baseline "${previous[@]}" --current "$out" --out "$out/regress" \
    "${regress_extra[@]}" >/dev/null || status=$?
  case $status in
    0) echo "atrex-nightly: no regression against ${#previous[@]} night(s) ($out/regress/regress.md)" ;;
    1) echo "atrex-nightly: REGRESSION against ${#previous[@]} night(s): $out/regress/regress.md" >&2 ;;
    *) echo "atrex-nightly: atrex regress failed (exit code $status)" >&2 ;;
  esac
fi

# Keep the newest $keep nights (this one included); never anything without a manifest.json.
if [[ ${#nights[@]} -gt $keep ]]; then
  for d in "${nights[@]:0:${#nights[@]}-keep}"; do
    [[ $d == "$out" ]] && continue
    echo "atrex-nightly: removing $d (keeping the newest $keep nights)"
    rm -rf -- "$d"
  done
fi
exit "$status"
