#include "atrex/agent/loop.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/hash.h"

namespace atrex::agent {

const char* generation_end_name(GenerationEnd e) {
  switch (e) {
    case GenerationEnd::kDropout: return "dropout";
    case GenerationEnd::kBudget: return "budget";
    case GenerationEnd::kNoIdeas: return "no_new_candidates";
    case GenerationEnd::kWallTime: return "wall_time";
    case GenerationEnd::kTokens: return "tokens";
    case GenerationEnd::kCost: return "cost";
  }
  ATREX_UNREACHABLE("GenerationEnd");
}

std::string eval_task_id(const std::string& sweep_id, const std::string& agent,
                         const std::string& op, EvalPurpose purpose,
                         const std::string& candidate_sha, const std::vector<std::string>& shapes) {
  std::string material = sweep_id + "\n" + agent + "\n" + op + "\n" + eval_purpose_name(purpose) +
                         "\n" + candidate_sha;
  for (const auto& s : shapes) material += "\n" + s;
  return fmt::format("{}-{}-{}", op, eval_purpose_name(purpose),
                     sha256_hex(material).substr(0, 16));
}

double objective(const std::vector<EvalRecord>& records, std::string* summary) {
  std::vector<double> s;
  for (const auto& r : records) {
    if (r.status != EvalStatus::kOk || !r.s_j) {
      if (summary) {
        *summary = fmt::format("shape {}: {}: {}", r.shape_id, eval_status_name(r.status),
                               r.error.substr(0, 300));
      }
      return -1;
    }
    s.push_back(*r.s_j);
  }
  if (s.empty()) return -1;
  std::sort(s.begin(), s.end());
  const double med = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  if (summary) {
    *summary = fmt::format("median S_j {:.4f} over {} shapes", med, s.size());
    for (const auto& r : records)
      *summary +=
          fmt::format("; {}: {:.2f} us", r.shape_id, r.timing ? r.timing->time_us_median : 0.0);
  }
  return med;
}

namespace {

EvalTask make_eval_task(const AgentTask& t, EvalPurpose purpose, const std::string& source,
                        const std::string& file_name, const std::vector<std::string>& shapes,
                        const EvalSettings& settings, int iteration) {
  EvalTask e;
  e.sweep_id = t.sweep_id;
  e.operator_name = t.op;
  e.shape_ids = shapes;
  e.hardware = t.hardware;
  e.purpose = purpose;
  e.settings = settings;
  e.candidate.source = source;
  e.candidate.sha256 = sha256_hex(source);
  e.candidate.backend = t.backend;
  e.candidate.agent = t.agent.name;
  e.candidate.generation = t.generation;
  e.candidate.iteration = iteration;
  e.candidate.file_name = file_name;
  e.task_id = eval_task_id(t.sweep_id, t.agent.name, t.op, purpose, e.candidate.sha256, shapes);
  return e;
}

}  // namespace

namespace {

Json records_json(const std::vector<EvalRecord>& records) {
  Json recs = Json::array();
  for (const auto& r : records) {
    recs.push_back(Json{{"shape_id", r.shape_id},
                        {"status", eval_status_name(r.status)},
                        {"time_us_median", r.timing ? r.timing->time_us_median : 0.0},
                        {"s_j", r.s_j ? Json(*r.s_j) : Json(nullptr)},
                        {"error", r.error.substr(0, 500)}});
  }
  return recs;
}

// One iteration without a candidate (Proposal::failure): nothing is evaluated.
Result<Attempt> record_failed_proposal(const AgentTask& task, int it, Proposal& proposal,
                                       AuditTrail& audit, double best_score) {
  Attempt a;
  a.generation = task.generation;
  a.iteration = it;
  a.provenance = proposal.provenance;
  a.failure = proposal.failure;
  a.usage = proposal.usage;
  a.summary = "no candidate: " + proposal.failure.substr(0, 300);
  ATREX_TRY(audit.append(Json{{"event", "proposal_failed"},
                              {"subagent", task.subagent},
                              {"generation", task.generation},
                              {"iteration", it},
                              {"provenance", a.provenance},
                              {"failure", proposal.failure},
                              {"rationale", proposal.rationale},
                              {"usage", to_json(a.usage)},
                              {"best_score", best_score}}));
  spdlog::info("[{} {} g{} i{}] no candidate: {}", task.agent.name, task.op, task.generation, it,
               proposal.failure.substr(0, 200));
  return a;
}

// Evaluates a proposal quickly, keeps the best in `state` and records it ("evaluated").
Result<Attempt> evaluate_proposal(const AgentTask& task, int it, const Proposal& proposal,
                                  const EvalFn& evaluate, AuditTrail& audit, AgentTask& state,
                                  bool& improved) {
  EvalTask et = make_eval_task(task, EvalPurpose::kQuick, proposal.source, proposal.file_name,
                               task.quick_shapes, task.quick_settings, it);
  ATREX_ASSIGN_OR_RETURN(std::vector<EvalRecord> records, evaluate(et));
  Attempt a;
  a.generation = task.generation;
  a.iteration = it;
  a.sha256 = et.candidate.sha256;
  a.provenance = proposal.provenance;
  a.usage = proposal.usage;
  a.score = objective(records, &a.summary);
  a.correct = a.score >= 0;
  const double prev = state.best.score;
  improved = a.correct && (prev < 0 || a.score > prev * (1.0 + task.agent.min_improvement));
  if (a.correct && a.score > prev) {  // keep the best even when the gain is within noise
    state.best =
        BestCandidate{proposal.source, a.sha256, proposal.file_name, a.score, proposal.provenance};
  }
  ATREX_TRY(audit.append(
      Json{{"event", "evaluated"},
           {"subagent", task.subagent},
           {"generation", task.generation},
           {"iteration", it},
           {"sha256", a.sha256},
           {"task_id", et.task_id},
           {"provenance", a.provenance},
           {"file_name", proposal.file_name},
           {"source", proposal.source},
           {"rationale", proposal.rationale},
           {"score", a.score},
           {"summary", a.summary},
           {"decision", !a.correct ? "incorrect" : (improved ? "improved" : "no_gain")},
           {"best_score", state.best.score},
           {"usage", to_json(a.usage)},
           {"records", records_json(records)}}));
  const std::string what = proposal.provenance.contains("template")
                               ? proposal.provenance.value("template", "") + " " +
                                     proposal.provenance.value("params", Json::object()).dump()
                               : proposal.provenance.value("provider", "") + " " +
                                     proposal.provenance.value("model", "");
  spdlog::info("[{} {} g{} i{}] {} -> {}", task.agent.name, task.op, task.generation, it, what,
               a.summary);
  a.records = std::move(records);
  return a;
}

}  // namespace

std::string pair_key(const AgentTask& task) { return task.agent.name + "/" + task.op; }

namespace {

double system_now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The generation's direction: the one the trail recorded when it resumes, else (atomically
// with the generation_start that records it) one no generation of the (agent, operator) took.
Result<Direction> start_generation(const AgentTask& task, const std::vector<Direction>& choices,
                                   AuditTrail& audit, const GenerationOptions& options,
                                   double now) {
  Direction chosen{"none", "no direction (the provider offers none)", ""};
  ATREX_TRY(audit.transact([&](const AuditTrail::Progress& p) -> Result<std::vector<Json>> {
    auto sub = p.subagents.find(task.subagent);
    const bool resumed = sub != p.subagents.end() && sub->second.started &&
                         sub->second.generation == task.generation && !sub->second.ended;
    bool repeated = false;
    if (resumed && !sub->second.direction.empty()) {
      chosen.id = sub->second.direction;
      for (const auto& d : choices) {
        if (d.id == chosen.id) chosen = d;
      }
    } else if (!choices.empty()) {
      chosen = choose_direction(choices, p.directions, &repeated);
    }
    Json event{{"event", "generation_start"},
               {"subagent", task.subagent},
               {"generation", task.generation},
               {"iterations_used", std::max(task.iterations_used, p.iterations_used)},
               {"best_score", task.best.score},
               {"best_sha256", task.best.sha256},
               {"direction", Json{{"id", chosen.id}, {"title", chosen.title}}},
               {"direction_repeated", repeated},
               {"t_unix_s", now}};
    if (resumed) event["resumed"] = true;
    if (!options.worker.empty()) event["worker"] = options.worker;
    return std::vector<Json>{std::move(event)};
  }));
  return chosen;
}

// Takes iteration `it` of this generation from the budgets, or says which budget is spent.
// Parallel sub-agents claim under the trail's lock, so together they never exceed the
// iteration budget; a claim a killed worker left is taken over by the same iteration redone.
Result<std::optional<GenerationEnd>> claim_iteration(const AgentTask& task, int it,
                                                     AuditTrail& audit, double now) {
  std::optional<GenerationEnd> spent;
  const AgentSpec& a = task.agent;
  ATREX_TRY(audit.transact([&](const AuditTrail::Progress& p) -> Result<std::vector<Json>> {
    const bool mine = p.open_claims.count({task.subagent, task.generation, it}) > 0;
    const int used = std::max(task.iterations_used, p.iterations_used) + p.iterations_claimed_open -
                     (mine ? 1 : 0);
    const TokenUsage& u = p.usage.requests >= task.usage.requests ? p.usage : task.usage;
    if (used >= a.iterations) {
      spent = GenerationEnd::kBudget;
    } else if (a.tokens > 0 && u.prompt_tokens + u.completion_tokens >= a.tokens) {
      spent = GenerationEnd::kTokens;
    } else if (a.cost_usd > 0 && u.cost_usd >= a.cost_usd) {
      spent = GenerationEnd::kCost;
    } else if (a.wall_time_s > 0 && p.started_at_unix_s &&
               now - *p.started_at_unix_s >= a.wall_time_s) {
      spent = GenerationEnd::kWallTime;
    }
    if (spent || mine) return std::vector<Json>{};
    return std::vector<Json>{Json{{"event", "iteration_claimed"},
                                  {"subagent", task.subagent},
                                  {"generation", task.generation},
                                  {"iteration", it}}};
  }));
  return spent;
}

}  // namespace

Result<GenerationResult> run_generation(const AgentTask& task, Provider& provider,
                                        const EvalFn& evaluate, AuditTrail& audit) {
  return run_generation(task, provider, evaluate, audit, GenerationOptions{});
}

Result<GenerationResult> run_generation(const AgentTask& task, Provider& provider,
                                        const EvalFn& evaluate, AuditTrail& audit,
                                        const GenerationOptions& options) {
  const auto now = [&] { return options.now_unix_s ? options.now_unix_s() : system_now_unix_s(); };
  GenerationResult result;
  result.next = task;
  AgentTask& state = result.next;
  std::vector<Attempt> memory;  // this generation only: a dropout starts without it
  TokenUsage generation_usage;
  int since_improvement = 0;
  const std::vector<Direction> choices = provider.directions(task);
  ATREX_ASSIGN_OR_RETURN(result.direction, start_generation(task, choices, audit, options, now()));
  // A resumed generation continues its iteration numbering (the claims and eval task ids).
  const auto started = audit.progress();
  const auto sub = started.subagents.find(task.subagent);
  const int first_it = sub == started.subagents.end() ? 0 : sub->second.iterations_in_generation;
  for (int it = first_it;; ++it) {
    ATREX_TRY(audit.refresh());
    {
      const auto p = audit.progress();
      state.iterations_used = std::max(state.iterations_used, p.iterations_used);
      if (p.usage.requests >= state.usage.requests) state.usage = p.usage;
      if (p.best.score > state.best.score) state.best = p.best;
    }
    if (options.shared_best) {
      ATREX_ASSIGN_OR_RETURN(std::optional<BestCandidate> shared,
                             options.shared_best->get(pair_key(task)));
      if (shared && shared->score > state.best.score) state.best = std::move(*shared);
    }
    ATREX_ASSIGN_OR_RETURN(std::optional<GenerationEnd> spent,
                           claim_iteration(state, it, audit, now()));
    if (spent) {
      result.end = *spent;
      break;
    }
    const std::set<std::string> tried = audit.tried();
    ProposalContext ctx{task.op, task.backend, task.generation, it,     task.seed,
                        &memory, &tried,       &state.best,     &state, &result.direction};
    const QuickEvalFn quick_eval = [&](const std::string& source, const std::string& file_name) {
      return evaluate(make_eval_task(task, EvalPurpose::kQuick, source, file_name,
                                     task.quick_shapes, task.quick_settings, it));
    };
    ctx.quick_eval = &quick_eval;
    ATREX_ASSIGN_OR_RETURN(std::optional<Proposal> proposal, provider.propose(ctx));
    if (!proposal) {
      result.end = GenerationEnd::kNoIdeas;
      break;
    }
    generation_usage.add(proposal->usage);
    state.usage.add(proposal->usage);
    ++state.iterations_used;
    if (!proposal->failure.empty()) {
      ATREX_ASSIGN_OR_RETURN(Attempt a,
                             record_failed_proposal(task, it, *proposal, audit, state.best.score));
      memory.push_back(std::move(a));
      ++since_improvement;
    } else {
      bool improved = false;
      const double before = state.best.score;
      ATREX_ASSIGN_OR_RETURN(
          Attempt a, evaluate_proposal(task, it, *proposal, evaluate, audit, state, improved));
      if (options.shared_best && state.best.score > before) {
        ATREX_ASSIGN_OR_RETURN(bool won, options.shared_best->offer(pair_key(task), state.best));
        result.shared_best_wins += won;
      }
      if (options.on_best && state.best.score > before && state.best.score >= 0)
        options.on_best(state.best.score);
      since_improvement = improved ? 0 : since_improvement + 1;
      memory.push_back(std::move(a));
    }
    if (since_improvement >= task.agent.patience &&
        task.generation + 1 < task.agent.max_generations &&
        state.iterations_used < task.agent.iterations) {
      result.end = GenerationEnd::kDropout;
      break;
    }
  }
  // The end, and whether it is the last sub-agent's, in one step: exactly one worker of the
  // (agent, operator) learns that it closes it.
  ATREX_TRY(audit.transact([&](const AuditTrail::Progress& p) -> Result<std::vector<Json>> {
    int ended = 0;
    for (int s = 0; s < task.agent.parallel_generations; ++s) {
      auto e = p.subagents.find(s);
      ended += (s == task.subagent) || (e != p.subagents.end() && e->second.ended);
    }
    const bool already = p.subagents.count(task.subagent) && p.subagents.at(task.subagent).ended;
    result.closes_pair = result.end != GenerationEnd::kDropout && !already &&
                         ended == task.agent.parallel_generations;
    return std::vector<Json>{Json{{"event", "generation_end"},
                                  {"subagent", task.subagent},
                                  {"generation", task.generation},
                                  {"reason", generation_end_name(result.end)},
                                  {"direction", result.direction.id},
                                  {"iterations_used", state.iterations_used},
                                  {"best_score", state.best.score},
                                  {"best_sha256", state.best.sha256},
                                  {"closes_pair", result.closes_pair},
                                  {"usage", to_json(generation_usage)},
                                  {"usage_total", to_json(state.usage)}}};
  }));
  if (result.end == GenerationEnd::kDropout) {
    state.generation = task.generation + 1;  // a fresh sub-agent: new direction, no memory
  }
  return result;
}

Result<std::vector<EvalRecord>> run_final_evaluation(const AgentTask& task, const EvalFn& evaluate,
                                                     AuditTrail& audit) {
  if (!task.best.valid()) {
    ATREX_TRY(audit.append(Json{
        {"event", "final"}, {"status", "no_correct_candidate"}, {"usage", to_json(task.usage)}}));
    return not_found(
        fmt::format("agent {} found no correct candidate for {}", task.agent.name, task.op));
  }
  EvalTask et = make_eval_task(task, EvalPurpose::kFull, task.best.source, task.best.file_name,
                               task.full_shapes, task.full_settings, 0);
  et.candidate.generation = task.generation;
  ATREX_ASSIGN_OR_RETURN(std::vector<EvalRecord> records, evaluate(et));
  int passed = 0;
  for (const auto& r : records) passed += r.status == EvalStatus::kOk;
  ATREX_TRY(audit.append(Json{{"event", "final"},
                              {"task_id", et.task_id},
                              {"sha256", et.candidate.sha256},
                              {"provenance", task.best.provenance},
                              {"shapes", records.size()},
                              {"shapes_passed", passed},
                              {"usage", to_json(task.usage)}}));
  return records;
}

}  // namespace atrex::agent
