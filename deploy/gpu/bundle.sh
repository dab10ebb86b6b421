#!/usr/bin/env bash
# Prepares what a run on the lent GPU machine needs (built HERE, run THERE; see
# shared/notes/device-notes.md): the release build's bin/ and share/ folders, and the Debian
# shared libraries they link that the GPU image lacks or has under other sonames, copied into
# .gpu-bundle/lib. The device call then carries build/release/bin, build/release/share and
# .gpu-bundle, and runs deploy/gpu/run-gpu-checks.sh.
#
# ATREX_BUNDLE_BUILD=ci bundles the already built `ci` preset instead (RelWithDebInfo: one build
# serves the tests here and the GPU there, on a 2-core machine that cannot afford two): its bin/
# is copied stripped into .gpu-bundle/bin and its share/ into .gpu-bundle/share; the device call
# carries .gpu-bundle alone and starts with `bash deploy/gpu/use-bundle.sh`, which puts them where
# the binaries and run-gpu-checks.sh look (build/ci and build/release). ATREX_BUNDLE_PRECOMPILE=0
# skips the compile-cache warm-up (the GPU machine then compiles on its own cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/${ATREX_BUNDLE_BUILD:-release}
[ "$build" = build/release ] && cmake --workflow --preset release >/dev/null
rm -rf .gpu-bundle
mkdir -p .gpu-bundle/lib
if [ "$build" != build/release ]; then
  mkdir -p .gpu-bundle/bin
  for bin in "$build"/bin/*; do
    # The programs and the `gpu` label's tests; not the other test binaries (hundreds of MiB).
    case "$(basename "$bin")" in *hip*) continue ;; atrex_runner_gpu_tests|atrex_openai_gpu_tests) ;;
      atrex_*) continue ;; esac
    [ -f "$bin" ] || continue
    if file -b "$bin" | grep -q ELF; then strip --strip-debug -o ".gpu-bundle/bin/$(basename "$bin")" "$bin"
    else cp -p "$bin" .gpu-bundle/bin/; fi
  done
  cp -r "$build/share" .gpu-bundle/share
  bundled_bins=.gpu-bundle/bin
fi
# Everything the binaries load except the C runtime, libstdc++/libgcc (newer there) and CUDA
# (runtime, cuBLAS: the same CUDA 13.0 release is installed there). The HIP binaries are left out
# (the GPU machine is NVIDIA; the ROCm runtime alone is 17 MiB of the 64 MiB a call may carry).
for bin in "${bundled_bins:-$build/bin}"/*; do
  case "$(basename "$bin")" in *hip*) continue ;; esac
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnvidia-ml)\.so' |
  while read -r lib; do cp -L "$lib" .gpu-bundle/lib/; done
# bubblewrap for the evaluation sandbox (docs/evaluation.md "Sandbox"): the GPU image may have
# none. atrex looks for bwrap next to its children (after $ATREX_BWRAP, before PATH); its
# libraries (libselinux, libcap, libpcre2) go with the others.
# (Left alone when it is the same file: a running sandbox keeps it busy.)
cmp -s "$(command -v bwrap)" "$build"/bin/bwrap || cp -L "$(command -v bwrap)" "$build"/bin/bwrap
[ "$build" != build/release ] && cp -L "$(command -v bwrap)" .gpu-bundle/bin/bwrap
ldd "$(command -v bwrap)" | awk '/=> \// {print $3}' | grep -Ev '/(libc|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" .gpu-bundle/lib/; done
# redis-server for the `daemon` step (the GPU image has none), with the libraries it links in a
# folder of its own so that they never shadow the GPU image's for other programs.
mkdir -p .gpu-bundle/redis
cp -L "$(command -v redis-server)" .gpu-bundle/redis/
ldd "$(command -v redis-server)" | awk '/=> \// {print $3}' |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" .gpu-bundle/redis/; done
du -sh "$build"/bin "$build"/share .gpu-bundle | sed 's/^/bundle: /'
ls .gpu-bundle/lib
[ "${ATREX_BUNDLE_PRECOMPILE:-1}" = 0 ] && exit 0
# Compile every CUDA template and reference candidate here (nvcc 13.0 on both machines; the cache
# key leaves out the include folder's path), so the GPU machine starts with a warm compile cache.
find kernels/templates kernels/reference -name '*.cu' -print0 |
  ATREX_CACHE_DIR=.gpu-bundle/cache xargs -0 -n 4 -P 2 "$build"/bin/atrex compile --arch sm_90a |
  sed 's/^/precompile: /'
