// Providers propose the next candidate of an AKA iteration (docs/architecture.md §7). The built-in
// `search` provider needs no model: it explores parameterised kernel templates by a measured
// search (neighbours of the incumbent first). `openai` and `cli` providers plug in here too.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "atrex/agent/templates.h"
#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex::agent {

// One iteration's entry in a generation's memory.
struct Attempt {
  int generation = 0;
  int iteration = 0;
  std::string sha256;
  Json provenance;  // e.g. {"template": path, "params": {...}}
  bool correct = false;
  double score = -1;    // quick-evaluation objective (median S_j), -1 when incorrect
  std::string summary;  // one line: scores or the first error
};

struct BestCandidate {
  std::string source;
  std::string sha256;
  std::string file_name;
  double score = -1;  // -1: none correct yet
  Json provenance = Json::object();
  bool valid() const { return score >= 0 && !source.empty(); }
};
Json to_json(const BestCandidate& b);
BestCandidate best_candidate_from_json(const Json& j);

struct ProposalContext {
  std::string op;
  std::string backend;
  int generation = 0;
  int iteration = 0;                   // within the generation
  uint64_t seed = 0;                   // randomness of this generation's direction
  const std::vector<Attempt>* memory;  // this generation's attempts (not earlier ones)
  const std::set<std::string>* tried;  // sha256 of every source evaluated for (agent, op)
  const BestCandidate* best;           // best kernel so far, kept across generations
};

struct Proposal {
  std::string source;
  std::string file_name;
  Json provenance;
  std::string rationale;  // why this candidate (for the audit trail)
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string name() const = 0;
  // The next candidate, or nullopt when the provider has nothing new to try.
  virtual Result<std::optional<Proposal>> propose(const ProposalContext& ctx) = 0;
};

// The built-in search provider over `catalog` (must outlive the provider).
std::unique_ptr<Provider> make_search_provider(const TemplateCatalog& catalog);

}  // namespace atrex::agent
