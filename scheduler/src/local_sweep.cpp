#include "atrex/scheduler/local_sweep.h"

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/agent/worker.h"
#include "atrex/common/clock.h"
#include "atrex/common/inprocess_queue.h"
#include "atrex/common/result_store.h"
#include "atrex/runner/runner_loop.h"
#include "atrex/scoring/report.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

namespace {

// Refuses to mix two different sweeps in one results directory.
Result<void> check_manifest(const ResolvedSweep& sweep, const fs::path& manifest) {
  std::error_code ec;
  if (!fs::exists(manifest, ec)) return ok();
  ATREX_ASSIGN_OR_RETURN(Json old, read_json_file(manifest));
  const std::string old_id = old.value("sweep_id", "");
  if (old_id != sweep.sweep_id) {
    return invalid_input(fmt::format("{} holds results of a different sweep (id {}, this one is {}); choose another "
                                     "output folder (--out) or remove that one",
                                     manifest.parent_path().string(), old_id, sweep.sweep_id));
  }
  return ok();
}

agent::AgentTask initial_task(const ResolvedSweep& sweep, const agent::AgentSpec& a, const OperatorPlan& op,
                              const agent::AuditTrail::Progress& progress) {
  agent::AgentTask t;
  t.sweep_id = sweep.sweep_id;
  t.agent = a;
  t.op = op.name;
  t.backend = sweep.backend;
  t.hardware = sweep.hardware.name;
  t.generation = progress.generation;
  t.iterations_used = progress.iterations_used;
  t.best = progress.best;
  t.seed = std::hash<std::string>{}(sweep.sweep_id + a.name + op.name);
  t.quick_shapes = op.quick_shapes;
  t.full_shapes = op.shapes;
  t.quick_settings = sweep.spec.quick_evaluation;
  t.full_settings = sweep.spec.evaluation;
  return t;
}

}  // namespace

