#include "atrex/scheduler/local_sweep.h"

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/agent/worker.h"
#include "atrex/common/clock.h"
#include "atrex/common/inprocess_queue.h"
#include "atrex/common/metrics.h"
#include "atrex/common/result_store.h"
#include "atrex/runner/runner_loop.h"
#include "atrex/scheduler/sweep_state.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

Result<SweepOutcome> run_local_sweep(const ResolvedSweep& sweep, const LocalSweepOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  ATREX_ASSIGN_OR_RETURN(Json manifest,
                         open_results_dir(sweep, Json{{"status", "running"},
                                                      {"launcher", "in-process"},
                                                      {"started_at", utc_timestamp_now()}}));
  ATREX_ASSIGN_OR_RETURN(auto store, MemoryResultStore::open_jsonl(sweep.output / "results.jsonl"));
  QueueOptions qopt;
  qopt.lease_timeout = std::chrono::minutes(10);
  InProcessQueue queue(qopt);
  ATREX_ASSIGN_OR_RETURN(agent::TemplateCatalog catalog, agent::TemplateCatalog::embedded());
  runner::EvaluatorOptions eopt;
  eopt.suite = &sweep.suite;
  eopt.hardware = sweep.hardware;
  eopt.work_dir = sweep.output / "work";
  eopt.runner = "runner-0";  // the runner thread's consumer name (below)
  std::atomic<bool> stop_workers{false};
  eopt.stop = &stop_workers;
  std::optional<metrics::RunnerMetrics> rm;
  std::optional<metrics::AgentMetrics> am;
  std::optional<metrics::SweepMetrics> sm;
  if (options.metrics) {
    rm.emplace(*options.metrics);
    am.emplace(*options.metrics);
    sm.emplace(*options.metrics);
    eopt.on_compile = [&rm](bool hit) { rm->count_compile(hit); };
  }  // a stopping sweep does not wait for a long task to finish
  runner::Evaluator evaluator(eopt);

  ATREX_ASSIGN_OR_RETURN(int pending, enqueue_missing(sweep, queue, *store, say));
  say(fmt::format(
      "sweep {} ({}): {} agent task(s) on backend {} ({}), hardware profile {}, results in {}",
      sweep.spec.name, sweep.sweep_id, pending, sweep.backend, sweep.device, sweep.hardware.name,
      sweep.output.string()));

  // One runner (one GPU, or the CPU: a second one would disturb the timing) and a few agent
  // workers, as threads.
  std::vector<std::thread> threads;
  runner::RunnerLoopOptions ropt{runner::kEvalStream, "runner-0"};
  ropt.metrics = rm ? &*rm : nullptr;
  runner::RunnerLoop runner_loop(queue, *store, evaluator, ropt);
  threads.emplace_back([&] { runner_loop.run(stop_workers); });
  const int workers =
      options.agent_workers > 0 ? options.agent_workers : std::max(1, std::min(pending, 2));
  std::vector<std::unique_ptr<agent::AgentWorker>> agent_workers;
  for (int i = 0; i < workers; ++i) {
    agent::AgentWorkerOptions wopt;
    wopt.consumer = fmt::format("agent-worker-{}", i);
    wopt.audit_dir = sweep.output / "audit";
    wopt.metrics = am ? &*am : nullptr;
    agent_workers.push_back(std::make_unique<agent::AgentWorker>(queue, *store, catalog, wopt));
  }
  for (auto& w : agent_workers) threads.emplace_back([&, wp = w.get()] { wp->run(stop_workers); });

  std::vector<std::string> agents, ops;
  for (const auto& a : sweep.spec.agents) agents.push_back(a.name);
  for (const auto& o : sweep.operators) ops.push_back(o.name);
  const int total = static_cast<int>(agents.size() * ops.size());
  SweepOutcome outcome;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  std::set<std::string> seen;
  for (;;) {
    ATREX_ASSIGN_OR_RETURN(int done, count_finals(agents, ops, *store, seen, say));
    if (sm) {
      sm->operators_done.Set(done);
      sm->operators_planned.Set(total);
      for (const char* stream : {runner::kEvalStream, agent::kAgentStream}) {
        if (auto s = queue.stats(stream)) sm->set_queue(stream, s->ready, s->leased, s->dead);
      }
    }
    if (done == total) break;
    ATREX_TRY(finalize_dead_agent_tasks(queue, *store));
    if (options.stop && options.stop->load()) {
      outcome.interrupted = true;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(30)) {
      last_report = now;
      auto st = queue.stats(runner::kEvalStream);
      say(fmt::format("{}/{} operators done after {:.0f} s; {} evaluations done, {} queued", done,
                      total, std::chrono::duration<double>(now - t0).count(),
                      runner_loop.stats().tasks_done.load(), st ? st->ready : 0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop_workers = true;
  for (auto& t : threads) t.join();
  if (outcome.interrupted) {
    ATREX_TRY(update_manifest(sweep.output, Json{{"status", "interrupted"}}));
    return outcome;
  }
  ATREX_ASSIGN_OR_RETURN(outcome, reduce(sweep.output, sweep.suite, *store));
  if (sm) {
    for (const auto& a : outcome.agents) sm->s_agg.Add({{"agent", a.agent}}).Set(a.s_agg);
  }
  ATREX_TRY(update_manifest(sweep.output,
                            Json{{"status", "complete"}, {"finished_at", utc_timestamp_now()}}));
  return outcome;
}

Result<SweepOutcome> write_reports(const fs::path& dir, const problems::Suite& suite) {
  ATREX_ASSIGN_OR_RETURN(auto store, MemoryResultStore::open_jsonl(dir / "results.jsonl"));
  return reduce(dir, suite, *store);
}

}  // namespace atrex::scheduler
