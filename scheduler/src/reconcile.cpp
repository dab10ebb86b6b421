#include "atrex/scheduler/reconcile.h"

#include <string_view>

#include <fmt/format.h>

#include "atrex/agent/audit_trail.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/keys.h"
#include "atrex/scheduler/build_record.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

Result<Manifest> open_results_dir(const Manifest& resolved,
                                  const std::function<void(Manifest&)>& update) {
  const fs::path dir = resolved.output;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return io_error(
        fmt::format("{}: cannot create results folder: {}", dir.string(), ec.message()));
  }
  Manifest m = resolved;
  if (fs::exists(dir / "manifest.json", ec)) {
    ATREX_ASSIGN_OR_RETURN(Manifest old, read_manifest_file(dir));
    if (old.sweep_id != resolved.sweep_id) {
      return invalid_input(
          fmt::format("{} holds results of a different sweep (id {}, this one is {}); choose "
                      "another output folder (--out) or remove that one",
                      dir.string(), old.sweep_id, resolved.sweep_id));
    }
    // Keep the lifecycle: launcher state, start times, the Redis it lives on.
    m.status = old.status;
    m.launcher = old.launcher;
    m.started_at = old.started_at;
    m.submitted_at = old.submitted_at;
    m.resumed_at = old.resumed_at;
    m.cancelled_at = old.cancelled_at;
    m.finished_at = old.finished_at;
    m.redis_url = old.redis_url;
    m.redis = old.redis;
    m.cluster = old.cluster;
    m.workers = old.workers;
    m.builds = old.builds;
  }
  record_build(m.builds, current_build_record(m.backend));
  if (update) update(m);
  ATREX_TRY(write_manifest_file(dir, m));
  return m;
}

Result<Manifest> update_manifest(const fs::path& dir,
                                 const std::function<void(Manifest&)>& update) {
  ATREX_ASSIGN_OR_RETURN(Manifest m, read_manifest_file(dir));
  update(m);
  ATREX_TRY(write_manifest_file(dir, m));
  return m;
}

namespace {

// "agent/op" for sub-agent 0 (the only one without parallel_generations), "agent/op#k" else.
std::string task_key(const std::string& agent, const std::string& op, int subagent) {
  std::string k = agent + "/" + op;
  if (subagent != 0) k += "#" + std::to_string(subagent);
  return k;
}

}  // namespace

Result<AgentTask> agent_task_for(const Manifest& sweep, const AgentSpec& a, const OperatorPlan& op,
                                 const fs::path& audit_dir, int subagent) {
  ATREX_ASSIGN_OR_RETURN(auto trail,
                         agent::AuditTrail::open(audit_dir / a.name / (op.name + ".jsonl")));
  const auto progress = trail->progress();
  AgentTask t;
  t.sweep_id = sweep.sweep_id;
  t.agent = a;
  t.op = op.name;
  t.backend = sweep.backend;
  t.hardware = sweep.hardware.name;
  t.subagent = subagent;
  auto sub = progress.subagents.find(subagent);
  t.generation = sub == progress.subagents.end() ? 0 : sub->second.generation;
  t.iterations_used = progress.iterations_used;
  t.best = progress.best;
  t.usage = progress.usage;  // model tokens and cost the trail's iterations spent
  t.seed = std::hash<std::string>{}(sweep.sweep_id + a.name + op.name) +
           static_cast<uint64_t>(subagent) * 7919u;
  t.quick_shapes = op.quick_shapes;
  t.full_shapes = op.shapes;
  t.quick_settings = sweep.quick_evaluation;
  t.full_settings = sweep.evaluation;
  return t;
}

Result<std::set<std::string>> missing_agent_tasks(const Manifest& sweep, TaskQueue& queue,
                                                  ResultStore& store) {
  // A dead-lettered agent task is finished (it failed max_deliveries times), not missing:
  // without its `error` marker a resume would enqueue it again, and again after each death.
  ATREX_TRY(finalize_dead_agent_tasks(queue, store));
  ATREX_ASSIGN_OR_RETURN(std::vector<Json> flying, queue.in_flight(kAgentStream));
  std::set<std::string> busy;
  for (const auto& body : flying) {
    // Leniently: a malformed task in flight is the runner's to reject, not a reason to stop here.
    const auto s = scoring::summarize_dead_letter(kAgentStream, DeadLetter{"", body, 0, ""});
    const Json sub = body.is_object() ? body.value("subagent", Json(0)) : Json(0);
    busy.insert(task_key(s.agent, s.op, sub.is_number_integer() ? sub.get<int>() : 0));
  }
  std::set<std::string> missing;
  for (const auto& a : sweep.agents) {
    for (const auto& op : sweep.operators) {
      ATREX_ASSIGN_OR_RETURN(auto done, store.get(final_key(a.name, op.name)));
      if (done) continue;
      if (a.parallel_generations <= 1) {
        if (!busy.count(task_key(a.name, op.name, 0))) missing.insert(task_key(a.name, op.name, 0));
        continue;
      }
      // Sub-agents whose chain ended need no task, unless all ended and the final marker is
      // still missing (the closing worker's task was lost): sub-agent 0's task then closes.
      ATREX_ASSIGN_OR_RETURN(auto trail, agent::AuditTrail::open(fs::path(sweep.output) / "audit" /
                                                                 a.name / (op.name + ".jsonl")));
      const auto progress = trail->progress();
      int ended = 0;
      std::vector<std::string> open;
      for (int k = 0; k < a.parallel_generations; ++k) {
        auto p = progress.subagents.find(k);
        if (p != progress.subagents.end() && p->second.ended) {
          ++ended;
        } else if (!busy.count(task_key(a.name, op.name, k))) {
          open.push_back(task_key(a.name, op.name, k));
        }
      }
      bool any_busy = false;
      for (int k = 0; k < a.parallel_generations; ++k)
        any_busy = any_busy || busy.count(task_key(a.name, op.name, k)) > 0;
      if (ended == a.parallel_generations && !any_busy)
        open.push_back(task_key(a.name, op.name, 0));
      missing.insert(open.begin(), open.end());
    }
  }
  return missing;
}

