// Sweeps on a cluster (docs/architecture.md §2): tasks go through Redis (RedisQueue, keys under
// atrex:<sweep id>), long-lived workers pull them — `atrex runner` (one per GPU) and
// `atrex agent-worker` — started by a launcher: `local` (detached child processes on this
// machine) or `slurm` (sbatch job arrays; deploy/slurm/). The results folder's manifest.json is
// the source of truth; `resume` re-enqueues whatever is neither done nor in flight.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "atrex/common/queue.h"
#include "atrex/common/redis.h"
#include "atrex/scheduler/local_sweep.h"
#include "atrex/scheduler/sweep_state.h"

namespace atrex::scheduler {

struct ClusterOptions {
  std::string redis_url = "redis://127.0.0.1:6379";
  std::string launcher = "local";  // local | slurm
  int runners = 1;                 // runner processes (slurm: array size, one GPU each)
  int agent_workers = 2;
  std::filesystem::path atrex;     // the atrex binary workers run (default: this one)
  // slurm
  std::string gpu_partition;
  std::string cpu_partition;
  std::string time_limit = "24:00:00";
  int array_throttle = 0;          // %N on the arrays; 0 = none
};

// Redis key prefix of a sweep: "atrex:<sweep id>".
std::string sweep_prefix(const std::string& sweep_id);

// Rebuilds a resolved sweep from its manifest (no device probing, no measuring).
Result<ResolvedSweep> sweep_from_manifest(const std::filesystem::path& dir);

// Writes the manifest, stores it in Redis, enqueues the agent tasks and starts the workers.
Result<Json> submit_sweep(const ResolvedSweep& sweep, const ClusterOptions& options, const ProgressFn& say);

struct SweepStatus {
  Json manifest;
  int done = 0;
  int total = 0;
  QueueStats eval;
  QueueStats agent;
  int eval_dead = 0;
  int workers_alive = -1;  // -1: unknown
  std::string workers_text;
};
Result<SweepStatus> sweep_status(const std::filesystem::path& dir);

// Waits until every (agent, operator) has a final marker (or `timeout`), then exports the
// results to results.jsonl and writes the reports.
Result<SweepOutcome> wait_sweep(const std::filesystem::path& dir, std::chrono::seconds timeout, const ProgressFn& say,
                                const std::atomic<bool>* stop = nullptr);

// Stops the workers (kills local ones, scancel for slurm) and marks the sweep cancelled.
Result<void> cancel_sweep(const std::filesystem::path& dir);

// Reconciles (re-enqueues missing agent tasks) and starts workers again when none are alive.
Result<Json> resume_sweep(const std::filesystem::path& dir, const ProgressFn& say);

// The daemons. Both stop taking work on SIGTERM/SIGINT/SIGUSR1 and return after their current task.
int run_runner_daemon(const std::string& redis_url, const std::string& sweep_id, int device, const std::string& name,
                      const std::atomic<bool>& stop);
int run_agent_worker_daemon(const std::string& redis_url, const std::string& sweep_id, const std::string& name,
                            const std::atomic<bool>& stop);

}  // namespace atrex::scheduler
