// Sharding cluster sweeps over several Redis instances (docs/sweeps.md "Several Redis
// instances"). A sweep lives whole on one instance: every key of it carries the sweep id as its
// hash tag (atrex:{<sweep id>}:...), its Lua scripts touch only its own keys, and its workers
// serve it alone, so nothing ever spans two instances. `atrex sweep submit --redis A,B,C`
// picks the instance from the sweep id; the results folder's manifest then records the chosen
// URL and every later command and worker of the sweep uses that one URL.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::scheduler {

// Splits a comma-separated list of Redis URLs (redis://[[user]:password@]host[:port][/db];
// blanks around entries are dropped). kInvalidInput naming `what` (the flag or field the list
// came from), the list, and the entry at fault, for: an empty list, an empty entry, a URL that
// does not parse, and one instance (host, port, db) listed twice.
Result<std::vector<std::string>> parse_redis_url_list(std::string_view list, std::string_view what);

// Which of `instances` (> 0) Redis instances holds the sweep: the first 8 bytes of
// SHA-256(sweep id), big-endian, modulo `instances`. A position in the list, not a hash slot:
// stable across machines and runs (no std::hash), and independent of the hosts' names.
size_t redis_shard_index(std::string_view sweep_id, size_t instances);

// The URL a sweep submitted with the list `urls` (as parse_redis_url_list returned it) goes to.
// When `results_dir` already holds a manifest of this sweep with a `redis_url`, that URL wins
// (reordering or extending the list never moves a submitted sweep); it must be one of `urls`
// (same host, port and db), else kInvalidInput naming `what`. Otherwise urls[redis_shard_index].
Result<std::string> choose_redis_url(const std::vector<std::string>& urls, std::string_view what,
                                     const std::string& sweep_id,
                                     const std::filesystem::path& results_dir);

// `url` with its password replaced by *** (for logs and the manifest's "redis").
std::string redis_url_without_password(const std::string& url);

}  // namespace atrex::scheduler
