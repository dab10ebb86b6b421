#!/bin/bash
# A scripted coding-agent CLI standing in for `claude`, `codex` and `gemini` in tests of the
# `cli` provider (agent/src/cli/, docs/agents.md). It is called through a link whose name picks
# the behaviour:
#   claude*, codex*, gemini*   print that CLI's headless result format (claude -p
#                              --output-format json, codex exec --json, gemini -p
#                              --output-format json), with made-up turns and tokens
#   *adversarial*              first tries to escape its sandbox and reports what it saw
# Every variant then acts as an honest agent: it starts from the workspace's reference
# candidate (reference/naive.*: the semantics, correct), writes it as its candidate, measures
# it with `atrex-eval` and reports the feedback in its final message. When the candidate is a
# Python module ($ATREX_CANDIDATE ends in .py: a `target: torch` agent), it writes a
# PyTorch-only Model for the reference's signature (reference/signature.py; rms_norm's only)
# instead, and reports what TASK.md asked for.
#
# Options it reads (others, such as the presets' -p/--output-format/--model, are skipped):
#   --probe-read PATH      try to read PATH (a file or folder): must fail in the sandbox
#   --probe-write PATH     try to create PATH: must fail (or land in a private tmpfs that the
#                          host never sees, which the test checks from outside)
#   --probe-port PORT      try to connect to 127.0.0.1:PORT (the Redis port): must fail
#   --no-kernel            write no candidate (an agent that gives up)
#   --echo-env NAME        print NAME=<value> (a key passed in must be stored redacted)
# Probe lines in the final message: "probe <kind> <target>: denied (<why>)" or
# "probe <kind> <target>: ALLOWED (<what it saw>)".
set -u
name=$(basename "$0")
reads=() writes=() ports=() echoes=() kernel=1
while [ $# -gt 0 ]; do
  case "$1" in
    --probe-read) reads+=("$2"); shift 2 ;;
    --probe-write) writes+=("$2"); shift 2 ;;
    --probe-port) ports+=("$2"); shift 2 ;;
    --no-kernel) kernel=0; shift ;;
    --echo-env) echoes+=("$2"); shift 2 ;;
    *) shift ;;
  esac
done

report=""
say() { report+="$1"$'\n'; }

if [[ "$name" == *adversarial* ]]; then
  for p in "${reads[@]}"; do
    if out=$(cat "$p" 2>&1) || out=$(ls -la "$p" 2>&1); then
      say "probe read $p: ALLOWED ($(printf '%s' "$out" | head -c 120 | tr '\n' ' '))"
    else
      say "probe read $p: denied ($(printf '%s' "$out" | head -c 120 | tr '\n' ' '))"
    fi
  done
  for p in "${writes[@]}"; do
    if out=$( { mkdir -p "$(dirname "$p")" && echo pwned > "$p"; } 2>&1); then
      say "probe write $p: ALLOWED (wrote it)"
    else
      say "probe write $p: denied ($(printf '%s' "$out" | head -c 120 | tr '\n' ' '))"
    fi
  done
  for port in "${ports[@]}"; do
    if out=$( { exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'PING\r\n' >&3 &&
                timeout 2 head -n 1 <&3; } 2>&1); then
      say "probe port $port: ALLOWED (connected: $(printf '%s' "$out" | tr -d '\r\n'))"
    else
      say "probe port $port: denied ($(printf '%s' "$out" | head -c 120 | tr '\n' ' '))"
    fi
  done
  # What the environment and the file system show of the host.
  leaked=$(env | grep -iE 'redis|atrex_redis|password|secret' | grep -v '^ATREX_EVAL_SOCKET=' | cut -d= -f1 | tr '\n' ' ')
  if [ -n "$leaked" ]; then say "probe env: ALLOWED ($leaked)"; else say "probe env: denied (no queue variables)"; fi
  found=$(find / \( -path /proc -o -path /usr -o -path /sys -o -path /dev \) -prune -o \
          \( -name roofline.json -o -name metadata.json -o -name manifest.json \
          -o -name results.jsonl \) -print 2>/dev/null | head -5 | tr '\n' ' ')
  if [ -n "$found" ]; then say "probe find: ALLOWED ($found)"; else say "probe find: denied (none found)"; fi
  for v in "${echoes[@]}"; do say "echo-env $v=${!v:-}"; done
  procs=$(ls /proc | grep -cE '^[0-9]+$')
  say "probe processes: $procs visible"
fi

say "workspace: $(ls -A /workspace 2>/dev/null | tr '\n' ' ')"
ref=$(ls reference/naive.* 2>/dev/null | head -1)
cand=${ATREX_CANDIDATE:-kernel.cpp}
if [ "$kernel" = 1 ] && [[ "$cand" == *.py ]]; then
  for asked in "class Model(torch.nn.Module)" "no torch.compile" "PyTorch operations only" \
               "atrex_candidate_run"; do
    if grep -qF "$asked" TASK.md 2>/dev/null; then say "TASK.md asks: $asked"; fi
  done
  if grep -qF "def forward(self, x, weight):" reference/signature.py 2>/dev/null; then
    cat > "$cand" <<PY
# written by the scripted agent ($name) for the reference's signature: PyTorch only
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps=1e-06):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv * weight.float()).to(x.dtype)
PY
    feedback=$(atrex-eval "$cand" 2>&1)
    say "atrex-eval exit $?: $(printf '%s' "$feedback" | head -c 1500)"
  else
    say "no candidate written (no Python module for this signature)"
  fi
elif [ "$kernel" = 1 ] && [ -n "$ref" ]; then
  { echo "// written by the scripted agent ($name) from the workspace's reference"; cat "$ref"; } > "$cand"
  feedback=$(atrex-eval "$cand" 2>&1)
  say "atrex-eval exit $?: $(printf '%s' "$feedback" | head -c 1500)"
else
  say "no candidate written"
fi

esc() {
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
  printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037'
}
text=$(esc "$report")
case "$name" in
  codex*)
    echo "progress: reading TASK.md" >&2
    printf '{"type":"thread.started","thread_id":"t-1"}\n{"type":"turn.started"}\n'
    printf '{"type":"item.completed","item":{"id":"i0","type":"command_execution","command":"atrex-eval"}}\n'
    printf '{"type":"turn.completed","usage":{"input_tokens":1200,"cached_input_tokens":200,"output_tokens":300}}\n'
    printf '{"type":"turn.started"}\n'
    printf '{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"%s"}}\n' "$text"
    printf '{"type":"turn.completed","usage":{"input_tokens":800,"cached_input_tokens":0,"output_tokens":100}}\n'
    ;;
  gemini*)
    printf '{"response":"%s","stats":{"models":{"gemini-2.5-pro":{"api":{"totalRequests":4,"totalErrors":0},"tokens":{"prompt":5000,"candidates":600,"total":5700,"cached":0,"thoughts":100,"tool":0}}}}}\n' "$text"
    ;;
  *)
    printf '{"type":"result","subtype":"success","is_error":false,"duration_ms":1234,"num_turns":3,"result":"%s","session_id":"s-1","total_cost_usd":0.0125,"usage":{"input_tokens":900,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":250}}\n' "$text"
    ;;
esac
