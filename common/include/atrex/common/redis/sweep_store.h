// The Redis side of one cluster sweep (DESIGN.md §2): its task queue (streams `eval` and `agent`)
// and result store under sweep_prefix(id), and the copy of its manifest the workers read
// (manifest_key(id)), so that a worker needs only the Redis URL and the sweep id.
#pragma once

#include <memory>
#include <string_view>

#include "atrex/common/best_store.h"
#include "atrex/common/error.h"
#include "atrex/common/queue.h"
#include "atrex/common/redis/endpoint.h"
#include "atrex/common/redis/queue.h"
#include "atrex/common/redis/result_store.h"
#include "atrex/common/wire/cluster_options.h"
#include "atrex/common/wire/manifest.h"

namespace atrex {

// The queue options a sweep's cluster settings ask for: its lease timeout and delivery bound.
QueueOptions queue_options(const ClusterOptions& cluster);

struct SweepStore {
  std::unique_ptr<RedisQueue> queue;
  std::unique_ptr<RedisResultStore> results;
  std::unique_ptr<RedisBestStore> best;  // each (agent, operator)'s best-so-far

  // Connects (kUnavailable when Redis does not answer; kInvalidInput for refused credentials).
  static Result<SweepStore> open(const RedisEndpoint& redis, std::string_view sweep_id,
                                 const QueueOptions& options = {});
};

// The manifest stored for the workers. kNotFound when Redis holds no such sweep; kInvalidInput
// (naming the key) when what it holds is not a valid atrex.manifest/1.
Result<Manifest> fetch_manifest(const RedisEndpoint& redis, std::string_view sweep_id);
// Stores `manifest` under manifest_key(manifest.sweep_id) (replacing the previous copy).
Result<void> publish_manifest(const RedisEndpoint& redis, const Manifest& manifest);

}  // namespace atrex
