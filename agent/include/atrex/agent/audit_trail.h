// The audit trail of one (agent, operator): an append-only JSONL file
// (<results>/audit/<agent>/<operator>.jsonl) of every event of its AKA loop — generation_start,
// evaluated (proposal, source, rationale, per-shape results, decision, model usage),
// proposal_failed (an iteration without a candidate: the provider's failure, model usage),
// generation_end (reason: dropout, budget, no_new_candidates; the generation's model usage),
// final (with the (agent, operator)'s model usage). Reopening it recovers where the loop stopped: the
// generation to continue with, the iterations spent, the best correct candidate (its source is
// in the trail) and the set of sources already evaluated. Thread-safe.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"

namespace atrex::agent {

class AuditTrail {
 public:
  // Where an interrupted (agent, operator) stopped, recovered from its trail.
  struct Progress {
    int generation = 0;       // the generation to continue with
    int iterations_used = 0;  // evaluated candidates so far
    BestCandidate best;       // best correct candidate so far (source kept in the trail)
    TokenUsage usage;         // model usage of every iteration in the trail
  };

  // Opens (creating folders) and replays the file. A torn last line (a killed run) is skipped:
  // that iteration is redone. Errors: kIo when the file cannot be opened for appending;
  // kInvalidInput (naming the file and line) for an event that is not one this trail writes.
  static Result<std::unique_ptr<AuditTrail>> open(const std::filesystem::path& file);
  // Appends `event` (stamped with "ts", UTC) and flushes. Errors: kIo.
  Result<void> append(Json event);
  std::set<std::string> tried() const;
  Progress progress() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  Result<void> observe_locked(const Json& event, const std::string& where);

  std::filesystem::path file_;
  mutable std::mutex mu_;
  std::ofstream out_;
  std::set<std::string> tried_;
  Progress progress_;
};

}  // namespace atrex::agent
