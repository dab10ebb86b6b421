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
#include "atrex/agent/provider.h"
#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/eval_record.h"

namespace atrex::agent {

// Evaluates a task and returns one record per shape (through the queue, or directly).
using EvalFn = std::function<Result<std::vector<EvalRecord>>(const EvalTask&)>;

enum class GenerationEnd { kDropout, kBudget, kNoIdeas };
const char* generation_end_name(GenerationEnd e);

struct GenerationResult {
  GenerationEnd end = GenerationEnd::kBudget;
  AgentTask next;  // the state to continue from (next generation after a dropout)
};

// Deterministic id of an evaluation, so a resumed sweep finds its earlier results.
std::string eval_task_id(const std::string& sweep_id, const std::string& agent,
                         const std::string& op, EvalPurpose purpose,
                         const std::string& candidate_sha, const std::vector<std::string>& shapes);

// Runs one generation.
Result<GenerationResult> run_generation(const AgentTask& task, Provider& provider,
                                        const EvalFn& evaluate, AuditTrail& audit);

// Full evaluation of task.best on task.full_shapes; kNotFound when no candidate ever passed.
Result<std::vector<EvalRecord>> run_final_evaluation(const AgentTask& task, const EvalFn& evaluate,
                                                     AuditTrail& audit);

// Quick-evaluation objective: median S_j when every shape passed, else -1.
double objective(const std::vector<EvalRecord>& records, std::string* summary);

}  // namespace atrex::agent
