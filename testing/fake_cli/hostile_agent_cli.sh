#!/bin/bash
# A HOSTILE coding-agent CLI for the `cli` provider's session limits (agent/src/cli/sandbox.h
# run_cli_session, docs/agents.md "The sandbox"): what a model rewarded for score, or simply a
# runaway agent, can do to the worker beyond reading files (testing/fake_cli/fake_agent_cli.sh's
# *adversarial* probes cover reads, writes and ports). Each attack is bounded so that a test
# that finds the limit missing does not take the host down with it.
#   --fork N           start N background processes (sleep) and count those that started:
#                      `forks=K last=<error>`; expected: the session's cgroup task limit
#   --fill MIB         write MIB MiB into /workspace in 64 MiB files (the worker's disk):
#                      expected: the session is killed at the workspace limit
#   --tmp MIB          write MIB MiB into /tmp (the sandbox's tmpfs: memory): `tmp_mib=K`
#   --leave MARKER     leave a process behind (setsid, nohup) whose command line holds MARKER:
#                      expected: it dies with the session's PID namespace
#   --nested-userns    try to make a user namespace of its own (`unshare -U`, the first step of most
#                      kernel privilege escalations): `userns=ALLOWED|denied (...)`
#   --sysctl           open the host's kernel.core_pattern for writing (nothing written):
#                      `sysctl core_pattern: ALLOWED|denied (...)`
#   --tamper           try to replace the gateway tool, remove the evaluation socket and write
#                      into /run/atrex: `tamper <what>: denied|ALLOWED`
# Lines go to stdout; the test reads the session's output file.
set -u
forks=0 fill=0 tmp=0 leave="" userns=0 tamper=0 sysctl=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fork) forks=$2; shift 2 ;;
    --fill) fill=$2; shift 2 ;;
    --tmp) tmp=$2; shift 2 ;;
    --leave) leave=$2; shift 2 ;;
    --nested-userns) userns=1; shift ;;
    --tamper) tamper=1; shift ;;
    --sysctl) sysctl=1; shift ;;
    *) shift ;;
  esac
done

if [ -n "$leave" ]; then
  setsid nohup bash -c "exec -a 'sleep-$leave' sleep 600" >/dev/null 2>&1 &
  echo "left behind: sleep-$leave"
fi

if [ "$userns" = 1 ]; then
  if out=$(unshare -U true 2>&1); then echo "userns=ALLOWED"; else echo "userns=denied ($out)"; fi
fi

if [ "$sysctl" = 1 ]; then
  python3 -c '
import os
try:
    os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))
    print("sysctl core_pattern: ALLOWED")
except OSError as e:
    print("sysctl core_pattern: denied (%s)" % e.strerror)
'
fi

if [ "$tamper" = 1 ]; then
  for what in "cp /bin/true /atrex/bin/atrex-eval" "rm -f /run/atrex/eval.sock" "touch /run/atrex/x"; do
    if out=$($what 2>&1); then echo "tamper $what: ALLOWED"; else echo "tamper $what: denied"; fi
  done
fi

if [ "$forks" -gt 0 ]; then
  # Python's os.fork fails at once with EAGAIN (bash would retry a failed fork for ~30 s).
  python3 - "$forks" <<'PY'
import errno, os, signal, sys, time
want, kids, last = int(sys.argv[1]), [], "none"
for _ in range(want):
    try:
        pid = os.fork()
    except OSError as e:
        last = errno.errorcode.get(e.errno, str(e.errno))
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
print(f"forks={len(kids)} last={last}", flush=True)
for pid in kids:
    os.kill(pid, signal.SIGKILL)
for pid in kids:
    os.waitpid(pid, 0)
PY
fi

if [ "$tmp" -gt 0 ]; then
  dd if=/dev/zero of=/tmp/hog bs=1M count="$tmp" 2>/dev/null
  echo "tmp_mib=$(( $(stat -c %s /tmp/hog 2>/dev/null || echo 0) >> 20 ))"
fi

if [ "$fill" -gt 0 ]; then
  done_mib=0
  while [ "$done_mib" -lt "$fill" ]; do
    dd if=/dev/zero of="/workspace/fill-$done_mib.bin" bs=1M count=64 2>/dev/null || break
    done_mib=$((done_mib + 64))
    echo "filled_mib=$done_mib"
  done
fi
echo "hostile agent done"
