#!/usr/bin/env bash
# On the GPU machine, first in a call that carried .gpu-bundle made by
# `ATREX_BUNDLE_BUILD=ci deploy/gpu/bundle.sh`: its stripped bin/ and share/ become build/ci
# (where the test binaries' compiled-in paths point) and build/release links to it (where
# run-gpu-checks.sh looks). Idempotent; a warm machine keeps the links between calls.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .gpu-bundle/bin ] || { echo "use-bundle.sh: no .gpu-bundle/bin (run bundle.sh with ATREX_BUNDLE_BUILD=ci)" >&2; exit 2; }
mkdir -p build/ci
rm -rf build/ci/bin build/ci/share build/release
ln -s "$PWD/.gpu-bundle/bin" build/ci/bin
ln -s "$PWD/.gpu-bundle/share" build/ci/share
ln -s ci build/release
echo "use-bundle.sh: build/ci -> .gpu-bundle ($(ls .gpu-bundle/bin | wc -l) binaries)"
