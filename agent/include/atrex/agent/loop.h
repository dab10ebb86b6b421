// AKA: the profile-driven measure-revise loop with optimisation dropout (paper §5,
// docs/architecture.md §7).
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
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "atrex/agent/provider.h"
#include "atrex/common/records.h"

namespace atrex::agent {

struct AgentSpec {
  std::string name;
  std::string provider = "search";
  int iterations = 8;  // candidate evaluations per operator, over all generations
  int patience = 3;    // iterations without improvement before dropout
  int max_generations = 4;
  double min_improvement = 0.02;  // relative gain that counts as an improvement (timing noise)
  std::string templates;  // search provider: template folder; empty = the built-in templates
};
// The flat form carried in tasks and manifests ({"name", "provider", "iterations", ...}).
Json to_json(const AgentSpec& s);
AgentSpec agent_spec_from_flat_json(const Json& j);
// The sweep-file form ({name, provider, budget: {...}, dropout: {...}, templates}), validated.
Result<AgentSpec> agent_spec_from_json(const JsonField& f);

inline constexpr const char* kAgentTaskSchema = "atrex.agent-task/1";

struct AgentTask {
  std::string sweep_id;
  AgentSpec agent;
  std::string op;
  std::string backend;
  std::string hardware;
  int generation = 0;
  int iterations_used = 0;  // by earlier generations
  uint64_t seed = 0;
  BestCandidate best;  // kept across generations
  std::vector<std::string> quick_shapes;
  std::vector<std::string> full_shapes;
  EvalSettings quick_settings;
  EvalSettings full_settings;
};
Json to_json(const AgentTask& t);
Result<AgentTask> agent_task_from_json(const Json& j, const std::string& source);

// Evaluates a task and returns one record per shape (through the queue, or directly).
using EvalFn = std::function<Result<std::vector<EvalRecord>>(const EvalTask&)>;

// Append-only JSONL audit trail of one (agent, operator): every proposal, evaluation,
// dropout and the final evaluation. Reopening it recovers the set of evaluated sources.
class AuditTrail {
 public:
  // Where an interrupted (agent, operator) stopped, recovered from its trail.
  struct Progress {
    int generation = 0;       // the generation to continue with
    int iterations_used = 0;  // evaluated candidates so far
    BestCandidate best;       // best correct candidate so far (source kept in the trail)
  };

  static Result<std::unique_ptr<AuditTrail>> open(const std::filesystem::path& file);
  Result<void> append(Json event);
  std::set<std::string> tried() const;
  Progress progress() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  void observe_locked(const Json& event);

  std::filesystem::path file_;
  mutable std::mutex mu_;
  std::ofstream out_;
  std::set<std::string> tried_;
  Progress progress_;
};

enum class GenerationEnd { kDropout, kBudget, kNoIdeas };
const char* generation_end_name(GenerationEnd e);

struct GenerationResult {
  GenerationEnd end = GenerationEnd::kBudget;
  AgentTask next;  // the state to continue from (next generation after a dropout)
};

// Deterministic id of an evaluation, so a resumed sweep finds its earlier results.
std::string eval_task_id(const std::string& sweep_id, const std::string& agent,
                         const std::string& op, const std::string& purpose,
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
