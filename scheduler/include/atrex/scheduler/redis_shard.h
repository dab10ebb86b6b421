// Sharding cluster sweeps over several Redis instances (docs/sweeps.md "Several Redis
// instances"). A sweep lives whole on one instance: every key of it carries the sweep id as its
// hash tag (atrex:{<sweep id>}:...), its Lua scripts touch only its own keys, and its workers
// serve it alone, so nothing ever spans two instances. `atrex sweep submit --redis A,B,C`
// picks the instance from the sweep id; the results folder's manifest then records the chosen
// URL and every later command and worker of the sweep uses that one URL.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/redis/endpoint.h"

namespace atrex::scheduler {

// Which of `instances` (> 0) Redis instances holds the sweep: the first 8 bytes of
// SHA-256(sweep id), big-endian, modulo `instances`. A position in the list, not a hash slot:
// stable across machines and runs (no std::hash), and independent of the hosts' names.
size_t redis_shard_index(std::string_view sweep_id, size_t instances);

// The instance a sweep submitted with `endpoints` (parse_redis_url_list) goes to. When
// `results_dir` already holds a manifest of this sweep with a `redis_url`, that URL wins
// (reordering or extending the list never moves a submitted sweep); it must be one of
// `endpoints` (same instance), else kInvalidInput naming `what`. Otherwise
// endpoints[redis_shard_index].
Result<RedisEndpoint> choose_redis_endpoint(const std::vector<RedisEndpoint>& endpoints,
                                            std::string_view what, const std::string& sweep_id,
                                            const std::filesystem::path& results_dir);

}  // namespace atrex::scheduler