Result<SweepOutcome> run_local_sweep(const ResolvedSweep& sweep, const LocalSweepOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::error_code ec;
  fs::create_directories(sweep.output, ec);
  if (ec) return io_error(fmt::format("{}: cannot create results folder: {}", sweep.output.string(), ec.message()));
  const fs::path manifest_file = sweep.output / "manifest.json";
  ATREX_TRY(check_manifest(sweep, manifest_file));
  Json manifest = sweep.to_manifest();
  manifest["status"] = "running";
  manifest["started_at"] = utc_timestamp_now();
  ATREX_TRY(write_text_file_atomic(manifest_file, manifest.dump(2)));

  ATREX_ASSIGN_OR_RETURN(auto store, MemoryResultStore::open_jsonl(sweep.output / "results.jsonl"));
  QueueOptions qopt;
  qopt.lease_timeout = std::chrono::minutes(10);
  InProcessQueue queue(qopt);
  ATREX_ASSIGN_OR_RETURN(agent::TemplateCatalog catalog, agent::TemplateCatalog::embedded());

  runner::EvaluatorOptions eopt;
  eopt.suite = &sweep.suite;
  eopt.hardware = sweep.hardware;
  eopt.work_dir = sweep.output / "work";
  runner::Evaluator evaluator(eopt);

  // Enqueue every (agent, operator) without a final marker; continue where its trail stopped.
  int pending = 0;
  for (const auto& a : sweep.spec.agents) {
    for (const auto& op : sweep.operators) {
      ATREX_ASSIGN_OR_RETURN(auto done, store->get(agent::final_key(a.name, op.name)));
      if (done) continue;
      ATREX_ASSIGN_OR_RETURN(auto trail, agent::AuditTrail::open(sweep.output / "audit" / a.name / (op.name + ".jsonl")));
      const auto progress = trail->progress();
      if (progress.iterations_used > 0) {
        say(fmt::format("resuming {} / {} at generation {}, {} iterations done", a.name, op.name, progress.generation,
                        progress.iterations_used));
      }
      ATREX_TRY(queue.enqueue(agent::kAgentStream, agent::to_json(initial_task(sweep, a, op, progress))));
      ++pending;
    }
  }
  say(fmt::format("sweep {} ({}): {} agent task(s) on backend {} ({}), hardware profile {}, results in {}",
                  sweep.spec.name, sweep.sweep_id, pending, sweep.backend, sweep.device, sweep.hardware.name,
                  sweep.output.string()));

  std::atomic<bool> stop_workers{false};
  std::vector<std::thread> threads;
  runner::RunnerLoop runner_loop(queue, *store, evaluator, runner::RunnerLoopOptions{runner::kEvalStream, "runner-0"});
  threads.emplace_back([&] { runner_loop.run(stop_workers); });
  const int workers = options.agent_workers > 0 ? options.agent_workers : std::max(1, std::min(pending, 2));
  std::vector<std::unique_ptr<agent::AgentWorker>> agent_workers;
  for (int i = 0; i < workers; ++i) {
    agent::AgentWorkerOptions wopt;
    wopt.consumer = fmt::format("agent-worker-{}", i);
    wopt.audit_dir = sweep.output / "audit";
    agent_workers.push_back(std::make_unique<agent::AgentWorker>(queue, *store, catalog, wopt));
  }
  for (auto& w : agent_workers) threads.emplace_back([&, wp = w.get()] { wp->run(stop_workers); });

  // Wait for every final marker, reporting progress.
  SweepOutcome outcome;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  std::set<std::string> reported;
  for (;;) {
    int done = 0;
    for (const auto& a : sweep.spec.agents) {
      for (const auto& op : sweep.operators) {
        auto fin = store->get(agent::final_key(a.name, op.name));
        if (fin && *fin) {
          ++done;
          const std::string key = a.name + "/" + op.name;
          if (reported.insert(key).second) {
            const Json& f = **fin;
            if (f.value("status", "") == "error") {
              say(fmt::format("{} / {}: error: {}", a.name, op.name, f.value("error", "")));
            } else {
              say(fmt::format("{} / {}: {} (quick S = {:.4f}, {} iterations, {} generation(s))", a.name, op.name,
                              f.value("status", ""), f.value("quick_score", -1.0), f.value("iterations_used", 0),
                              f.value("generations", 0)));
            }
          }
        }
      }
    }
    const int total = static_cast<int>(sweep.spec.agents.size() * sweep.operators.size());
    if (done == total) break;
    // An agent task that kept failing ends its (agent, operator) with the reason.
    if (auto dead = queue.dead_letters(agent::kAgentStream); dead) {
      for (const auto& d : *dead) {
        const std::string a = d.body["agent"].value("name", ""), op = d.body.value("operator", "");
        ATREX_TRY(store->put(agent::final_key(a, op),
                             Json{{"schema", agent::kFinalSchema}, {"agent", a}, {"operator", op}, {"status", "error"},
                                  {"error", fmt::format("agent task failed {} times: {}", d.delivery_count, d.last_error)}}));
      }
    }
    if (options.stop && options.stop->load()) {
      outcome.interrupted = true;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(30)) {
      last_report = now;
      auto st = queue.stats(runner::kEvalStream);
      say(fmt::format("{}/{} operators done after {:.0f} s; {} evaluations done, {} queued",
                      done, total, std::chrono::duration<double>(now - t0).count(), runner_loop.stats().tasks_done.load(),
                      st ? st->ready : 0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop_workers = true;
  for (auto& t : threads) t.join();
  if (outcome.interrupted) {
    manifest["status"] = "interrupted";
    ATREX_TRY(write_text_file_atomic(manifest_file, manifest.dump(2)));
    return outcome;
  }
  store.reset();  // flush and close results.jsonl before the reducer reads it
  ATREX_ASSIGN_OR_RETURN(outcome, write_reports(sweep.output, sweep.suite));
  manifest["status"] = "complete";
  manifest["finished_at"] = utc_timestamp_now();
  ATREX_TRY(write_text_file_atomic(manifest_file, manifest.dump(2)));
  return outcome;
}

Result<SweepOutcome> write_reports(const fs::path& dir, const problems::Suite& suite) {
  ATREX_ASSIGN_OR_RETURN(Json manifest, read_json_file(dir / "manifest.json"));
  ATREX_ASSIGN_OR_RETURN(auto store, MemoryResultStore::open_jsonl(dir / "results.jsonl"));
  std::vector<EvalRecord> finals;
  std::map<std::string, std::map<std::string, std::string>> failed;  // agent -> op -> reason
  std::vector<std::string> agents;
  for (const auto& a : manifest.value("agents", Json::array())) agents.push_back(a.value("name", ""));
  for (const auto& a : agents) {
    for (const auto& op : manifest.value("operators", Json::array())) {
      const std::string name = op.value("operator", "");
      ATREX_ASSIGN_OR_RETURN(auto fin, store->get(agent::final_key(a, name)));
      if (!fin) continue;
      if ((*fin).value("status", "") != "evaluated") {
        failed[a][name] = (*fin).value("error", (*fin).value("status", ""));
        continue;
      }
      const std::string task_id = (*fin).value("task_id", "");
      for (const auto& shape : (*fin).value("shapes", std::vector<std::string>{})) {
        ATREX_ASSIGN_OR_RETURN(auto rec, store->get(record_key(task_id, shape)));
        if (!rec) continue;
        ATREX_ASSIGN_OR_RETURN(EvalRecord r, eval_record_from_json(*rec, (dir / "results.jsonl").string()));
        finals.push_back(std::move(r));
      }
    }
  }
  SweepOutcome out;
  for (const auto& a : agents) out.agents.push_back(scoring::score_agent(suite, a, finals, failed[a]));
  scoring::ReportContext ctx{manifest.value("sweep_id", ""), manifest.value("name", ""), manifest.value("suite", ""),
                             manifest["hardware"].value("name", ""), manifest.value("backend", ""),
                             manifest.value("device", ""), utc_timestamp_now()};
  out.report_json = dir / "report.json";
  out.report_md = dir / "report.md";
  ATREX_TRY(write_text_file_atomic(out.report_json, scoring::report_json(ctx, out.agents).dump(2)));
  ATREX_TRY(write_text_file_atomic(out.report_md, scoring::report_markdown(ctx, out.agents)));
  return out;
}

}  // namespace atrex::scheduler
