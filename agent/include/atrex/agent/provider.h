// Providers propose the next candidate of an AKA iteration (DESIGN.md §7). The built-in `search`
// provider needs no model: it explores parameterised kernel templates by a measured search;
// `openai` (a chat-completions server) and `cli` (a coding-agent CLI in a staged workspace)
// plug in through the provider registry (provider_registry.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "atrex/agent/direction.h"
#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/eval_record.h"

namespace atrex::agent {

// One iteration's entry in a generation's memory.
struct Attempt {
  int generation = 0;
  int iteration = 0;
  std::string sha256;
  Json provenance;  // provider-defined, e.g. {"template": path, "params": {...}}
  bool correct = false;
  double score = -1;    // quick-evaluation objective (median S_j), -1 when incorrect
  std::string summary;  // one line: scores or the first error
  // The quick evaluation's records, one per quick shape (empty when nothing was evaluated):
  // what a model-backed provider feeds back (compile errors, wrong elements, times, S_j).
  std::vector<EvalRecord> records;
  std::string failure;  // the provider's own failure this iteration (Proposal::failure)
  TokenUsage usage;     // model usage of this iteration's proposal
};

// A quick evaluation of (source, file name) on the generation's quick shapes and settings, as
// the loop itself evaluates a proposal (the same eval task id, so the loop's own evaluation of
// that source afterwards reuses its records): the `cli` provider's atrex-eval gateway.
using QuickEvalFn = std::function<Result<std::vector<EvalRecord>>(const std::string& source,
                                                                  const std::string& file_name)>;

struct ProposalContext {
  std::string op;
  Backend backend = Backend::kCpu;
  int generation = 0;
  int iteration = 0;                   // within the generation
  uint64_t seed = 0;                   // randomness of this generation's direction
  const std::vector<Attempt>* memory;  // this generation's attempts (not earlier ones)
  const std::set<std::string>* tried;  // sha256 of every source evaluated for (agent, op)
  const BestCandidate* best;           // best kernel so far, kept across generations
  const AgentTask* task = nullptr;     // the generation's task (shapes, hardware, settings)
  // The generation's optimisation direction (direction.h), chosen when it started; null only
  // when the provider offers none.
  const Direction* direction = nullptr;
  // Evaluations a provider may ask for while it proposes (the cli provider's atrex-eval); null
  // where there is no evaluator. Callable from another thread while propose() runs.
  const QuickEvalFn* quick_eval = nullptr;
};

struct Proposal {
  std::string source;
  std::string file_name;
  Json provenance;
  std::string rationale;  // why this candidate (for the audit trail)
  // Model usage spent on this proposal (requests, tokens, cost); zero for the search provider.
  TokenUsage usage;
  // Non-empty: the provider produced no candidate this iteration (a model reply without a code
  // block, a model server that kept failing). The loop evaluates nothing, counts the
  // iteration (budget and patience), records it in the audit trail ("proposal_failed") and
  // passes it back in the next context's memory; `source` is ignored.
  std::string failure;
};

// One provider instance serves one agent task (one generation); not shared between threads.
class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string name() const = 0;
  // The next candidate, or nullopt when the provider has nothing new to try. kNotFound when it
  // cannot work on this operator at all (no templates): the (agent, operator) ends with that
  // error; other errors give the agent task back to be retried.
  virtual Result<std::optional<Proposal>> propose(const ProposalContext& ctx) = 0;
  // The directions a generation of `task` may take (direction.h), in preference order. By
  // default the knowledge base's techniques for the operator's family and backend.
  virtual std::vector<Direction> directions(const AgentTask& task) const {
    return kb_directions(task.op, task.backend);
  }
};

}  // namespace atrex::agent
