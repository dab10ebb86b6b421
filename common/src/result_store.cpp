#include "atrex/common/result_store.h"

#include <fmt/format.h>

namespace atrex {

Result<std::unique_ptr<MemoryResultStore>> MemoryResultStore::open_jsonl(
    const std::filesystem::path& jsonl) {
  auto store = std::make_unique<MemoryResultStore>();
  std::error_code ec;
  if (std::filesystem::exists(jsonl, ec)) {
    std::ifstream in(jsonl);
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      Json entry;
      try {
        entry = Json::parse(line);
      } catch (const Json::parse_error& e) {
        // A torn last line (process killed mid-write) is dropped: that record is re-done.
        if (in.peek() == EOF) break;
        return invalid_input(
            fmt::format("{}:{}: not valid JSON: {}", jsonl.string(), line_no, e.what()));
      }
      if (!entry.is_object() || !entry.contains("key") || !entry["key"].is_string() ||
          !entry.contains("record")) {
        return invalid_input(fmt::format("{}:{}: expected {{\"key\": string, \"record\": object}}",
                                         jsonl.string(), line_no));
      }
      const std::string key = entry["key"].get<std::string>();
      if (!store->index_.count(key)) {
        store->index_[key] = store->records_.size();
        store->records_.push_back(std::move(entry["record"]));
        store->keys_.push_back(key);
      }
    }
  }
  if (jsonl.has_parent_path()) std::filesystem::create_directories(jsonl.parent_path(), ec);
  store->log_.open(jsonl, std::ios::app);
  if (!store->log_) return io_error(fmt::format("{}: cannot open for appending", jsonl.string()));
  return store;
}

Result<bool> MemoryResultStore::put(const std::string& key, const Json& record) {
  {
    std::lock_guard lock(mu_);
    if (index_.count(key)) return false;
    index_[key] = records_.size();
    records_.push_back(record);
    keys_.push_back(key);
    if (log_.is_open()) {
      log_ << Json{{"key", key}, {"record", record}}.dump() << '\n';
      log_.flush();
      if (!log_) return io_error("results log: write failed");
    }
  }
  cv_.notify_all();
  return true;
}

Result<std::optional<Json>> MemoryResultStore::get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::optional<Json>{};
  return std::optional<Json>{records_[it->second]};
}

Result<std::optional<Json>> MemoryResultStore::wait(const std::string& key,
                                                    std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return index_.count(key) > 0; });
  auto it = index_.find(key);
  if (it == index_.end()) return std::optional<Json>{};
  return std::optional<Json>{records_[it->second]};
}

Result<std::vector<std::pair<std::string, Json>>> MemoryResultStore::entries() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, Json>> out;
  out.reserve(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) out.emplace_back(keys_[i], records_[i]);
  return out;
}

}  // namespace atrex
