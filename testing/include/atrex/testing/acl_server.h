// A redis-server that requires authentication, for the AUTH tests: the default user has a
// password (`requirepass`) and a Redis 6 ACL user `atrex` may touch only the keys `atrex:*`,
// with the command rules docs/sweeps.md recommends (every command but the @dangerous ones, plus
// CONFIG GET for the queue's appendonly/noeviction check). Started once per test binary.
#pragma once

#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/redis/connection.h"
#include "atrex/testing/redis_server.h"

namespace atrex::testing {

inline constexpr const char* kAclUser = "atrex";
inline constexpr const char* kAclPassword = "acl-secret";
inline constexpr const char* kDefaultPassword = "default-secret";
inline constexpr const char* kAclRules[] = {"on",    ">acl-secret", "~atrex:*",   "&*",
                                            "+@all", "-@dangerous", "+config|get"};

// Sets up the users on a running server: the ACL user first, then the default user's password
// (the admin connection stays authenticated as the default user).
inline void require_authentication(const RedisServer& server) {
  auto admin = RedisConnection::connect(server.options());
  ASSERT_TRUE(admin) << admin.error().message;
  std::vector<std::string> setuser = {"ACL", "SETUSER", kAclUser, "reset"};
  for (const char* rule : kAclRules) setuser.emplace_back(rule);
  auto u = (*admin)->command(setuser);
  ASSERT_TRUE(u) << u.error().message;
  auto p = (*admin)->command({"CONFIG", "SET", "requirepass", kDefaultPassword});
  ASSERT_TRUE(p) << p.error().message;
}

// redis://<userinfo>@127.0.0.1:<port>, e.g. userinfo "atrex:acl-secret" or ":default-secret".
inline std::string url_with(const RedisServer& server, const std::string& userinfo) {
  return fmt::format("redis://{}@127.0.0.1:{}", userinfo, server.options().port);
}

inline RedisServer& shared_acl_redis() {
  return once_per_binary<RedisServer>([] {
    auto* s = new RedisServer();
    if (s->running()) require_authentication(*s);
    return s;
  });
}

}  // namespace atrex::testing
