// Launchers start the long-lived workers of a cluster sweep and keep what is needed to find
// and stop them in the manifest's "workers" object.
#pragma once

#include <string>
#include <utility>

#include "atrex/common/json_io.h"
#include "atrex/scheduler/cluster_sweep.h"

namespace atrex::scheduler {

// Starts runners and agent workers for the sweep in `manifest` with `options.launcher`.
Result<Json> launch_workers(const Json& manifest, const ClusterOptions& options,
                            const ProgressFn& say);
// Restarts the workers that are no longer running (all of them when none was recorded).
Result<Json> revive_workers(const Json& manifest, const ClusterOptions& options,
                            const ProgressFn& say);
// (how many workers are alive, a one-line description); -1 when it cannot be told.
std::pair<int, std::string> workers_alive(const Json& workers);
Result<void> stop_workers(const Json& workers);

}  // namespace atrex::scheduler
