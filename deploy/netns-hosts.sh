#!/usr/bin/env bash
# Three test "hosts" on one machine, made of network namespaces: <prefix>-a, <prefix>-b and
# <prefix>-c with the addresses <subnet>.1, .2 and .3 of a private /24, each with loopback up
# and one interface `eth0` cabled (veth) to a bridge that lives in a fourth namespace,
# <prefix>-sw. Nothing of that network is in the root namespace (no interface, address or
# route), so traffic between the hosts never leaves the namespaces and the root namespace
# cannot reach them. The multi-host test (tests/netns_test.cpp, ctest label `netns`) runs Redis
# on a and workers on b and c; by hand (docs/sweeps.md "Several hosts on one machine"):
#
#   deploy/netns-hosts.sh up
#   ip netns exec atrex-a redis-server --bind 10.77.0.1 --protected-mode no --appendonly yes \
#     --maxmemory-policy noeviction --dir "$(mktemp -d)" --daemonize yes
#   ip netns exec atrex-b atrex sweep submit tests/fixtures/crash_sweep.yaml --redis redis://10.77.0.1:6379 --out /tmp/s
#   ip netns exec atrex-c atrex runner --redis redis://10.77.0.1:6379 --sweep <sweep id> --name runner-c
#   deploy/netns-hosts.sh down
#
# usage: netns-hosts.sh up|down|status|check [--prefix P] [--subnet A.B.C]
#   --prefix  namespace names are P-a, P-b, P-c, P-sw (default $ATREX_NETNS_PREFIX, else atrex)
#   --subnet  the first three octets of the /24 (default $ATREX_NETNS_SUBNET, else 10.77.0)
#   up      creates them (removing leftovers of the same prefix first)
#   down    removes them by name; their veth pairs and bridge go with them. Processes still
#           running inside keep their (now unnamed) namespace until they exit: stop them first.
#   status  lists them with their addresses; exit 1 when one is missing
#   check   creates and removes one throwaway namespace; exit 1 with the reason when network
#           namespaces cannot be made here (not root, no CAP_SYS_ADMIN + CAP_NET_ADMIN, no ip)
# Needs root and iproute2 (deploy/install-deps.sh installs it).
set -Eeuo pipefail

PREFIX=${ATREX_NETNS_PREFIX:-atrex}
SUBNET=${ATREX_NETNS_SUBNET:-10.77.0}
HOSTS=(a b c)  # host i (from 1) gets <subnet>.i

say() { echo "netns-hosts: $*"; }
die() { echo "netns-hosts: $*" >&2; exit 1; }
usage() { die "usage: $0 up|down|status|check [--prefix P] [--subnet A.B.C]"; }

CMD=${1:-}
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || usage; PREFIX=$2; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --subnet) [ $# -ge 2 ] || usage; SUBNET=$2; shift 2 ;;
    --subnet=*) SUBNET=${1#*=}; shift ;;
    *) usage ;;
  esac
done
[[ $PREFIX =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$ ]] || die "--prefix: expected 1-40 of [A-Za-z0-9_.-]; got \"$PREFIX\""
octet='(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])'
[[ $SUBNET =~ ^$octet\.$octet\.$octet$ ]] || die "--subnet: expected three octets like 10.77.0; got \"$SUBNET\""

SWITCH="$PREFIX-sw"
ns_of() { echo "$PREFIX-$1"; }
ns_exists() { [ -e "/run/netns/$1" ]; }

preflight() {
  command -v ip >/dev/null 2>&1 || die "ip not found: install iproute2 (deploy/install-deps.sh)"
  [ "$(id -u)" -eq 0 ] || die "needs root (ip netns add mounts under /run/netns and needs CAP_SYS_ADMIN + CAP_NET_ADMIN)"
}

down() {
  local ns
  for ns in "$(ns_of a)" "$(ns_of b)" "$(ns_of c)" "$SWITCH"; do
    if ns_exists "$ns"; then ip netns delete "$ns"; fi
  done
}

up() {
  preflight
  down
  trap 'rc=$?; down; die "up failed (exit $rc); removed what it had created"' ERR
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link set dev lo up
  ip -n "$SWITCH" link add name br0 type bridge
  ip -n "$SWITCH" link set dev br0 up
  local i=0 h ns
  for h in "${HOSTS[@]}"; do
    i=$((i + 1))
    ns=$(ns_of "$h")
    ip netns add "$ns"
    ip -n "$ns" link set dev lo up
    # Both ends are made inside the switch namespace, then one is moved: no name is ever taken
    # in the root namespace, so several prefixes can be up at once.
    ip -n "$SWITCH" link add name "port-$h" type veth peer name "eth0-$h"
    ip -n "$SWITCH" link set dev "eth0-$h" netns "$ns"
    ip -n "$ns" link set dev "eth0-$h" name eth0
    ip -n "$ns" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$ns" link set dev eth0 up
    ip -n "$SWITCH" link set dev "port-$h" master br0
    ip -n "$SWITCH" link set dev "port-$h" up
  done
  trap - ERR
  say "up: $(ns_of a) $SUBNET.1, $(ns_of b) $SUBNET.2, $(ns_of c) $SUBNET.3 (bridge br0 in $SWITCH)"
}

status() {
  local h ns missing=0 i=0
  for h in "${HOSTS[@]}"; do
    i=$((i + 1))
    ns=$(ns_of "$h")
    if ns_exists "$ns"; then
      say "$ns: $(ip -n "$ns" -4 -brief addr show dev eth0 2>/dev/null | awk '{print $3}') (expected $SUBNET.$i/24)"
    else
      say "$ns: missing"; missing=1
    fi
  done
  if ns_exists "$SWITCH"; then say "$SWITCH: bridge br0"; else say "$SWITCH: missing"; missing=1; fi
  return "$missing"
}

check() {
  preflight
  local probe err
  probe="$PREFIX-check-$$"
  if ! err=$(ip netns add "$probe" 2>&1); then die "cannot create a network namespace: $err"; fi
  if ! err=$(ip -n "$probe" link set dev lo up 2>&1); then
    ip netns delete "$probe" || true
    die "cannot configure a network namespace: $err"
  fi
  ip netns delete "$probe"
  say "network namespaces can be made here"
}

case $CMD in
  up) up ;;
  down) preflight; down; say "down: $(ns_of a), $(ns_of b), $(ns_of c), $SWITCH removed" ;;
  status) status ;;
  check) check ;;
  *) usage ;;
esac
