#!/usr/bin/env bash
# Installs everything atrex needs to build and test, from Debian 12 (bookworm) packages.
# Idempotent; needs root (uses sudo when run as another user). Daemons are not started here:
# tests start their own redis-server on loopback; deploy/cluster-in-a-box.sh starts the
# single-node Slurm (munge + slurmctld + slurmd) and the Redis that the Slurm tests use.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo -E bash "$0" "$@"; fi
  echo "install-deps.sh: run as root (or install sudo)" >&2
  exit 1
fi

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates
  # libraries (docs/architecture.md / docs/architecture.md "Dependencies")
  nlohmann-json3-dev zlib1g-dev libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev libexpected-dev
  libdlpack-dev libssl-dev libgtest-dev libgmock-dev libhiredis-dev
  # the evaluation sandbox (docs/evaluation.md "Sandbox"): bubblewrap runs every evaluation
  # child in its own namespaces; libseccomp builds the child's syscall filter
  bubblewrap libseccomp-dev
  # Boost 1.74 headers: Beast/Asio HTTP client (common/http), header-only
  libboost-dev
  # prometheus-cpp 1.0.1: the metric registry (core) and the /metrics endpoint (pull)
  prometheus-cpp-dev
  # servers the tests start on loopback
  redis-server redis-tools
  # single-node Slurm 22.05 for cluster-in-a-box (no accounting daemon: sacct is optional)
  munge slurm-wlm slurmctld slurmd slurm-client
  # Prometheus 2.42 (with promtool) for the cluster in a box and the metrics tests (rules are
  # checked with promtool; a sweep's metrics are queried from a real server); curl for its probes
  prometheus curl
  # test and debug helpers; iproute2's `ip netns` makes the multi-host test's hosts
  # (deploy/netns-hosts.sh)
  procps iproute2
  # headless Chromium renders the HTML report in its test (scoring/tests/html_chromium_test.cpp:
  # plots laid out, no script errors, sorting) and takes the docs/ screenshot
  chromium
  # openssl makes the certificates of the Redis TLS tests (common/tests/redis_tls_test.cpp)
  openssl
  # HIP backend (HIP 5.2.3): hipcc compiles .hip candidates (pulls clang-15, lld-15,
  # rocm-device-libs), libamdhip64-dev is the runtime atrex-eval-hip links. No AMD GPU is needed
  # to compile; CI runs only the compile and the "no AMD GPU" paths. 26 packages, 66 MB of .debs
  # (5 s to download, 25 s to install on 2 cores), 353 MB on disk.
  hipcc libamdhip64-dev
  # Python candidates (docs/python-candidates.md): python3-dev has the headers the embedding
  # layer (libatrex-python-shim.so, stable ABI 3.11) is compiled against and the shared
  # libpython3.11 the evaluation child loads; python3-torch (torch 1.13, CPU) runs the
  # PyTorch-only candidates of the cpu backend's tests. Measured on the loaded 2-core dev VM
  # with recommends: 3 min 3 s to download and install (torch and its numpy/scipy stack).
  python3-dev python3-torch
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA backend is built when nvcc is found (CUDACXX, /usr/local/cuda/bin/nvcc or PATH);
# without it atrex builds and runs on the CPU backend.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps.sh: nvcc found: the CUDA backend will be built"
else
  echo "install-deps.sh: no nvcc: the CUDA backend is skipped (CPU backend only)"
fi
# hipcc --version without --offload-arch asks rocm_agent_enumerator for GPUs (a Python traceback
# on a machine without one); atrex always passes the arch.
echo "install-deps.sh: $(hipcc --version --offload-arch=gfx90a 2>/dev/null | head -1): the HIP backend compiles here (runs only on an AMD GPU)"
echo "install-deps.sh: dependencies ready"
