// The audit trail of one (agent, operator): an append-only JSONL file
// (<results>/audit/<agent>/<operator>.jsonl) of every event of its AKA loop — generation_start
// (sub-agent, direction, worker), iteration_claimed (an iteration taken from the budget),
// evaluated (proposal, source, rationale, per-shape results, decision, model usage),
// proposal_failed (an iteration without a candidate: the provider's failure, model usage),
// generation_end (reason: dropout, budget, wall_time, tokens, cost, no_new_candidates; the
// generation's model usage), final (with the (agent, operator)'s model usage).
//
// The file is shared: the `parallel_generations` sub-agents of an (agent, operator) and the
// workers that take its later generations append to it from several processes and hosts (the
// results folder is on a shared file system). Every append holds an exclusive flock(2) on the
// file and writes one line in one write(2) with O_APPEND; before reading, an instance reads
// what others appended since (refresh). transact() makes a read-decide-append step atomic
// across processes (choosing a direction nobody took, claiming an iteration of the budget,
// ending a sub-agent). The trail is therefore where budgets are accounted: iterations
// (finished plus claimed), tokens and cost (sum of the iterations' usage), wall time (since
// the first generation_start's `t_unix_s`).
//
// Reopening or refreshing recovers where the loop stopped: per sub-agent the generation to
// continue with and whether it ended, the iterations spent, the best correct candidate (its
// source is in the trail), the directions tried and the set of sources already evaluated. A
// torn last line (a killed writer) is skipped when reading and cut off by the next append.
// Thread-safe.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"

namespace atrex::agent {

class AuditTrail {
 public:
  struct Subagent {
    int generation = 0;                // the generation to continue with
    bool started = false;              // its `generation` has a generation_start
    bool ended = false;                // a generation_end other than dropout: its chain is done
    std::string end_reason;            // that generation_end's reason
    std::string direction;             // the direction id of `generation` (when started)
    int iterations_in_generation = 0;  // finished iterations of `generation`
  };
  // Where an interrupted (agent, operator) stopped, recovered from its trail.
  struct Progress {
    int generation = 0;       // sub-agent 0's generation to continue with
    int iterations_used = 0;  // finished iterations (evaluated, proposal_failed), all sub-agents
    int iterations_claimed_open = 0;  // claimed and not finished (in flight, or a dead worker's)
    BestCandidate best;               // best correct candidate so far (source kept in the trail)
    TokenUsage usage;                 // model usage of every iteration in the trail
    std::map<int, Subagent> subagents;
    std::map<std::string, int> directions;    // direction id -> generations started in it
    std::optional<double> started_at_unix_s;  // the first generation_start
    bool final_written = false;
    // (sub-agent, generation, iteration) claimed and not finished.
    std::set<std::tuple<int, int, int>> open_claims;
  };

  // Opens (creating folders) and replays the file. Errors: kIo when the file cannot be opened;
  // kInvalidInput (naming the file and line) for an event that is not one this trail writes.
  static Result<std::unique_ptr<AuditTrail>> open(const std::filesystem::path& file);
  ~AuditTrail();
  // Appends `event` (stamped with "ts", UTC) under the file lock. Errors: kIo.
  Result<void> append(Json event);
  // Under the file lock, after reading every event appended so far: `decide` returns the events
  // to append (possibly none) as one atomic step. Errors: kIo, or decide's.
  Result<void> transact(const std::function<Result<std::vector<Json>>(const Progress&)>& decide);
  // Reads events other writers appended. Errors: kIo, kInvalidInput.
  Result<void> refresh();
  std::set<std::string> tried() const;  // as of the last refresh or append
  Progress progress() const;            // as of the last refresh or append
  const std::filesystem::path& file() const { return file_; }

 private:
  Result<void> observe_locked(const Json& event, const std::string& where);
  Result<void> read_new_locked();
  Result<void> write_locked(Json event);

  std::filesystem::path file_;
  mutable std::mutex mu_;
  int fd_ = -1;
  long long read_offset_ = 0;  // bytes of the file already observed (whole lines)
  int lines_read_ = 0;
  std::set<std::string> tried_;
  Progress progress_;
};

// The candidate with `sha256` as a trail recorded it (its first "evaluated" event), read without
// opening the file for writing (a read-only results folder): {source, file name}, or nullopt
// when the trail holds no such evaluation. Torn or unparsable lines are skipped (the trail's
// own readers judge those). Errors: kIo when the file cannot be read.
struct EvaluatedCandidate {
  std::string source;
  std::string file_name;
};
Result<std::optional<EvaluatedCandidate>> read_evaluated_candidate(
    const std::filesystem::path& file, const std::string& sha256);

}  // namespace atrex::agent
