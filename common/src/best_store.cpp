#include "atrex/common/best_store.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {
namespace {

Result<void> check_offer(const BestCandidate& b) {
  if (!b.valid()) {
    return invalid_input(fmt::format(
        "best-so-far: refusing a candidate without a correct score (score {}, {} bytes)", b.score,
        b.source.size()));
  }
  return ok();
}

// KEYS: the pair's hash. ARGV: score (as %.17g), candidate JSON. Stores both only when the
// score is strictly higher than the stored one; Redis runs the script atomically.
constexpr const char* kOffer = R"lua(
local old = redis.call('HGET', KEYS[1], 'score')
if old and tonumber(old) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'score', ARGV[1], 'candidate', ARGV[2])
return 1
)lua";

}  // namespace

Result<bool> MemoryBestStore::offer(const std::string& pair, const BestCandidate& best) {
  ATREX_TRY(check_offer(best));
  std::lock_guard lock(mu_);
  auto it = best_.find(pair);
  if (it != best_.end() && it->second.score >= best.score) return false;
  best_[pair] = best;
  return true;
}

Result<std::optional<BestCandidate>> MemoryBestStore::get(const std::string& pair) {
  std::lock_guard lock(mu_);
  auto it = best_.find(pair);
  if (it == best_.end()) return std::optional<BestCandidate>{};
  return std::optional<BestCandidate>{it->second};
}

Result<std::unique_ptr<RedisBestStore>> RedisBestStore::open(const RedisEndpoint& redis,
                                                             std::string prefix) {
  std::unique_ptr<RedisBestStore> s(new RedisBestStore(redis, std::move(prefix)));
  ATREX_ASSIGN_OR_RETURN(auto conn, s->pool_.acquire());
  ATREX_TRY(conn->command({"PING"}));
  return s;
}

Result<bool> RedisBestStore::offer(const std::string& pair, const BestCandidate& best) {
  ATREX_TRY(check_offer(best));
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v,
                         conn->command({"EVAL", kOffer, "1", prefix_ + ":best:" + pair,
                                        fmt::format("{:.17g}", best.score), to_json(best).dump()}));
  return v.integer == 1;
}

Result<std::optional<BestCandidate>> RedisBestStore::get(const std::string& pair) {
  const std::string key = prefix_ + ":best:" + pair;
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v, conn->command({"HGET", key, "candidate"}));
  if (v.is_nil()) return std::optional<BestCandidate>{};
  Json j;
  try {
    j = Json::parse(v.str);
  } catch (const Json::parse_error& e) {
    return invalid_input(fmt::format("{}: the stored best is not JSON: {}", key, e.what()));
  }
  BestCandidate b;
  ATREX_TRY(read_value(JsonField(j, key), b));
  return std::optional<BestCandidate>{std::move(b)};
}

}  // namespace atrex
