#include "atrex/common/redis/result_store.h"

#include <thread>

#include <fmt/format.h>

namespace atrex {
namespace {

// KEYS: record key, index. ARGV: record, key name. First write wins; the index lists winners.
constexpr const char* kPut = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  return 1
end
return 0
)lua";

Result<Json> parse_record(const std::string& text, const std::string& key) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return invalid_input(fmt::format("result {}: not JSON: {}", key, e.what()));
  }
}

}  // namespace

Result<std::unique_ptr<RedisResultStore>> RedisResultStore::open(const RedisEndpoint& redis,
                                                                 std::string prefix) {
  std::unique_ptr<RedisResultStore> s(new RedisResultStore(redis, std::move(prefix)));
  ATREX_ASSIGN_OR_RETURN(auto conn, s->pool_.acquire());
  ATREX_TRY(conn->command({"PING"}));
  return s;
}

Result<bool> RedisResultStore::put(const std::string& key, const Json& record) {
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v, conn->command({"EVAL", kPut, "2", prefix_ + ":r:" + key,
                                                      prefix_ + ":r:index", record.dump(), key}));
  return v.integer == 1;
}

Result<std::optional<Json>> RedisResultStore::get(const std::string& key) {
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v, conn->command({"GET", prefix_ + ":r:" + key}));
  if (v.is_nil()) return std::optional<Json>{};
  ATREX_ASSIGN_OR_RETURN(Json j, parse_record(v.str, key));
  return std::optional<Json>{std::move(j)};
}

Result<std::optional<Json>> RedisResultStore::wait(const std::string& key,
                                                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    ATREX_ASSIGN_OR_RETURN(auto r, get(key));
    if (r || std::chrono::steady_clock::now() >= deadline) return r;
    std::this_thread::sleep_for(
        std::min(pause, std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

Result<std::vector<std::pair<std::string, Json>>> RedisResultStore::entries() {
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue keys,
                         conn->command({"LRANGE", prefix_ + ":r:index", "0", "-1"}));
  std::vector<std::pair<std::string, Json>> out;
  constexpr size_t kBatch = 512;
  for (size_t i = 0; i < keys.elements.size(); i += kBatch) {
    std::vector<std::string> cmd = {"MGET"};
    for (size_t j = i; j < std::min(keys.elements.size(), i + kBatch); ++j)
      cmd.push_back(prefix_ + ":r:" + keys.elements[j].str);
    ATREX_ASSIGN_OR_RETURN(RedisValue vals, conn->command(cmd));
    for (size_t j = 0; j < vals.elements.size(); ++j) {
      if (vals.elements[j].is_nil()) continue;
      ATREX_ASSIGN_OR_RETURN(Json rec,
                             parse_record(vals.elements[j].str, keys.elements[i + j].str));
      out.emplace_back(keys.elements[i + j].str, std::move(rec));
    }
  }
  return out;
}

}  // namespace atrex
