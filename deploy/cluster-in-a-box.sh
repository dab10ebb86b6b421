#!/usr/bin/env bash
# A cluster in a box on localhost, for tests and demos: munge + slurmctld + slurmd forming a
# single-node Slurm (partitions `cpu` and `gpu`; the node advertises fake GPUs as gres) and a
# redis-server (appendonly yes, maxmemory-policy noeviction) for cluster sweeps, and a Prometheus
# (loopback only, 1 s scrape interval) that discovers atrex workers through file_sd target files
# in $ATREX_CLUSTER_DIR/prometheus/targets/ (`atrex sweep submit --metrics 127.0.0.1:0
# --metrics-targets <that folder>`) and loads the recording/alert rules of dashboards/rules.yml.
#
#   deploy/cluster-in-a-box.sh start    start what is not running (idempotent); needs root
#   deploy/cluster-in-a-box.sh stop     cancel the box's jobs, stop the daemons by pid
#   deploy/cluster-in-a-box.sh status   what runs (exit 0 when everything is up, 3 otherwise)
#   deploy/cluster-in-a-box.sh env      the exports a shell needs:  eval "$(deploy/cluster-in-a-box.sh env)"
#
# Every config, pid, log and state file lives under one folder, ATREX_CLUSTER_DIR (default
# /tmp/atrex-cluster); nothing is written to /etc. No accounting daemon: job state comes from
# slurmctld (squeue/scontrol), so `sacct` reports "accounting storage is disabled" here.
# Settings (environment): ATREX_CLUSTER_DIR, ATREX_CLUSTER_REDIS_PORT (16379),
# ATREX_CLUSTER_SLURMCTLD_PORT (16817), ATREX_CLUSTER_SLURMD_PORT (16818),
# ATREX_CLUSTER_CPUS (CPU slots the node advertises, 16), ATREX_CLUSTER_GPUS (fake GPUs, 2),
# ATREX_CLUSTER_PROMETHEUS_PORT (19090).
# The ports differ from the Slurm/Redis defaults so the box does not clash with real ones.
#
# Facts this relies on (Slurm 22.05 / munge 0.5 on Debian 12, as root, no systemd):
# munged's socket folder must be mode 755; slurmd must run as `slurmd -N localhost`; a gres
# `File=` must name character devices (here mknod'ed with /dev/null's numbers, so without
# ConstrainDevices a job "gets" a GPU index in CUDA_VISIBLE_DEVICES but no device);
# SlurmdParameters=config_overrides lets the node advertise more CPU slots than it has.
set -euo pipefail

DIR=${ATREX_CLUSTER_DIR:-/tmp/atrex-cluster}
REDIS_PORT=${ATREX_CLUSTER_REDIS_PORT:-16379}
CTLD_PORT=${ATREX_CLUSTER_SLURMCTLD_PORT:-16817}
SLURMD_PORT=${ATREX_CLUSTER_SLURMD_PORT:-16818}
CPUS=${ATREX_CLUSTER_CPUS:-16}
GPUS=${ATREX_CLUSTER_GPUS:-2}
PROM_PORT=${ATREX_CLUSTER_PROMETHEUS_PORT:-19090}
PROM_URL=http://127.0.0.1:$PROM_PORT
RULES_FILE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/dashboards/rules.yml
SLURM_CONF_FILE=$DIR/slurm/slurm.conf
MUNGE_SOCKET=$DIR/munge/run/munge.socket.2
REDIS_URL=redis://127.0.0.1:$REDIS_PORT
DAEMONS=(munged slurmctld slurmd redis-server prometheus)  # start order; stop goes in reverse

die() { echo "cluster-in-a-box: error: $*" >&2; exit 1; }
say() { echo "cluster-in-a-box: $*"; }

