// The best-so-far of an (agent, operator), shared by every sub-agent of it (DESIGN.md §7,
// issue 13 item 4): `parallel_generations` sub-agents explore different directions at once on
// different agent workers, and each builds on the best kernel any of them found.
//
// The value only ever improves: offer() stores a candidate only when its score is strictly
// higher than the stored one, in one atomic step (Redis: one Lua script, which Redis runs
// without interleaving another command,
// https://redis.io/docs/latest/develop/interact/programmability/eval-intro/; in memory: under a
// mutex), so a writer holding a stale, lower score never overwrites a higher one however the
// writers race. Scores are the quick-evaluation objective (median S_j, a ratio >= 0); a negative
// score (incorrect candidate) is never stored. Thread-safety: all methods are thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "atrex/common/error.h"
#include "atrex/common/redis/connection.h"
#include "atrex/common/wire/agent_task.h"

namespace atrex {

class BestStore {
 public:
  virtual ~BestStore() = default;
  // Stores `best` for `pair` ("<agent>/<operator>") when best.score > the stored score (or none
  // is stored). Returns true when this write won. kInvalidInput for a best that is not valid().
  virtual Result<bool> offer(const std::string& pair, const BestCandidate& best) = 0;
  // The stored best, or nullopt. kInvalidInput (naming the key) when what is stored does not read.
  virtual Result<std::optional<BestCandidate>> get(const std::string& pair) = 0;
};

class MemoryBestStore final : public BestStore {
 public:
  Result<bool> offer(const std::string& pair, const BestCandidate& best) override;
  Result<std::optional<BestCandidate>> get(const std::string& pair) override;

 private:
  std::mutex mu_;
  std::map<std::string, BestCandidate> best_;
};

// Keys: "<prefix>:best:<pair>", a hash {score, candidate} (candidate: the BestCandidate's JSON).
class RedisBestStore final : public BestStore {
 public:
  static Result<std::unique_ptr<RedisBestStore>> open(const RedisEndpoint& redis,
                                                      std::string prefix);
  Result<bool> offer(const std::string& pair, const BestCandidate& best) override;
  Result<std::optional<BestCandidate>> get(const std::string& pair) override;

 private:
  RedisBestStore(const RedisEndpoint& redis, std::string prefix)
      : pool_(redis), prefix_(std::move(prefix)) {}
  RedisPool pool_;
  std::string prefix_;
};

}  // namespace atrex
