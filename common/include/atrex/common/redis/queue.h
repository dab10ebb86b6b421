// TaskQueue on Redis Streams with a consumer group (docs/architecture.md §2), passing the same
// contract suite as InProcessQueue (common/tests/queue_contract.h):
//   enqueue   XADD <prefix>:q:{<stream>} * body <json>
//   claim     expired leases first: XAUTOCLAIM ... <lease_timeout> (the pending entry's idle time
//   on
//             the Redis clock is the lease), past max_deliveries moved to <prefix>:dlq:{<stream>};
//             then new entries: XREADGROUP GROUP atrex <consumer> COUNT n [BLOCK ms] STREAMS ... >
//   ack       XACK + XDEL, only if the entry is still this consumer's lease (Lua, atomic)
//   renew     XCLAIM ... JUSTID (resets the idle time), same ownership check
//   release   last error kept, then dead-lettered or made reclaimable at once (XCLAIM IDLE)
// Keys of one stream share the hash tag {<stream>}, so a Redis Cluster keeps them on one shard.
// Redis must run with appendonly yes and maxmemory-policy noeviction: open() checks both and
// warns loudly otherwise (a restart or an eviction would lose tasks).
#pragma once

#include <memory>
#include <mutex>
#include <chrono>
#include <map>
#include <set>
#include <string>

#include "atrex/common/queue.h"
#include "atrex/common/redis/connection.h"

namespace atrex {

class RedisQueue final : public TaskQueue {
 public:
  // Connects and checks the server's persistence settings. `prefix` namespaces every key.
  static Result<std::unique_ptr<RedisQueue>> open(const RedisEndpoint& redis,
                                                  QueueOptions options = {},
                                                  std::string prefix = "atrex");

  Result<std::string> enqueue(std::string_view stream, const Json& body) override;
  Result<std::vector<std::string>> enqueue_batch(std::string_view stream,
                                                 const std::vector<Json>& bodies) override;
  Result<size_t> ack_batch(const std::vector<Lease>& leases) override;
  Result<std::vector<Lease>> claim(std::string_view stream, std::string_view consumer,
                                   size_t max_count, std::chrono::milliseconds block) override;
  Result<bool> ack(const Lease& lease) override;
  Result<bool> renew(const Lease& lease) override;
  Result<bool> release(const Lease& lease, std::string_view error) override;
  Result<std::vector<DeadLetter>> dead_letters(std::string_view stream) override;
  Result<std::vector<Json>> in_flight(std::string_view stream) override;
  Result<QueueStats> stats(std::string_view stream) override;
  Result<MessageState> state(std::string_view stream, std::string_view message_id) override;
  Result<std::string> requeue_lost(std::string_view stream, std::string_view message_id,
                                   const Json& body) override;

 private:
  RedisQueue(const RedisEndpoint& redis, QueueOptions options, std::string prefix)
      : pool_(redis), options_(options), prefix_(std::move(prefix)) {}
  std::string key(std::string_view kind, std::string_view stream) const;
  Result<void> ensure_group(std::string_view stream);
  Result<std::vector<Lease>> reclaim(std::string_view stream, std::string_view consumer,
                                     size_t max_count);
  // Whether this claim should look for expired leases (and notes that it does).
  bool reclaim_due(std::string_view stream);

  RedisPool pool_;
  QueueOptions options_;
  std::string prefix_;
  std::mutex mu_;
  std::set<std::string, std::less<>> groups_;
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> last_reclaim_;
};

}  // namespace atrex
