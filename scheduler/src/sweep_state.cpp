#include "atrex/scheduler/sweep_state.h"

#include <fmt/format.h>

#include "atrex/agent/worker.h"
#include "atrex/common/clock.h"
#include "atrex/scoring/report.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

Result<Json> open_results_dir(const ResolvedSweep& sweep, const Json& fields) {
  std::error_code ec;
  fs::create_directories(sweep.output, ec);
  if (ec)
    return io_error(
        fmt::format("{}: cannot create results folder: {}", sweep.output.string(), ec.message()));
  const fs::path file = sweep.output / "manifest.json";
  Json manifest = sweep.to_manifest();
  if (fs::exists(file, ec)) {
    ATREX_ASSIGN_OR_RETURN(Json old, read_json_file(file));
    const std::string old_id = old.value("sweep_id", "");
    if (old_id != sweep.sweep_id) {
      return invalid_input(fmt::format(
          "{} holds results of a different sweep (id {}, this one is {}); choose another "
          "output folder (--out) or remove that one",
          sweep.output.string(), old_id, sweep.sweep_id));
    }
    for (auto& [k, v] : old.items()) {
      if (!manifest.contains(k)) manifest[k] = v;  // keep launcher state, start times, ...
    }
  }
  manifest["output"] = fs::absolute(sweep.output).string();
  manifest.update(fields);
  ATREX_TRY(write_text_file_atomic(file, manifest.dump(2)));
  return manifest;
}

Result<Json> update_manifest(const fs::path& dir, const Json& fields) {
  ATREX_ASSIGN_OR_RETURN(Json manifest, read_json_file(dir / "manifest.json"));
  manifest.update(fields);
  ATREX_TRY(write_text_file_atomic(dir / "manifest.json", manifest.dump(2)));
  return manifest;
}

Result<agent::AgentTask> agent_task_for(const ResolvedSweep& sweep, const agent::AgentSpec& a,
                                        const OperatorPlan& op, const fs::path& audit_dir) {
  ATREX_ASSIGN_OR_RETURN(auto trail,
                         agent::AuditTrail::open(audit_dir / a.name / (op.name + ".jsonl")));
  const auto progress = trail->progress();
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

Result<int> enqueue_missing(const ResolvedSweep& sweep, TaskQueue& queue, ResultStore& store,
                            const ProgressFn& say) {
  // A dead-lettered agent task is finished (it failed max_deliveries times), not missing:
  // without its `error` marker a resume would enqueue it again, and again after each death.
  ATREX_TRY(finalize_dead_agent_tasks(queue, store));
  ATREX_ASSIGN_OR_RETURN(std::vector<Json> flying, queue.in_flight(agent::kAgentStream));
  std::set<std::string> busy;
  for (const auto& body : flying)
    busy.insert(body["agent"].value("name", "") + "/" + body.value("operator", ""));
  int enqueued = 0;
  for (const auto& a : sweep.spec.agents) {
    for (const auto& op : sweep.operators) {
      ATREX_ASSIGN_OR_RETURN(auto done, store.get(agent::final_key(a.name, op.name)));
      if (done || busy.count(a.name + "/" + op.name)) continue;
      ATREX_ASSIGN_OR_RETURN(agent::AgentTask t,
                             agent_task_for(sweep, a, op, sweep.output / "audit"));
      if (t.iterations_used > 0 && say) {
        say(fmt::format("resuming {} / {} at generation {}, {} iterations done", a.name, op.name,
                        t.generation, t.iterations_used));
      }
      ATREX_TRY(queue.enqueue(agent::kAgentStream, agent::to_json(t)));
      ++enqueued;
    }
  }
  return enqueued;
}

Result<void> finalize_dead_agent_tasks(TaskQueue& queue, ResultStore& store) {
  ATREX_ASSIGN_OR_RETURN(auto dead, queue.dead_letters(agent::kAgentStream));
  for (const auto& d : dead) {
    const std::string a = d.body["agent"].value("name", ""), op = d.body.value("operator", "");
    ATREX_TRY(store.put(agent::final_key(a, op),
                        Json{{"schema", agent::kFinalSchema},
                             {"agent", a},
                             {"operator", op},
                             {"status", "error"},
                             {"error", fmt::format("agent task failed {} times: {}",
                                                   d.delivery_count, d.last_error)}}));
  }
  return ok();
}

Json dead_letter_json(std::string_view stream, const DeadLetter& d) {
  const Json& b = d.body;
  Json j{{"queue", std::string(stream)},   {"message_id", d.message_id},
         {"deliveries", d.delivery_count}, {"error", d.last_error},
         {"kind", b.value("kind", "")},    {"operator", b.value("operator", "")}};
  if (b.value("kind", "") == "eval") {
    const Json c = b.value("candidate", Json::object());
    j["agent"] = c.value("agent", "");
    j["task_id"] = b.value("task_id", "");
    j["purpose"] = b.value("purpose", "");
    j["candidate"] = c.value("file_name", "");
    j["candidate_sha256"] = c.value("sha256", "");
  } else {
    j["agent"] = b.value("agent", Json::object()).value("name", "");
    j["generation"] = b.value("generation", 0);
  }
  return j;
}

std::string dead_letters_markdown(const std::vector<Json>& dead) {
  using scoring::markdown_cell;
  std::string md =
      "\n## Dead-lettered tasks\n\nThe sweep completed without these: their workers failed or died "
      "on every "
      "delivery.\n\n| queue | operator | agent | candidate | deliveries | last error |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& d : dead) {
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", markdown_cell(d.value("queue", "")),
                      markdown_cell(d.value("operator", "")), markdown_cell(d.value("agent", "")),
                      markdown_cell(d.value("candidate", "")), d.value("deliveries", 0),
                      markdown_cell(d.value("error", "")));
  }
  return md;
}

