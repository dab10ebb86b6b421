#include "atrex/common/redis/endpoint.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include <fmt/format.h>

namespace atrex {
namespace {

// `url` with everything between "://" and "@" (the credentials) replaced by ***.
std::string redact_url(std::string_view url) {
  const auto scheme = url.find("://");
  const auto at = url.find('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme) {
    return std::string(url);
  }
  return fmt::format("{}***@{}", url.substr(0, scheme + 3), url.substr(at + 1));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A comma-separated list as given, each entry redacted.
std::string redact_list(std::string_view list) {
  std::string out;
  for (size_t begin = 0;;) {
    const size_t comma = list.find(',', begin);
    out += redact_url(list.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (comma == std::string_view::npos) return out;
    out += ',';
    begin = comma + 1;
  }
}

}  // namespace

std::string RedisEndpoint::to_url() const {
  if (!url.empty()) return url;
  std::string auth;
  if (!password.empty()) auth = fmt::format("{}:{}@", user, password);
  std::string query;
  auto param = [&](const char* key, const std::string& value) {
    if (!value.empty()) query += fmt::format("{}{}={}", query.empty() ? "?" : "&", key, value);
  };
  param("tls_ca", tls_ca_file);
  param("tls_cert", tls_cert_file);
  param("tls_key", tls_key_file);
  if (tls_insecure) param("tls_insecure", "1");
  return fmt::format("{}://{}{}:{}/{}{}", tls ? "rediss" : "redis", auth, host, port, db, query);
}

std::string RedisEndpoint::redacted() const { return redact_url(to_url()); }

std::string RedisEndpoint::instance() const {
  std::string h = host;
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  return fmt::format("{}:{}/{}", h, port, db);
}

Result<RedisEndpoint> parse_redis_url(std::string_view url) {
  // redis[s]://[[user]:password@]host[:port][/db][?tls_ca=F&tls_cert=F&tls_key=F&tls_insecure=1]
  static const std::regex kUrl(
      R"(^(rediss?)://(?:([^:@/]*)(?::([^@/]*))?@)?([^:/@?]+)(?::(\d+))?(?:/(\d+))?/?(?:\?(.*))?$)");
  std::cmatch m;
  const std::string s = redact_url(url);
  const std::string given(url);
  if (!std::regex_match(given.c_str(), m, kUrl)) {
    return invalid_input(fmt::format(
        "Redis URL \"{}\": expected redis://[[user]:password@]host[:port][/db] (rediss:// for TLS)",
        s));
  }
  RedisEndpoint o;
  o.url = given;
  o.tls = m[1].str() == "rediss";
  if (m[3].matched) {
    o.user = m[2].str();
    o.password = m[3].str();
  } else if (m[2].matched) {
    o.password = m[2].str();  // redis://password@host
  }
  o.host = m[4].str();
  if (m[5].matched) o.port = std::stoi(m[5].str());
  if (m[6].matched) o.db = std::stoi(m[6].str());
  if (o.port <= 0 || o.port > 65535)
    return invalid_input(fmt::format("Redis URL \"{}\": port out of range", s));
  if (m[7].matched && !m[7].str().empty()) {
    if (!o.tls)
      return invalid_input(
          fmt::format("Redis URL \"{}\": query parameters are for rediss:// (TLS) URLs", s));
    std::string query = m[7].str();
    for (size_t start = 0; start <= query.size();) {
      const size_t amp = std::min(query.find('&', start), query.size());
      const std::string kv = query.substr(start, amp - start);
      start = amp + 1;
      if (kv.empty()) continue;
      const size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq),
                        value = eq == std::string::npos ? "" : kv.substr(eq + 1);
      if (key == "tls_ca")
        o.tls_ca_file = value;
      else if (key == "tls_cert")
        o.tls_cert_file = value;
      else if (key == "tls_key")
        o.tls_key_file = value;
      else if (key == "tls_insecure" && (value == "1" || value == "0"))
        o.tls_insecure = value == "1";
      else {
        return invalid_input(
            fmt::format("Redis URL \"{}\": unknown parameter \"{}\" (tls_ca, tls_cert, tls_key, "
                        "tls_insecure=0|1)",
                        s, kv));
      }
    }
    if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
      return invalid_input(fmt::format("Redis URL \"{}\": tls_cert and tls_key go together", s));
    }
  }
  return o;
}

Result<std::vector<RedisEndpoint>> parse_redis_url_list(std::string_view list,
                                                        std::string_view what) {
  // Errors quote the list without credentials: they end up in terminals and CI logs.
  const std::string shown = redact_list(list);
  if (trim(list).empty()) {
    return invalid_input(fmt::format("{}: expected one Redis URL or a comma-separated list", what));
  }
  std::vector<RedisEndpoint> out;
  size_t begin = 0;
  for (size_t entry = 1;; ++entry) {
    const size_t comma = list.find(',', begin);
    const std::string_view url = trim(list.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (url.empty()) {
      return invalid_input(
          fmt::format("{} \"{}\": entry {} is empty (expected redis://host[:port][/db] between "
                      "the commas)",
                      what, shown, entry));
    }
    auto parsed = parse_redis_url(url);
    if (!parsed) {
      return tl::unexpected(
          with_context(parsed.error(), fmt::format("{} \"{}\", entry {}", what, shown, entry)));
    }
    for (const auto& e : out) {
      if (e.instance() == parsed->instance()) {
        return invalid_input(fmt::format("{} \"{}\": entry {} names the instance {} a second time",
                                         what, shown, entry, parsed->instance()));
      }
    }
    out.push_back(std::move(*parsed));
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

}  // namespace atrex
