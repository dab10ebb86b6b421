// `atrex runner`: the long-lived evaluation worker a launcher starts, one per GPU (DESIGN.md §2).
// It reads the sweep's manifest from Redis (hardware profile, suite, cluster options), then
// serves the sweep's `eval` stream with a RunnerLoop until stopped. Stateless: it may die at
// any time, its leased task goes to another runner.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "atrex/common/metrics_server.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/common/redis/endpoint.h"

namespace atrex::runner {

// Returns the process exit code: 0 after a stop request (SIGTERM/SIGINT/SIGUSR1 set `stop`:
// the shape in hand is finished and the rest of its task given back), 2 for a sweep Redis does
// not hold or a bad --metrics-listen, 3 when Redis cannot be reached, 1 otherwise.
// `metrics_listen` (--metrics-listen) overrides the manifest's cluster.metrics; with either,
// the runner serves /metrics and writes its target file (removed when it returns).
// `sandbox` (--no-sandbox), or the manifest's cluster.sandbox when the sweep was submitted with
// --no-sandbox: either kNone runs the children without the sandbox. A runner whose sandbox
// cannot start here exits 3 after reading the manifest, naming why.
int run_runner_daemon(const RedisEndpoint& redis, const std::string& sweep_id, int device,
                      const std::string& name, const std::atomic<bool>& stop,
                      const std::optional<metrics::ListenAddress>& metrics_listen = std::nullopt,
                      SandboxMode sandbox = SandboxMode::kBwrap);

}  // namespace atrex::runner
