// A private redis-server on a free loopback port, for `atrex bench queue` runs without a
// server of their own. Runs as production must (appendonly yes, maxmemory-policy noeviction;
// docs/architecture.md §2) from a temporary folder that is removed on stop.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>

#include "atrex/common/error.h"
#include "atrex/common/redis.h"

namespace atrex {

class LocalRedisServer {
 public:
  // Spawns `redis-server` (from PATH) and waits up to 15 s for PING. kUnavailable when the
  // binary is missing (install: deploy/install-deps.sh) or the server does not answer.
  static Result<std::unique_ptr<LocalRedisServer>> start();
  ~LocalRedisServer();  // SIGTERM, wait, remove the folder
  // Stops the server (SIGTERM: Redis flushes its AOF on a clean shutdown) and starts it again
  // on the same port and folder, as a restarted production Redis would.
  Result<void> restart();
  LocalRedisServer(const LocalRedisServer&) = delete;
  LocalRedisServer& operator=(const LocalRedisServer&) = delete;

  RedisOptions options() const;
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  LocalRedisServer() = default;
  Result<void> spawn();
  void stop();
  int port_ = 0;
  pid_t pid_ = 0;
  std::filesystem::path dir_;
};

// A free TCP port on 127.0.0.1 (bound and released; another process may take it meanwhile).
int free_loopback_port();

}  // namespace atrex
