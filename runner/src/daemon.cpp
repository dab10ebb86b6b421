#include "atrex/runner/daemon.h"

#include <spdlog/spdlog.h>

#include "atrex/common/metrics.h"
#include "atrex/common/redis/sweep_store.h"
#include "atrex/problems/hardware.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/runner_loop.h"

namespace atrex::runner {
namespace fs = std::filesystem;

namespace {

int fail(const Error& e) {
  spdlog::error("runner: {}", e.message);
  return exit_code_for(e);
}

}  // namespace

int run_runner_daemon(const RedisEndpoint& redis, const std::string& sweep_id, int device,
                      const std::string& name, const std::atomic<bool>& stop,
                      const std::optional<metrics::ListenAddress>& metrics_listen,
                      SandboxMode sandbox) {
  auto m = fetch_manifest(redis, sweep_id);
  if (!m) return fail(m.error());
  const ClusterOptions co = m->cluster.value_or(ClusterOptions{});
  // The sweep's submitter may have said --no-sandbox (the manifest's cluster.sandbox), and so
  // may whoever started this runner; either is the user's explicit choice.
  if (co.sandbox == SandboxMode::kNone && sandbox != SandboxMode::kNone) {
    spdlog::warn("runner {}: sweep {} was submitted with --no-sandbox: its candidates run "
                 "without the evaluation sandbox (records say sandbox: none)",
                 name, sweep_id);
    sandbox = SandboxMode::kNone;
  }
  if (auto ready = sandbox_ready(sandbox); !ready) return fail(ready.error());
  auto store = SweepStore::open(redis, sweep_id, queue_options(co));
  if (!store) return fail(store.error());
  auto suite = problems::load_suite_or_bundled(m->suite);
  if (!suite) return fail(suite.error());
  auto exposition = metrics::start_worker_exposition(*m, metrics_listen, "runner", name);
  if (!exposition) return fail(exposition.error());
  std::optional<metrics::RunnerMetrics> rm;
  if (*exposition) {
    rm.emplace(*(*exposition)->registry);
    spdlog::info("runner {}: metrics at http://{}/metrics", name, (*exposition)->server->target());
  }
  EvaluatorOptions eo;
  if (rm) eo.on_compile = [&rm](bool hit) { rm->count_compile(hit); };
  eo.suite = &*suite;
  eo.hardware = problems::hardware_from_summary(m->hardware);
  eo.device_index = device;
  eo.runner = name;
  eo.work_dir = fs::path(m->output) / "work" / name;
  eo.stop = &stop;
  eo.sandbox = sandbox;  // SIGTERM/SIGUSR1: stop between shapes and give the lease back
  Evaluator evaluator(eo);
  RunnerLoopOptions ro{kEvalStream, name};
  ro.heartbeat = std::chrono::milliseconds(std::max(500, co.lease_timeout_s * 1000 / 6));
  ro.prefetch = co.prefetch;
  ro.metrics = rm ? &*rm : nullptr;
  RunnerLoop loop(*store->queue, *store->results, evaluator, ro);
  spdlog::info("runner {} on device {} serving sweep {}", name, device, sweep_id);
  loop.run(stop);
  spdlog::info("runner {}: stopped after {} task(s)", name, loop.stats().tasks_done.load());
  return 0;
}

}  // namespace atrex::runner
