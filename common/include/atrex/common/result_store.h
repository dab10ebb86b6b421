// Idempotent result records: the first write per key wins (docs/architecture.md §2).
//
// Delivery is at-least-once, so the same evaluation may run twice; keying results by task id
// (plus shape id) and refusing later writes makes a duplicate execution harmless: it is
// never double-counted. MemoryResultStore optionally appends each accepted record to a JSONL
// file (a results directory's results.jsonl) and can be reloaded from it.
// Thread-safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

class ResultStore {
 public:
  virtual ~ResultStore() = default;
  // Stores `record` under `key` unless a record is there already. Returns true when this
  // write won, false when an earlier one did (the stored record is left unchanged).
  virtual Result<bool> put(const std::string& key, const Json& record) = 0;
  virtual Result<std::optional<Json>> get(const std::string& key) = 0;
  // Waits up to `timeout` for `key` to appear.
  virtual Result<std::optional<Json>> wait(const std::string& key,
                                           std::chrono::milliseconds timeout) = 0;
  // Every stored (key, record), in write order.
  virtual Result<std::vector<std::pair<std::string, Json>>> entries() = 0;
};

class MemoryResultStore final : public ResultStore {
 public:
  MemoryResultStore() = default;
  // Reloads records from `jsonl` (if it exists) and appends new ones to it. Each line is
  // {"key": ..., "record": {...}}. A malformed line is an error naming the file and line.
  static Result<std::unique_ptr<MemoryResultStore>> open_jsonl(const std::filesystem::path& jsonl);

  Result<bool> put(const std::string& key, const Json& record) override;
  Result<std::optional<Json>> get(const std::string& key) override;
  Result<std::optional<Json>> wait(const std::string& key,
                                   std::chrono::milliseconds timeout) override;
  Result<std::vector<std::pair<std::string, Json>>> entries() override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, size_t> index_;
  std::vector<Json> records_;
  std::vector<std::string> keys_;  // keys_[i] is records_[i]'s
  std::ofstream log_;
};

}  // namespace atrex