# The pid of daemon $1 when it runs (pid file names a live process with that command name).
running_pid() {
  local f=$DIR/pids/$1.pid pid comm
  [ -s "$f" ] || return 1
  pid=$(tr -dc '0-9' <"$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
  [ "$comm" = "$1" ] || return 1
  echo "$pid"
}

# wait_for WHAT SECONDS LOG COMMAND...: polls COMMAND every 0.2 s; on timeout shows LOG's tail.
wait_for() {
  local what=$1 secs=$2 log=$3
  shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "cluster-in-a-box: error: $what not ready after ${secs}s; last lines of $log:" >&2
      tail -n 15 "$log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
}

need_commands() {
  local missing=()
  for c in munged munge unmunge slurmctld slurmd sinfo scontrol squeue scancel redis-server redis-cli mknod \
    prometheus promtool curl; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  [ "${#missing[@]}" -eq 0 ] || die "missing commands: ${missing[*]} (run deploy/install-deps.sh)"
}

write_if_changed() {  # write_if_changed FILE DAEMON: stdin -> FILE; refuses to change a running daemon's config
  local file=$1 daemon=$2 tmp
  tmp=$(mktemp "$file.XXXX")
  cat >"$tmp"
  if [ -f "$file" ] && cmp -s "$tmp" "$file"; then rm -f "$tmp"; return 0; fi
  if [ -f "$file" ] && running_pid "$daemon" >/dev/null; then
    rm -f "$tmp"
    die "$file would change but $daemon is running with the old one; run '$0 stop' first"
  fi
  mv "$tmp" "$file"
}

write_slurm_config() {
  local mem_mb
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  write_if_changed "$SLURM_CONF_FILE" slurmctld <<EOF
# Written by deploy/cluster-in-a-box.sh; regenerated on start.
ClusterName=atrex-box
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire=10: a requeued job may start again after ~30 s instead of ~135 s.
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$DIR/slurm/state
SlurmdSpoolDir=$DIR/slurm/spool
SlurmctldPidFile=$DIR/pids/slurmctld.pid
SlurmdPidFile=$DIR/pids/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
MailProg=/bin/true
# No accounting daemon: job state must not depend on it.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
# SIGTERM -> SIGKILL grace of a cancelled job: workers finish their current task within it.
KillWait=30
GresTypes=gpu
NodeName=localhost CPUs=$CPUS RealMemory=$mem_mb Gres=gpu:fake:$GPUS State=UNKNOWN
PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP
EOF
  write_if_changed "$DIR/slurm/gres.conf" slurmd <<EOF
AutoDetect=off
NodeName=localhost Name=gpu Type=fake File=$DIR/fakedev/nvidia[0-$((GPUS - 1))]
EOF
}

start_munge() {
  local pid
  if pid=$(running_pid munged); then say "munged already running (pid $pid)"; return; fi
  if [ ! -s "$DIR/munge/etc/munge.key" ]; then
    dd if=/dev/urandom of="$DIR/munge/etc/munge.key" bs=1 count=1024 status=none
    chmod 400 "$DIR/munge/etc/munge.key"
  fi
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  munged --key-file="$DIR/munge/etc/munge.key" --socket="$MUNGE_SOCKET" --pid-file="$DIR/pids/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/lib/munged.seed" --num-threads=4 ||
    die "munged did not start; see $DIR/log/munged.log"
  wait_for munge 20 "$DIR/log/munged.log" bash -c "munge -S '$MUNGE_SOCKET' -n | unmunge -S '$MUNGE_SOCKET'"
  say "munged started (pid $(running_pid munged))"
}

node_usable() {
  local state
  state=$(SLURM_CONF=$SLURM_CONF_FILE sinfo -h -N -n localhost -o %T 2>/dev/null | head -n 1)
  case "$state" in idle* | mixed* | allocated* | completing*) return 0 ;; *) return 1 ;; esac
}

start_slurm() {
  local pid
  export SLURM_CONF=$SLURM_CONF_FILE
  if pid=$(running_pid slurmctld); then
    say "slurmctld already running (pid $pid)"
  else
    slurmctld || die "slurmctld did not start; see $DIR/log/slurmctld.log"
    wait_for slurmctld 30 "$DIR/log/slurmctld.log" scontrol ping
    say "slurmctld started (pid $(running_pid slurmctld))"
  fi
  if pid=$(running_pid slurmd); then
    say "slurmd already running (pid $pid)"
  else
    slurmd -N localhost || die "slurmd did not start; see $DIR/log/slurmd.log"
    wait_for slurmd 20 "$DIR/log/slurmd.log" running_pid slurmd
    say "slurmd started (pid $(running_pid slurmd))"
  fi
  # A node left DOWN/DRAINED by an earlier run is put back into service.
  if ! node_usable; then
    sleep 1
    node_usable || scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true
  fi
  wait_for "the Slurm node" 30 "$DIR/log/slurmd.log" node_usable
}

start_redis() {
  local pid
  if pid=$(running_pid redis-server); then say "redis-server already running (pid $pid)"; return; fi
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes --daemonize yes \
    --pidfile "$DIR/pids/redis-server.pid" --logfile "$DIR/log/redis.log" --dir "$DIR/redis" \
    --appendonly yes --appendfsync everysec --save '' --maxmemory-policy noeviction ||
    die "redis-server did not start; see $DIR/log/redis.log"
  wait_for redis-server 20 "$DIR/log/redis.log" bash -c "redis-cli -p $REDIS_PORT ping | grep -q PONG"
  say "redis-server started (pid $(running_pid redis-server)) at $REDIS_URL"
}

write_prometheus_config() {
  write_if_changed "$DIR/prometheus/prometheus.yml" prometheus <<EOF
# Written by deploy/cluster-in-a-box.sh; regenerated on start.
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $RULES_FILE
scrape_configs:
  - job_name: atrex
    file_sd_configs:
      - files: ['$DIR/prometheus/targets/*.json']
        refresh_interval: 2s
EOF
}

