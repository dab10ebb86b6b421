// AKA: the profile-driven measure-revise loop with optimisation dropout (paper §5, DESIGN.md §7).
//
// An agent task is one generation of one (agent, operator). Each iteration asks the provider
// for a candidate, evaluates it quickly (few shapes, few seeds) through the evaluation queue,
// and records everything in the audit trail. When the best score has not improved for
// `patience` iterations the generation ends (dropout): the next generation is a fresh
// sub-agent that keeps the best kernel and the audit trail but not this generation's
// memory, and starts in a different direction. When the iteration budget is spent, the best
// candidate gets the full evaluation (all sweep shapes, all seeds).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "atrex/agent/audit_trail.h"
#include "atrex/agent/direction.h"
#include "atrex/agent/provider.h"
#include "atrex/common/best_store.h"
#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/eval_record.h"

namespace atrex::agent {

// Evaluates a task and returns one record per shape (through the queue, or directly).
using EvalFn = std::function<Result<std::vector<EvalRecord>>(const EvalTask&)>;

// Why a generation ended: a dropout (patience spent), or the (agent, operator)'s chain of
// this sub-agent is done: the iteration budget (kBudget), the wall-time, token or cost budget,
// or a provider with nothing new to try.
enum class GenerationEnd { kDropout, kBudget, kNoIdeas, kWallTime, kTokens, kCost };
const char* generation_end_name(GenerationEnd e);

struct GenerationResult {
  GenerationEnd end = GenerationEnd::kBudget;
  AgentTask next;       // the state to continue from (next generation after a dropout)
  Direction direction;  // the direction this generation took
  // Set when this generation's end was the last of the (agent, operator)'s sub-agents to end
  // (decided atomically in the audit trail): its worker runs the one full evaluation.
  bool closes_pair = false;
  int shared_best_wins = 0;  // offers to GenerationOptions::shared_best that were stored
};

// What a generation shares with the rest of the fleet; every member may be left empty.
struct GenerationOptions {
  // The (agent, operator)'s best-so-far across sub-agents (best_store.h): read before each
  // iteration, offered every new best. Null: only this trail's and task's best.
  BestStore* shared_best = nullptr;
  // Seconds since the Unix epoch, for the wall-time budget; empty: the system clock.
  std::function<double()> now_unix_s;
  std::string worker;  // recorded in generation_start (which agent worker ran it)
  // Called with the new best quick score each time an evaluated candidate raises it (the
  // agent worker's live atrex_agent_best_score_ratio gauge); empty: nobody is told.
  std::function<void(double)> on_best;
};

// The audit-trail key of the shared best: "<agent>/<operator>".
std::string pair_key(const AgentTask& task);

// Deterministic id of an evaluation, so a resumed sweep finds its earlier results.
std::string eval_task_id(const std::string& sweep_id, const std::string& agent,
                         const std::string& op, EvalPurpose purpose,
                         const std::string& candidate_sha, const std::vector<std::string>& shapes);

// Runs one generation of sub-agent task.subagent: chooses its direction (or resumes the one
// the trail recorded for it), then iterates while the budgets (iterations, claimed in the trail
// so that parallel sub-agents never overspend them; wall time; tokens; cost) last and patience
// is not spent. A generation the trail shows started and unfinished (its worker died) resumes:
// its finished iterations stay spent, its best is kept, its memory is gone.
Result<GenerationResult> run_generation(const AgentTask& task, Provider& provider,
                                        const EvalFn& evaluate, AuditTrail& audit,
                                        const GenerationOptions& options);
Result<GenerationResult> run_generation(const AgentTask& task, Provider& provider,
                                        const EvalFn& evaluate, AuditTrail& audit);

// Full evaluation of task.best on task.full_shapes; kNotFound when no candidate ever passed.
Result<std::vector<EvalRecord>> run_final_evaluation(const AgentTask& task, const EvalFn& evaluate,
                                                     AuditTrail& audit);

// Quick-evaluation objective: median S_j when every shape passed, else -1.
double objective(const std::vector<EvalRecord>& records, std::string* summary);

}  // namespace atrex::agent
