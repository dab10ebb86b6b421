#include "atrex/scheduler/redis_shard.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/common/redis.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// What identifies an instance: two URLs differing only in credentials, an explicit default
// port or db, or the host's case reach the same Redis.
std::string instance_of(const RedisOptions& o) {
  std::string host = o.host;
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return fmt::format("{}:{}/{}", host, o.port, o.db);
}

// A list as given, each entry without its password.
std::string shown_list(std::string_view list) {
  std::string out;
  size_t begin = 0;
  for (;;) {
    const size_t comma = list.find(',', begin);
    out += redis_url_without_password(std::string(list.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin)));
    if (comma == std::string_view::npos) return out;
    out += ',';
    begin = comma + 1;
  }
}

}  // namespace

std::string redis_url_without_password(const std::string& url) {
  auto at = url.find('@');
  auto scheme = url.find("://");
  if (at == std::string::npos || scheme == std::string::npos) return url;
  return url.substr(0, scheme + 3) + "***@" + url.substr(at + 1);
}

Result<std::vector<std::string>> parse_redis_url_list(std::string_view list,
                                                      std::string_view what) {
  // Errors quote the list without passwords: they end up in terminals and CI logs.
  const std::string shown = shown_list(list);
  if (trim(list).empty())
    return invalid_input(fmt::format("{}: expected one Redis URL or a comma-separated list", what));
  std::vector<std::string> urls, instances;
  size_t begin = 0;
  for (size_t entry = 1;; ++entry) {
    const size_t comma = list.find(',', begin);
    const std::string_view url = trim(list.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (url.empty()) {
      return invalid_input(
          fmt::format("{} \"{}\": entry {} is empty (expected redis://host[:port][/db] between the "
                      "commas)",
                      what, shown, entry));
    }
    auto parsed = parse_redis_url(url);
    if (!parsed)
      return tl::unexpected(
          with_context(parsed.error(), fmt::format("{} \"{}\", entry {}", what, shown, entry)));
    const std::string instance = instance_of(*parsed);
    if (std::find(instances.begin(), instances.end(), instance) != instances.end()) {
      return invalid_input(fmt::format("{} \"{}\": entry {} names the instance {} a second time",
                                       what, shown, entry, instance));
    }
    instances.push_back(instance);
    urls.emplace_back(url);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return urls;
}

size_t redis_shard_index(std::string_view sweep_id, size_t instances) {
  const std::string digest = sha256_hex(sweep_id);
  const uint64_t h = std::stoull(digest.substr(0, 16), nullptr, 16);
  return static_cast<size_t>(h % instances);
}

Result<std::string> choose_redis_url(const std::vector<std::string>& urls, std::string_view what,
                                     const std::string& sweep_id, const fs::path& results_dir) {
  if (urls.empty()) return invalid_input(fmt::format("{}: no Redis URL given", what));
  std::error_code ec;
  const fs::path file = results_dir / "manifest.json";
  if (fs::exists(file, ec)) {
    ATREX_ASSIGN_OR_RETURN(Json m, read_json_file(file));
    const std::string pinned = m.value("redis_url", "");
    // Another sweep's folder is refused when the results folder is opened; a local sweep's has no
    // URL.
    if (m.value("sweep_id", "") == sweep_id && !pinned.empty()) {
      ATREX_ASSIGN_OR_RETURN(RedisOptions p, parse_redis_url(pinned));
      for (const auto& url : urls) {
        if (instance_of(*parse_redis_url(url)) == instance_of(p)) return pinned;
      }
      return invalid_input(
          fmt::format("{}: sweep {} is already on {} (the redis_url of {}), which the list \"{}\" "
                      "does not name; pass a list "
                      "that includes it (a submitted sweep never moves), or another --out",
                      what, sweep_id, redis_url_without_password(pinned), file.string(),
                      shown_list(fmt::format("{}", fmt::join(urls, ",")))));
    }
  }
  return urls[redis_shard_index(sweep_id, urls.size())];
}

}  // namespace atrex::scheduler
