#include "atrex/common/redis/sweep_store.h"

#include <algorithm>

#include <fmt/format.h>

#include "atrex/common/redis/connection.h"
#include "atrex/common/wire/keys.h"

namespace atrex {

QueueOptions queue_options(const ClusterOptions& c) {
  QueueOptions q;
  q.lease_timeout = std::chrono::seconds(std::max(1, c.lease_timeout_s));
  q.max_deliveries = std::max(1, c.max_deliveries);
  return q;
}

Result<SweepStore> SweepStore::open(const RedisEndpoint& redis, std::string_view sweep_id,
                                    const QueueOptions& options) {
  SweepStore s;
  const std::string prefix = sweep_prefix(sweep_id);
  ATREX_ASSIGN_OR_RETURN(s.queue, RedisQueue::open(redis, options, prefix));
  ATREX_ASSIGN_OR_RETURN(s.results, RedisResultStore::open(redis, prefix));
  ATREX_ASSIGN_OR_RETURN(s.best, RedisBestStore::open(redis, prefix));
  return s;
}

Result<Manifest> fetch_manifest(const RedisEndpoint& redis, std::string_view sweep_id) {
  ATREX_ASSIGN_OR_RETURN(auto conn, RedisConnection::connect(redis));
  const std::string key = manifest_key(sweep_id);
  ATREX_ASSIGN_OR_RETURN(RedisValue v, conn->command({"GET", key}));
  if (v.is_nil()) {
    return not_found(fmt::format("no sweep {} in Redis {}", sweep_id, redis.redacted()));
  }
  Json j;
  try {
    j = Json::parse(v.str);
  } catch (const Json::parse_error& e) {
    return invalid_input(fmt::format("{}: the sweep's manifest is not JSON: {}", key, e.what()));
  }
  return manifest_from_json(j, key);
}

Result<void> publish_manifest(const RedisEndpoint& redis, const Manifest& manifest) {
  ATREX_ASSIGN_OR_RETURN(auto conn, RedisConnection::connect(redis));
  ATREX_TRY(conn->command({"SET", manifest_key(manifest.sweep_id), to_json(manifest).dump()}));
  return ok();
}

}  // namespace atrex
