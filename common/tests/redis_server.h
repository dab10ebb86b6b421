// A real redis-server on a free loopback port for integration tests (docs/architecture.md §8:
// fakes only where the real thing cannot run). Started once per test binary; stopped by pid.
#pragma once

#include <cstdlib>
#include <memory>
#include <utility>

#include <gtest/gtest.h>

#include "atrex/common/local_redis.h"
#include "atrex/common/redis.h"

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
  RedisOptions options() const { return server_ ? server_->options() : RedisOptions{}; }
  bool running() const { return server_ && server_->pid() > 0; }

 private:
  std::unique_ptr<LocalRedisServer> server_;
};

// One server for the whole test binary.
inline RedisServer& shared_redis() {
  static RedisServer* server = new RedisServer();  // never destroyed before other statics use it
  static const bool cleanup = [] {
    std::atexit([] { delete server; });
    return true;
  }();
  (void)cleanup;
  return *server;
}

}  // namespace atrex::testing
