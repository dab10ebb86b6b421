// atrex.agent-task/1: one AKA generation of one (agent, operator) (DESIGN.md §7). Enqueued on
// the `agent` stream by the scheduler (first generation) and by agent workers (the next one
// after an optimisation dropout); also the agents of a sweep manifest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/eval_settings.h"

namespace atrex {

inline constexpr const char* kAgentTaskSchema = "atrex.agent-task/1";

// One agent of a sweep: who proposes candidates and with what budget. The provider's own
// settings (the search provider's template folder, a model server's URL ...) are in `options`,
// validated by the provider registry when the sweep file is read (agent/provider_registry.h).
struct AgentSpec {
  std::string name;
  std::string provider = "search";
  int iterations = 8;  // candidate evaluations per operator, over all generations
  int patience = 3;    // iterations without improvement before dropout
  int max_generations = 4;
  double min_improvement = 0.02;  // relative gain that counts as an improvement (timing noise)
  // Sub-agents of one (agent, operator) that run at once, each its own chain of generations
  // exploring its own directions; they share the best-so-far and the budgets (1: no parallelism).
  int parallel_generations = 1;
  // Budgets of one (agent, operator), shared by all its generations and sub-agents; 0 = none.
  // Checked before each iteration; when one is spent the generation ends (reason wall_time,
  // tokens or cost) and the best candidate gets the full evaluation.
  double wall_time_s = 0;         // seconds since the (agent, operator)'s first generation started
  int64_t tokens = 0;             // model tokens, prompt + completion
  double cost_usd = 0;            // model cost at the agent's price
  Json options = Json::object();  // provider-specific, already validated
};
// The flat form of tasks and manifests: {name, provider, iterations, patience,
// max_generations, min_improvement, options} and, only when not the default (so sweep ids of
// sweeps that do not use them are unchanged, and older tasks still read), the optional members
// parallel_generations, wall_time_s, tokens, cost_usd.
Json to_json(const AgentSpec& s);
Result<void> read_value(const JsonField& f, AgentSpec& out);

// The best correct candidate of an (agent, operator) so far, kept across generations.
struct BestCandidate {
  std::string source;
  std::string sha256;
  std::string file_name;
  double score = -1;  // quick-evaluation objective (median S_j); -1: none correct yet
  Json provenance = Json::object();  // provider-defined, e.g. {"template": path, "params": {...}}
  bool valid() const { return score >= 0 && !source.empty(); }
};
Json to_json(const BestCandidate& b);
Result<void> read_value(const JsonField& f, BestCandidate& out);

// Model usage of an LLM-backed provider (the `openai` chat-completions `usage` object): tokens
// as the server counted them, cost = tokens x the agent's price (USD per million tokens).
// Providers without a model (search) leave it at zero. Summed per iteration, generation,
// (agent, operator) and agent.
struct TokenUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double cost_usd = 0;
  int64_t requests = 0;  // HTTP requests sent, retries included
  // Agent turns a coding-agent CLI reports (`cli` provider: claude's num_turns, codex's
  // turn.completed events, gemini's API requests); 0 for providers that do not count them.
  // Optional on the wire (absent = 0).
  int64_t turns = 0;
  void add(const TokenUsage& o) {
    prompt_tokens += o.prompt_tokens;
    completion_tokens += o.completion_tokens;
    cost_usd += o.cost_usd;
    requests += o.requests;
    turns += o.turns;
  }
};
Json to_json(const TokenUsage& u);
Result<void> read_value(const JsonField& f, TokenUsage& out);

struct AgentTask {
  std::string sweep_id;
  AgentSpec agent;
  std::string op;
  Backend backend = Backend::kCpu;
  std::string hardware;  // hardware profile name
  int generation = 0;
  int iterations_used = 0;  // by earlier generations
  uint64_t seed = 0;        // randomness of the generation's direction
  // Which of the agent's `parallel_generations` sub-agents this task belongs to, [0, N)
  // (optional member; absent = 0).
  int subagent = 0;
  BestCandidate best;  // kept across generations
  TokenUsage usage;    // spent by earlier generations (optional member; absent = none)
  std::vector<std::string> quick_shapes;
  std::vector<std::string> full_shapes;
  EvalSettings quick_settings;
  EvalSettings full_settings;
};
Json to_json(const AgentTask& t);
// Strict: every member present and known (kInvalidInput naming it and `source`).
Result<AgentTask> agent_task_from_json(const Json& j, const std::string& source);

}  // namespace atrex
