// `atrex agent-worker`: the long-lived AKA worker a launcher starts (DESIGN.md §2). It reads the
// sweep's manifest from Redis, then runs agent tasks (one generation each) from the sweep's
// `agent` stream with the built-in provider registry until stopped.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "atrex/common/metrics_server.h"
#include "atrex/common/redis/endpoint.h"

namespace atrex::agent {

// Returns the process exit code: 0 after a stop request (the task in hand is given back), 2 for
// a sweep Redis does not hold or a bad --metrics-listen, 3 when Redis cannot be reached, 1
// otherwise. `metrics_listen` overrides the manifest's cluster.metrics.
int run_agent_worker_daemon(
    const RedisEndpoint& redis, const std::string& sweep_id, const std::string& name,
    const std::atomic<bool>& stop,
    const std::optional<metrics::ListenAddress>& metrics_listen = std::nullopt);

}  // namespace atrex::agent
