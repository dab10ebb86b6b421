#include "atrex/scheduler/local_sweep.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "atrex/agent/provider_registry.h"
#include "atrex/agent/worker.h"
#include "atrex/common/clock.h"
#include "atrex/common/inprocess_queue.h"
#include "atrex/common/metrics.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/keys.h"
#include "atrex/runner/runner_loop.h"
#include "atrex/scheduler/reconcile.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

Result<SweepOutcome> run_local_sweep(const ResolvedSweep& sweep, const LocalSweepOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  ATREX_ASSIGN_OR_RETURN(Manifest manifest, open_results_dir(sweep.manifest, [](Manifest& m) {
                           m.status = SweepStatus::kRunning;
                           m.launcher = "in-process";
                           m.started_at = utc_timestamp_now();
                         }));
  const fs::path out = manifest.output;
  ATREX_ASSIGN_OR_RETURN(auto store, MemoryResultStore::open_jsonl(out / "results.jsonl"));
  QueueOptions qopt;
  qopt.lease_timeout = std::chrono::minutes(10);
  InProcessQueue queue(qopt);
  ATREX_ASSIGN_OR_RETURN(agent::ProviderRegistry providers, agent::ProviderRegistry::builtin());
  runner::EvaluatorOptions eopt;
  eopt.sandbox = options.sandbox;
  eopt.suite = &sweep.suite;
  eopt.hardware = sweep.hardware;
  eopt.work_dir = out / "work";
  eopt.runner = "runner-0";  // the runner thread's consumer name (below)
  std::atomic<bool> stop_workers{false};
  eopt.stop = &stop_workers;  // a stopping sweep does not wait for a long task to finish
  std::optional<metrics::RunnerMetrics> rm;
  std::optional<metrics::AgentMetrics> am;
  std::optional<metrics::SweepMetrics> sm;
  if (options.metrics) {
    rm.emplace(*options.metrics);
    am.emplace(*options.metrics);
    sm.emplace(*options.metrics);
    eopt.on_compile = [&rm](bool hit) { rm->count_compile(hit); };
  }
  runner::Evaluator evaluator(eopt);

  ATREX_ASSIGN_OR_RETURN(int pending, enqueue_missing(manifest, queue, *store, say));
  say(
      fmt::format("sweep {} ({}): {} agent task(s) on backend {} ({}), hardware profile {}, "
                  "results in {}",
                  manifest.name, manifest.sweep_id, pending, backend_name(manifest.backend),
                  manifest.device, manifest.hardware.name, out.string()));

  // One runner (one GPU, or the CPU: a second one would disturb the timing) and a few agent
  // workers, as threads. On a GPU the candidates' compiles run on the host's cores while the GPU
  // measures: up to half the cores' worth of agents (at most 8) keep candidates coming, and the
  // runner compiles all it has claimed ahead at once. On the CPU backend two agents and one
  // compile ahead, so that compiles take as little from the timed calls as they can.
  const bool on_gpu = manifest.backend != Backend::kCpu;
  const int agents_default =
      on_gpu ? std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 2, 8) : 2;
  const int workers = options.agent_workers > 0
                          ? options.agent_workers
                          : std::max(1, std::min(pending, agents_default));
  std::vector<std::thread> threads;
  runner::RunnerLoopOptions ropt{kEvalStream, "runner-0"};
  ropt.metrics = rm ? &*rm : nullptr;
  ropt.prefetch = on_gpu ? workers : 1;
  runner::RunnerLoop runner_loop(queue, *store, evaluator, ropt);
  threads.emplace_back([&] { runner_loop.run(stop_workers); });
  std::vector<std::unique_ptr<agent::AgentWorker>> agent_workers;
  // Shared by the sub-agents of each (agent, operator); a resumed run starts it empty and
  // the generations take the audit trails' bests.
  MemoryBestStore shared_best;
  for (int i = 0; i < workers; ++i) {
    agent::AgentWorkerOptions wopt;
    wopt.consumer = fmt::format("agent-worker-{}", i);
    wopt.audit_dir = out / "audit";
    wopt.metrics = am ? &*am : nullptr;
    wopt.shared_best = &shared_best;
    agent_workers.push_back(std::make_unique<agent::AgentWorker>(queue, *store, providers, wopt));
  }
  for (auto& w : agent_workers) threads.emplace_back([&, wp = w.get()] { wp->run(stop_workers); });

  FollowOptions fo;
  fo.poll = std::chrono::milliseconds(200);
  fo.stop = options.stop;
  fo.metrics = sm ? &*sm : nullptr;
  fo.suite = &sweep.suite;
  fo.say = say;
  const auto t0 = std::chrono::steady_clock::now();
  fo.on_poll = options.progress_counts;
  if (!options.progress_counts) fo.progress_line = [&](int done, int total) {
    auto st = queue.stats(kEvalStream);
    return fmt::format("{}/{} operators done after {:.0f} s; {} evaluations done, {} queued", done,
                       total,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                       runner_loop.stats().tasks_done.load(), st ? st->ready : 0);
  };
  auto followed = follow_sweep(manifest, queue, *store, fo);
  stop_workers = true;
  for (auto& t : threads) t.join();
  if (!followed) return tl::unexpected(followed.error());
  if (followed->end == FollowEnd::kStopped) {
    ATREX_TRY(update_manifest(out, [](Manifest& m) { m.status = SweepStatus::kInterrupted; }));
    SweepOutcome interrupted;
    interrupted.interrupted = true;
    return interrupted;
  }
  ATREX_ASSIGN_OR_RETURN(SweepOutcome outcome,
                         finish_sweep(manifest, *store, &queue, sweep.suite, fo.metrics, say));
  ATREX_TRY(update_manifest(out, [](Manifest& m) {
    m.status = SweepStatus::kComplete;
    m.finished_at = utc_timestamp_now();
  }));
  return outcome;
}

Result<SweepOutcome> write_reports(const fs::path& dir, const problems::Suite& suite) {
  ATREX_ASSIGN_OR_RETURN(Manifest manifest, read_manifest_file(dir));
  manifest.output = dir.string();  // the folder may have moved since it was written
  ATREX_ASSIGN_OR_RETURN(auto store, MemoryResultStore::open_jsonl(dir / "results.jsonl"));
  return finish_sweep(manifest, *store, nullptr, suite, nullptr, nullptr);
}

}  // namespace atrex::scheduler
