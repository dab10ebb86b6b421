// Sweeps on a cluster (docs/architecture.md §2): tasks go through Redis (RedisQueue, keys under
// atrex:<sweep id>), long-lived workers pull them — `atrex runner` (one per GPU) and
// `atrex agent-worker` — started by a launcher: `local` (detached child processes on this
// machine) or `slurm` (sbatch job arrays; deploy/slurm/). The results folder's manifest.json is
// the source of truth; `resume` re-enqueues whatever is neither done nor in flight.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/metrics.h"
#include "atrex/common/metrics_server.h"
#include "atrex/common/queue.h"
#include "atrex/common/redis.h"
#include "atrex/scheduler/local_sweep.h"
#include "atrex/scheduler/redis_shard.h"
#include "atrex/scheduler/sweep_state.h"

namespace atrex::scheduler {

struct ClusterOptions {
  // The sweep's Redis: what the manifest records and the workers get (one URL).
  std::string redis_url = "redis://127.0.0.1:6379";
  // submit_sweep: the instances to shard over (parse_redis_url_list; redis_shard.h). When not
  // empty, submit_sweep sets redis_url to choose_redis_url(redis_urls, redis_urls_source, ...).
  std::vector<std::string> redis_urls;
  std::string redis_urls_source = "--redis";  // the flag or field the list came from, for errors
  std::string launcher = "local";             // local | slurm
  int runners = 1;        // local: runner processes; slurm: tasks of the runner array
  int agent_workers = 2;  // local: processes; slurm: tasks of the agent-worker array
  std::filesystem::path
      atrex;  // the atrex binary workers run (default: this one; slurm: on a shared path)
  // slurm (docs/sweeps.md "Cluster sweeps"); empty partitions = the cluster's default partition
  std::string gpu_partition;  // runners of cuda/hip sweeps, with --gres=gpu:<gpus_per_runner>
  std::string cpu_partition;  // agent workers, and the runners of cpu sweeps (no gres)
  int gpus_per_runner = 1;    // GPUs per runner array task; one runner process per GPU
  std::string time_limit = "24:00:00";  // --time of every array task
  int array_throttle = 0;  // %N on the arrays (at most N tasks of each at once); 0 = none
  std::vector<std::string> sbatch_args;  // appended to every sbatch call (--account=..., --qos=...)
  std::filesystem::path job_template;    // replaces the embedded deploy/slurm/worker.sbatch
  // A task whose worker sent no heartbeat for this long is handed to another worker (workers
  // heartbeat every lease_timeout_s / 6). Bounds how long a crashed worker's task waits.
  int lease_timeout_s = 60;
  // Deliveries of one task (its workers died or failed it each time) before it is moved to the
  // dead-letter stream with its last error and never enqueued again.
  int max_deliveries = 3;
  // Tasks a runner claims ahead and compiles while it measures the current one (runner_loop.h).
  // A task claimed ahead waits for its runner even when another is idle: 0 when runners
  // outnumber the evaluations in flight.
  int prefetch = 1;
  // ADDR:PORT every worker of the sweep serves Prometheus metrics on ("" = none; port 0 = an
  // ephemeral port, what several workers per node need). Workers read it from the manifest, like
  // `prefetch`, and write a file_sd target file <results>/metrics/targets/<worker>.json.
  std::string metrics;
  // A folder a site's Prometheus watches (file_sd_configs), shared by sweeps: the target files go
  // there instead, named <sweep id>-<worker>.json. Empty: <results>/metrics/targets.
  std::filesystem::path metrics_targets;
};

// Where the workers of the sweep whose results folder is `results` write their file_sd target
// files (docs/sweeps.md "Metrics"): <results>/metrics/targets.
std::filesystem::path metrics_targets_dir(const std::filesystem::path& results);

// The manifest's "cluster" object (and the sweep file's `cluster` section, same keys).
Json to_json(const ClusterOptions& options);
// `base` with the fields that `j` sets replaced (unknown keys are ignored: `j` is validated
// by the sweep-file parser or was written by to_json).
ClusterOptions cluster_options_from_json(const Json& j, ClusterOptions base = {});

// Redis key prefix of a sweep: "atrex:{<sweep id>}". The hash tag keeps all of a sweep's keys
// in one slot (Lua scripts need that on a Redis Cluster) and is what sweeps are sharded by.
std::string sweep_prefix(const std::string& sweep_id);

// Rebuilds a resolved sweep from its manifest (no device probing, no measuring).
Result<ResolvedSweep> sweep_from_manifest(const std::filesystem::path& dir);

// Picks the sweep's Redis (options.redis_urls, when set: the manifest's URL if the results
// folder already holds this sweep, else the sweep id's shard), writes the manifest, stores it in
// Redis, enqueues the agent tasks and starts the workers with that one URL.
Result<Json> submit_sweep(const ResolvedSweep& sweep, const ClusterOptions& options,
                          const ProgressFn& say);

struct SweepStatus {
  Json manifest;
  int done = 0;
  int total = 0;
  QueueStats eval;
  QueueStats agent;
  std::vector<Json> dead_letters;  // of both queues, as dead_letter_json() gives them
  int workers_alive = -1;          // -1: unknown
  std::string workers_text;
};
Result<SweepStatus> sweep_status(const std::filesystem::path& dir);

// Waits until every (agent, operator) has a final marker (or `timeout`), then exports the
// results to results.jsonl and writes the reports; report.json lists the dead letters of both
// queues under "dead_letters" (tasks the sweep completed without).
// `metrics`, when given, follows the sweep (operators done/planned, queue depths, S_agg at the
// end).
Result<SweepOutcome> wait_sweep(const std::filesystem::path& dir, std::chrono::seconds timeout,
                                const ProgressFn& say, const std::atomic<bool>* stop = nullptr,
                                metrics::SweepMetrics* metrics = nullptr);

// Stops the workers (kills local ones, scancel for slurm) and marks the sweep cancelled.
Result<void> cancel_sweep(const std::filesystem::path& dir);

// Reconciles (re-enqueues missing agent tasks) and starts workers again when none are alive.
Result<Json> resume_sweep(const std::filesystem::path& dir, const ProgressFn& say);

// The daemons. Both stop taking work on SIGTERM/SIGINT/SIGUSR1 and return after their current task.
// `metrics_listen` (the --metrics-listen flag) overrides the manifest's cluster.metrics; with
// either, the daemon serves /metrics and writes its target file (removed when it returns).
int run_runner_daemon(const std::string& redis_url, const std::string& sweep_id, int device,
                      const std::string& name, const std::atomic<bool>& stop,
                      const std::optional<metrics::ListenAddress>& metrics_listen = std::nullopt);
int run_agent_worker_daemon(
    const std::string& redis_url, const std::string& sweep_id, const std::string& name,
    const std::atomic<bool>& stop,
    const std::optional<metrics::ListenAddress>& metrics_listen = std::nullopt);

}  // namespace atrex::scheduler