# Prometheus does not daemonize: it runs in a session of its own with every descriptor
# redirected (a test harness's output pipe held open would never reach EOF), pid file by us.
start_prometheus() {
  local pid
  if pid=$(running_pid prometheus); then say "prometheus already running (pid $pid)"; return; fi
  promtool check config "$DIR/prometheus/prometheus.yml" >"$DIR/log/promtool.log" 2>&1 ||
    die "$DIR/prometheus/prometheus.yml is not valid; see $DIR/log/promtool.log"
  setsid prometheus --config.file="$DIR/prometheus/prometheus.yml" --storage.tsdb.path="$DIR/prometheus/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --storage.tsdb.retention.time=2d \
    </dev/null >>"$DIR/log/prometheus.log" 2>&1 &
  echo $! >"$DIR/pids/prometheus.pid"
  wait_for prometheus 30 "$DIR/log/prometheus.log" curl -sf "$PROM_URL/-/ready"
  say "prometheus started (pid $(running_pid prometheus)) at $PROM_URL; targets from $DIR/prometheus/targets/"
}

cmd_start() {
  [ "$(id -u)" -eq 0 ] || die "start needs root (slurmd runs jobs as their users; munged and slurmd run as root here)"
  need_commands
  mkdir -p "$DIR"/{pids,log,munge/etc,munge/run,munge/lib,slurm/state,slurm/spool,fakedev,redis,prometheus/targets}
  chmod 755 "$DIR" "$DIR/munge" "$DIR/munge/run"
  chmod 700 "$DIR/munge/etc" "$DIR/munge/lib"
  for ((i = 0; i < GPUS; i++)); do
    [ -c "$DIR/fakedev/nvidia$i" ] || { rm -f "$DIR/fakedev/nvidia$i"; mknod "$DIR/fakedev/nvidia$i" c 1 3; }
  done
  write_slurm_config
  start_munge
  start_slurm
  start_redis
  write_prometheus_config
  start_prometheus
  say "up: partitions cpu (default) and gpu on node localhost ($CPUS CPU slots, $GPUS fake GPUs); Redis $REDIS_URL; Prometheus $PROM_URL"
  say "use it from a shell with: eval \"\$($0 env)\""
}

stop_daemon() {
  local name=$1 pid
  if ! pid=$(running_pid "$name"); then rm -f "$DIR/pids/$name.pid"; return; fi
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/pids/$name.pid"
  say "stopped $name (pid $pid)"
}

cmd_stop() {
  # Jobs first: slurmstepd (and the workers it runs) outlive slurmd otherwise.
  if running_pid slurmctld >/dev/null && running_pid slurmd >/dev/null; then
    export SLURM_CONF=$SLURM_CONF_FILE
    local jobs
    jobs=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
      say "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      local deadline=$((SECONDS + 45))
      while [ -n "$(squeue -h -o %A 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
      [ -z "$(squeue -h -o %A 2>/dev/null)" ] || say "warning: jobs still listed after 45 s: $(squeue -h -o '%A %T' | tr '\n' ' ')"
    fi
  fi
  local i
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do stop_daemon "${DAEMONS[$i]}"; done
  say "stopped (state kept in $DIR)"
}

cmd_status() {
  local all=0 pid name
  for name in "${DAEMONS[@]}"; do
    if pid=$(running_pid "$name"); then
      echo "$name: running (pid $pid)"
    else
      echo "$name: stopped"
      all=3
    fi
  done
  if running_pid slurmctld >/dev/null; then
    SLURM_CONF=$SLURM_CONF_FILE sinfo -o '%P %a %D %T %G' 2>&1 | sed 's/^/  /' || true
    echo "  jobs: $(SLURM_CONF=$SLURM_CONF_FILE squeue -h 2>/dev/null | wc -l)"
  fi
  if running_pid redis-server >/dev/null; then
    echo "  redis $REDIS_URL: $(redis-cli -p "$REDIS_PORT" ping 2>&1)," \
      "appendonly $(redis-cli -p "$REDIS_PORT" config get appendonly | tail -n 1)," \
      "maxmemory-policy $(redis-cli -p "$REDIS_PORT" config get maxmemory-policy | tail -n 1)"
  fi
  if running_pid prometheus >/dev/null; then
    echo "  prometheus $PROM_URL: $(curl -s "$PROM_URL/-/ready" 2>&1 | head -n 1); targets from $DIR/prometheus/targets/"
  fi
  [ "$all" -eq 0 ] || echo "not (fully) running: start it with $0 start"
  return "$all"
}

cmd_env() {
  echo "export ATREX_CLUSTER_DIR=$DIR"
  echo "export SLURM_CONF=$SLURM_CONF_FILE"
  echo "export ATREX_REDIS_URL=$REDIS_URL"
  echo "export ATREX_PROMETHEUS_URL=$PROM_URL"
  echo "export ATREX_PROMETHEUS_TARGETS=$DIR/prometheus/targets"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *)
    echo "usage: $0 start|stop|status|env   (folder: ATREX_CLUSTER_DIR, default /tmp/atrex-cluster)" >&2
    exit 2
    ;;
esac
