// Cluster sweeps (DESIGN.md §2): tasks go through a Redis (keys under sweep_prefix(id)), and
// long-lived workers — `atrex runner` (one per GPU) and `atrex agent-worker` — pull them,
// started by a launcher (launcher.h). The results folder's manifest.json is the source of truth:
// submit writes it, resume re-enqueues whatever is neither done nor in flight, wait follows the
// sweep to its end and writes the reports, cancel stops the workers.
//
// Every step reaches Redis and the launchers through a ClusterEnv, so the lifecycle runs on the
// in-process queue and a fake launcher in unit tests, and on Redis and real processes otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "atrex/common/metrics.h"
#include "atrex/common/queue.h"
#include "atrex/common/redis/endpoint.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/cluster_options.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/scheduler/follow.h"
#include "atrex/scheduler/launcher.h"
#include "atrex/scheduler/resolve.h"

namespace atrex::scheduler {

// Where a cluster sweep's tasks, results and the workers' copy of its manifest live.
class SweepHost {
 public:
  virtual ~SweepHost() = default;
  virtual TaskQueue& queue() = 0;
  virtual ResultStore& results() = 0;
  virtual Result<void> publish(const Manifest& manifest) = 0;
};

struct ClusterEnv {
  // Connects to the sweep's host (kUnavailable when it cannot be reached).
  std::function<Result<std::unique_ptr<SweepHost>>(const RedisEndpoint&, const Manifest&)> host;
  std::function<std::unique_ptr<WorkerLauncher>(Launcher)> launcher;
  // Redis (SweepStore) and the local / slurm launchers.
  static ClusterEnv redis_and_launchers();
};

struct SubmitOptions {
  ClusterOptions cluster;
  // The instances to shard over; the sweep goes to one (redis_shard.h).
  std::vector<RedisEndpoint> redis;
  std::string redis_source = "--redis";  // the flag or field the list came from, for errors
};

// Picks the sweep's Redis, writes the manifest (status submitted, then running with its
// workers), publishes it for the workers, enqueues the agent tasks and starts the workers.
// A launcher failure leaves the tasks queued and says to fix it and resume.
Result<Manifest> submit_sweep(const ResolvedSweep& sweep, const SubmitOptions& options,
                              const ProgressFn& say,
                              const ClusterEnv& env = ClusterEnv::redis_and_launchers());

struct SweepProgress {
  Manifest manifest;
  int done = 0;
  int total = 0;
  QueueStats eval;
  QueueStats agent;
  std::vector<scoring::DeadLetterSummary> dead_letters;  // of both queues
  int workers_alive = -1;                                // -1: unknown
  std::string workers_text;
};
Result<SweepProgress> sweep_status(const std::filesystem::path& dir,
                                   const ClusterEnv& env = ClusterEnv::redis_and_launchers());

// Follows the sweep until every (agent, operator) has a final marker (or `timeout`, kTimeout),
// copies every record into <dir>/results.jsonl, writes the reports (dead letters listed), stops
// the workers and marks the sweep complete. `metrics` follows the sweep when given.
Result<SweepOutcome> wait_sweep(const std::filesystem::path& dir, std::chrono::seconds timeout,
                                const ProgressFn& say, const std::atomic<bool>* stop = nullptr,
                                metrics::SweepMetrics* metrics = nullptr,
                                const ClusterEnv& env = ClusterEnv::redis_and_launchers(),
                                const std::function<void(int done, int total)>& counts = {});

// Stops the workers and marks the sweep cancelled.
Result<void> cancel_sweep(const std::filesystem::path& dir,
                          const ClusterEnv& env = ClusterEnv::redis_and_launchers());

// Publishes the manifest again (a Redis that lost the sweep learns it), reconciles (re-enqueues
// missing agent tasks) and restarts the workers that stopped.
Result<Manifest> resume_sweep(const std::filesystem::path& dir, const ProgressFn& say,
                              const ClusterEnv& env = ClusterEnv::redis_and_launchers());

}  // namespace atrex::scheduler
