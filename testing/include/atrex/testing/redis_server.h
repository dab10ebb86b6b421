// A real redis-server on a free loopback port for integration tests (docs/architecture.md §8:
// fakes only where the real thing cannot run). Started once per test binary; stopped by pid.
#pragma once

#include <cstdlib>
#include <memory>
#include <utility>

#include <gtest/gtest.h>

#include "atrex/common/redis/local_server.h"
#include "atrex/common/redis/connection.h"

namespace atrex::testing {

// The library's LocalRedisServer, failing the test (not skipping it) when it cannot start:
// deploy/install-deps.sh installs redis-server, and CI must not skip these tests.
class RedisServer {
 public:
  explicit RedisServer(LocalRedisOptions options = {}) {
    auto s = LocalRedisServer::start(std::move(options));
    if (!s) {
      ADD_FAILURE() << s.error().message;
      return;
    }
    server_ = std::move(*s);
  }
  void restart() {
    ASSERT_TRUE(server_);
    auto r = server_->restart();
    if (!r) ADD_FAILURE() << r.error().message;
  }
  RedisEndpoint options() const { return server_ ? server_->options() : RedisEndpoint{}; }
  bool running() const { return server_ && server_->pid() > 0; }

 private:
  std::unique_ptr<LocalRedisServer> server_;
};

// One object for the whole test binary, made by `make()` on first use and deleted at exit, not
// with the other statics (which may still use it). A server it holds is stopped by pid then: one
// left running would keep ctest's output pipe open, and ctest would wait for it forever. Each
// call site's lambda is its own type, so each gets its own object.
template <class T, class Make>
T& once_per_binary(Make make) {
  static T* object = make();
  static const bool cleanup = [] {
    std::atexit([] { delete object; });
    return true;
  }();
  (void)cleanup;
  return *object;
}

// One server for the whole test binary.
inline RedisServer& shared_redis() {
  return once_per_binary<RedisServer>([] { return new RedisServer(); });
}

}  // namespace atrex::testing
