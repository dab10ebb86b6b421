#include "atrex/agent/daemon.h"

#include <spdlog/spdlog.h>

#include "atrex/agent/worker.h"
#include "atrex/common/metrics.h"
#include "atrex/common/redis/sweep_store.h"

namespace atrex::agent {
namespace fs = std::filesystem;

namespace {

int fail(const Error& e) {
  spdlog::error("agent-worker: {}", e.message);
  return exit_code_for(e);
}

}  // namespace

int run_agent_worker_daemon(const RedisEndpoint& redis, const std::string& sweep_id,
                            const std::string& name, const std::atomic<bool>& stop,
                            const std::optional<metrics::ListenAddress>& metrics_listen) {
  auto m = fetch_manifest(redis, sweep_id);
  if (!m) return fail(m.error());
  const ClusterOptions co = m->cluster.value_or(ClusterOptions{});
  auto store = SweepStore::open(redis, sweep_id, queue_options(co));
  if (!store) return fail(store.error());
  auto providers = ProviderRegistry::builtin();
  if (!providers) return fail(providers.error());
  auto exposition = metrics::start_worker_exposition(*m, metrics_listen, "agent-worker", name);
  if (!exposition) return fail(exposition.error());
  std::optional<metrics::AgentMetrics> am;
  if (*exposition) {
    am.emplace(*(*exposition)->registry);
    spdlog::info("agent-worker {}: metrics at http://{}/metrics", name,
                 (*exposition)->server->target());
  }
  AgentWorkerOptions wo;
  wo.consumer = name;
  wo.heartbeat = std::chrono::milliseconds(std::max(500, co.lease_timeout_s * 1000 / 6));
  wo.max_deliveries = co.max_deliveries;
  wo.audit_dir = fs::path(m->output) / "audit";
  wo.metrics = am ? &*am : nullptr;
  wo.shared_best = store->best.get();
  AgentWorker worker(*store->queue, *store->results, *providers, wo);
  spdlog::info("agent worker {} serving sweep {}", name, sweep_id);
  worker.run(stop);
  return 0;
}

}  // namespace atrex::agent
