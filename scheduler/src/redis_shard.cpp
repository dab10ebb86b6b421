#include "atrex/scheduler/redis_shard.h"

#include <cstdint>

#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/common/wire/manifest.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

size_t redis_shard_index(std::string_view sweep_id, size_t instances) {
  ATREX_ASSERT(instances > 0);
  const std::string digest = sha256_hex(sweep_id);
  const uint64_t h = std::stoull(digest.substr(0, 16), nullptr, 16);
  return static_cast<size_t>(h % instances);
}

Result<RedisEndpoint> choose_redis_endpoint(const std::vector<RedisEndpoint>& endpoints,
                                            std::string_view what, const std::string& sweep_id,
                                            const fs::path& results_dir) {
  if (endpoints.empty()) return invalid_input(fmt::format("{}: no Redis URL given", what));
  std::error_code ec;
  const fs::path file = results_dir / "manifest.json";
  if (fs::exists(file, ec)) {
    // A folder of another sweep is refused later, when the results folder is opened; a local
    // sweep's manifest has no URL.
    ATREX_ASSIGN_OR_RETURN(Manifest m, read_manifest_file(results_dir));
    if (m.sweep_id == sweep_id && m.redis_url) {
      ATREX_ASSIGN_OR_RETURN(RedisEndpoint pinned, parse_redis_url(*m.redis_url));
      for (const auto& e : endpoints) {
        if (e.instance() == pinned.instance()) return pinned;
      }
      std::vector<std::string> shown;
      for (const auto& e : endpoints) shown.push_back(e.redacted());
      return invalid_input(fmt::format(
          "{}: sweep {} is already on {} (the redis_url of {}), which the list \"{}\" does not "
          "name; pass a list that includes it (a submitted sweep never moves), or another --out",
          what, sweep_id, pinned.redacted(), file.string(), fmt::join(shown, ",")));
    }
  }
  return endpoints[redis_shard_index(sweep_id, endpoints.size())];
}

}  // namespace atrex::scheduler