namespace {

// Enqueues the agent task of every pair in `pairs` from its audit trail.
Result<int> enqueue_pairs(const Manifest& sweep, TaskQueue& queue,
                          const std::set<std::string>& pairs, const ProgressFn& say,
                          const char* verb) {
  int enqueued = 0;
  for (const auto& a : sweep.agents) {
    for (const auto& op : sweep.operators) {
      for (int k = 0; k < std::max(1, a.parallel_generations); ++k) {
        if (!pairs.count(task_key(a.name, op.name, k))) continue;
        ATREX_ASSIGN_OR_RETURN(AgentTask t,
                               agent_task_for(sweep, a, op, fs::path(sweep.output) / "audit", k));
        if (say && (t.iterations_used > 0 || std::string_view(verb) != "resuming")) {
          say(fmt::format("{} {} / {}{} at generation {}, {} iterations done", verb, a.name,
                          op.name, k ? fmt::format(" (sub-agent {})", k) : "", t.generation,
                          t.iterations_used));
        }
        ATREX_TRY(queue.enqueue(kAgentStream, to_json(t)));
        ++enqueued;
      }
    }
  }
  return enqueued;
}

}  // namespace

Result<int> enqueue_missing(const Manifest& sweep, TaskQueue& queue, ResultStore& store,
                            const ProgressFn& say) {
  ATREX_ASSIGN_OR_RETURN(auto missing, missing_agent_tasks(sweep, queue, store));
  return enqueue_pairs(sweep, queue, missing, say, "resuming");
}

Result<int> requeue_lost_agent_tasks(const Manifest& sweep, TaskQueue& queue, ResultStore& store,
                                     std::set<std::string>& suspects, const ProgressFn& say) {
  ATREX_ASSIGN_OR_RETURN(auto missing, missing_agent_tasks(sweep, queue, store));
  std::set<std::string> lost;
  for (const auto& p : missing) {
    if (suspects.count(p)) lost.insert(p);
  }
  suspects.clear();
  for (const auto& p : missing) {
    if (!lost.count(p)) suspects.insert(p);
  }
  return enqueue_pairs(sweep, queue, lost, say, "lost from the queue, re-enqueued:");
}

Result<void> finalize_dead_agent_tasks(TaskQueue& queue, ResultStore& store) {
  ATREX_ASSIGN_OR_RETURN(auto dead, queue.dead_letters(kAgentStream));
  for (const auto& d : dead) {
    // Read leniently: a body that could not even be parsed is one way a task ends up here.
    const scoring::DeadLetterSummary s = scoring::summarize_dead_letter(kAgentStream, d);
    FinalMarker marker;
    marker.agent = s.agent;
    marker.op = s.op;
    marker.status = FinalStatus::kError;
    marker.error = fmt::format("agent task failed {} times: {}", d.delivery_count, d.last_error);
    ATREX_TRY(store.put(final_key(s.agent, s.op), to_json(marker)));  // first write wins
  }
  return ok();
}

Result<std::vector<scoring::DeadLetterSummary>> all_dead_letters(TaskQueue& queue) {
  std::vector<scoring::DeadLetterSummary> out;
  for (const char* stream : kAllStreams) {
    ATREX_ASSIGN_OR_RETURN(auto dead, queue.dead_letters(stream));
    for (const auto& d : dead) out.push_back(scoring::summarize_dead_letter(stream, d));
  }
  return out;
}

Result<int> count_finals(const Manifest& sweep, ResultStore& store, std::set<std::string>& seen,
                         const ProgressFn& say) {
  int done = 0;
  for (const auto& a : sweep.agent_names()) {
    for (const auto& op : sweep.operator_names()) {
      const std::string key = final_key(a, op);
      ATREX_ASSIGN_OR_RETURN(auto stored, store.get(key));
      if (!stored) continue;
      ++done;
      if (!seen.insert(a + "/" + op).second || !say) continue;
      ATREX_ASSIGN_OR_RETURN(FinalMarker f, final_marker_from_json(*stored, "result " + key));
      if (f.status == FinalStatus::kError) {
        say(fmt::format("{} / {}: error: {}", a, op, f.error));
      } else {
        say(fmt::format("{} / {}: {} (quick S = {:.4f}, {} iterations, {} generation(s))", a, op,
                        final_status_name(f.status), f.quick_score, f.iterations_used,
                        f.generations));
      }
    }
  }
  return done;
}

}  // namespace atrex::scheduler