Result<int> count_finals(const std::vector<std::string>& agents,
                         const std::vector<std::string>& ops, ResultStore& store,
                         std::set<std::string>& seen, const ProgressFn& say) {
  int done = 0;
  for (const auto& a : agents) {
    for (const auto& op : ops) {
      ATREX_ASSIGN_OR_RETURN(auto fin, store.get(agent::final_key(a, op)));
      if (!fin) continue;
      ++done;
      if (!seen.insert(a + "/" + op).second || !say) continue;
      const Json& f = *fin;
      if (f.value("status", "") == "error") {
        say(fmt::format("{} / {}: error: {}", a, op, f.value("error", "")));
      } else {
        say(fmt::format("{} / {}: {} (quick S = {:.4f}, {} iterations, {} generation(s))", a, op,
                        f.value("status", ""), f.value("quick_score", -1.0),
                        f.value("iterations_used", 0), f.value("generations", 0)));
      }
    }
  }
  return done;
}

Result<SweepOutcome> reduce(const fs::path& dir, const problems::Suite& suite, ResultStore& store) {
  ATREX_ASSIGN_OR_RETURN(Json manifest, read_json_file(dir / "manifest.json"));
  std::vector<EvalRecord> finals;
  std::map<std::string, std::map<std::string, std::string>> failed;  // agent -> op -> reason
  std::vector<std::string> agents;
  for (const auto& a : manifest.value("agents", Json::array()))
    agents.push_back(a.value("name", ""));
  for (const auto& a : agents) {
    for (const auto& op : manifest.value("operators", Json::array())) {
      const std::string name = op.value("operator", "");
      ATREX_ASSIGN_OR_RETURN(auto fin, store.get(agent::final_key(a, name)));
      if (!fin) continue;
      if ((*fin).value("status", "") != "evaluated") {
        failed[a][name] = (*fin).value("error", (*fin).value("status", ""));
        continue;
      }
      const std::string task_id = (*fin).value("task_id", "");
      for (const auto& shape : (*fin).value("shapes", std::vector<std::string>{})) {
        ATREX_ASSIGN_OR_RETURN(auto rec, store.get(record_key(task_id, shape)));
        if (!rec) continue;
        ATREX_ASSIGN_OR_RETURN(EvalRecord r,
                               eval_record_from_json(*rec, "result " + record_key(task_id, shape)));
        finals.push_back(std::move(r));
      }
    }
  }
  SweepOutcome out;
  for (const auto& a : agents)
    out.agents.push_back(scoring::score_agent(suite, a, finals, failed[a]));
  scoring::ReportContext ctx{manifest.value("sweep_id", ""),
                             manifest.value("name", ""),
                             manifest.value("suite", ""),
                             manifest["hardware"].value("name", ""),
                             manifest.value("backend", ""),
                             manifest.value("device", ""),
                             utc_timestamp_now()};
  out.report_json = dir / "report.json";
  out.report_md = dir / "report.md";
  ATREX_TRY(write_text_file_atomic(out.report_json, scoring::report_json(ctx, out.agents).dump(2)));
  ATREX_TRY(write_text_file_atomic(out.report_md, scoring::report_markdown(ctx, out.agents)));
  return out;
}

}  // namespace atrex::scheduler
