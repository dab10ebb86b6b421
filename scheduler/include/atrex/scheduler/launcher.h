// Launchers start the long-lived workers of a cluster sweep (`atrex runner`, `atrex
// agent-worker`) and keep what is needed to find and stop them in the manifest's "workers"
// (WorkersRecord, common/wire/manifest.h). `local`: detached processes of this machine; `slurm`:
// sbatch job arrays (docs/sweeps.md "Cluster sweeps"). Workers get the sweep's Redis URL and id
// on their command line and read everything else from the manifest copy in Redis.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "atrex/common/error.h"
#include "atrex/common/redis/endpoint.h"
#include "atrex/common/wire/cluster_options.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/scheduler/reconcile.h"

namespace atrex::scheduler {

class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // Starts the runners and agent workers `options` asks for, connected to `redis`.
  virtual Result<WorkersRecord> launch(const Manifest& sweep, const ClusterOptions& options,
                                       const RedisEndpoint& redis, const ProgressFn& say) = 0;
  // Restarts the workers of `sweep.workers` that are no longer running.
  virtual Result<WorkersRecord> revive(const Manifest& sweep, const ClusterOptions& options,
                                       const RedisEndpoint& redis, const ProgressFn& say) = 0;
  // (how many workers are alive, a one-line description); -1 when it cannot be told.
  virtual std::pair<int, std::string> alive(const WorkersRecord& workers) = 0;
  virtual Result<void> stop(const WorkersRecord& workers) = 0;
};

std::unique_ptr<WorkerLauncher> make_local_launcher();
std::unique_ptr<WorkerLauncher> make_slurm_launcher();
// The launcher of `kind`.
std::unique_ptr<WorkerLauncher> make_launcher(Launcher kind);

}  // namespace atrex::scheduler
