#include "atrex/agent/loop.h"

#include <algorithm>

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

Result<GenerationResult> run_generation(const AgentTask& task, Provider& provider,
                                        const EvalFn& evaluate, AuditTrail& audit) {
  GenerationResult result;
  result.next = task;
  AgentTask& state = result.next;
  std::vector<Attempt> memory;  // this generation only: a dropout starts without it
  TokenUsage generation_usage;
  int since_improvement = 0;
  ATREX_TRY(audit.append(Json{{"event", "generation_start"},
                              {"generation", task.generation},
                              {"iterations_used", task.iterations_used},
                              {"best_score", task.best.score},
                              {"best_sha256", task.best.sha256}}));
  for (int it = 0;; ++it) {
    if (state.iterations_used >= task.agent.iterations) {
      result.end = GenerationEnd::kBudget;
      break;
    }
    const std::set<std::string> tried = audit.tried();
    ProposalContext ctx{task.op, task.backend, task.generation, it,    task.seed,
                        &memory, &tried,       &state.best,     &state};
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
      ATREX_ASSIGN_OR_RETURN(
          Attempt a, evaluate_proposal(task, it, *proposal, evaluate, audit, state, improved));
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
  ATREX_TRY(audit.append(Json{{"event", "generation_end"},
                              {"generation", task.generation},
                              {"reason", generation_end_name(result.end)},
                              {"iterations_used", state.iterations_used},
                              {"best_score", state.best.score},
                              {"best_sha256", state.best.sha256},
                              {"usage", to_json(generation_usage)},
                              {"usage_total", to_json(state.usage)}}));
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
