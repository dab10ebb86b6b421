// ResultStore on Redis: `SET <prefix>:r:<key> <record> NX` — the first write wins, so a task
// executed twice (at-least-once delivery) is stored, and counted, once. Accepted keys are
// appended to <prefix>:r:index to list them in write order. wait() polls with backoff.
#pragma once

#include <memory>
#include <string>

#include "atrex/common/redis/connection.h"
#include "atrex/common/result_store.h"

namespace atrex {

class RedisResultStore final : public ResultStore {
 public:
  static Result<std::unique_ptr<RedisResultStore>> open(const RedisEndpoint& redis,
                                                        std::string prefix = "atrex");

  Result<bool> put(const std::string& key, const Json& record) override;
  Result<std::optional<Json>> get(const std::string& key) override;
  Result<std::optional<Json>> wait(const std::string& key,
                                   std::chrono::milliseconds timeout) override;
  // (key, record) pairs in write order, e.g. to archive a sweep's results as JSONL.
  Result<std::vector<std::pair<std::string, Json>>> entries() override;

 private:
  RedisResultStore(const RedisEndpoint& redis, std::string prefix)
      : pool_(redis), prefix_(std::move(prefix)) {}
  RedisPool pool_;
  std::string prefix_;
};

}  // namespace atrex
