// Where a Redis is and how to reach it, parsed once from its URL (the --redis flag, a sweep
// manifest's redis_url) and passed around typed. Redis URL scheme:
// https://www.iana.org/assignments/uri-schemes/prov/redis; TLS parameters are atrex's own.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"

namespace atrex {

struct RedisEndpoint {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user;      // ACL user (Redis 6+); empty = default user
  std::string password;  // empty = no AUTH
  int db = 0;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds command_timeout{10000};
  // Attempts per command before giving up (backoff 50 ms .. ~3 s, jittered).
  int max_reconnects = 6;
  // TLS (rediss:// URLs): through an in-process OpenSSL relay (hiredis 0.14 has no TLS).
  bool tls = false;
  std::string tls_ca_file;    // PEM CA bundle the server certificate must chain to; "" = system's
  std::string tls_cert_file;  // client certificate (PEM) for servers with tls-auth-clients yes
  std::string tls_key_file;   // its private key (PEM)
  bool tls_insecure = false;  // skip certificate and host name verification (tests only)
  // The URL as given to parse_redis_url(); empty for an endpoint built field by field.
  std::string url;

  // The URL (as given, else composed from the fields), with its credentials: what a worker
  // connects with. Never log it: use redacted().
  std::string to_url() const;
  // to_url() with the credentials (user and password) replaced by ***: for logs, errors,
  // manifests and terminals.
  std::string redacted() const;
  // What identifies a server: "host:port/db", the host lowercased. Two URLs that differ only in
  // credentials, an explicit default port or db, or the host's case name the same instance.
  std::string instance() const;
};

// redis://[[user]:password@]host[:port][/db], or rediss://... for TLS with the query
// parameters tls_ca, tls_cert, tls_key (file paths) and tls_insecure=0|1, e.g.
// rediss://:secret@redis.internal:6380/0?tls_ca=/etc/ssl/redis-ca.pem. kInvalidInput naming the
// URL (redacted) and what is wrong (an unknown parameter, a parameter on a redis:// URL).
Result<RedisEndpoint> parse_redis_url(std::string_view url);

// A comma-separated list of Redis URLs (blanks around entries dropped). kInvalidInput naming
// `what` (the flag or field it came from), the list (redacted) and the entry at fault, for: an
// empty list, an empty entry, a URL that does not parse, one instance listed twice.
Result<std::vector<RedisEndpoint>> parse_redis_url_list(std::string_view list,
                                                        std::string_view what);

}  // namespace atrex
