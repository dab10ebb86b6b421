// A private redis-server on a free port (of the loopback address unless told otherwise), for
// `atrex bench queue` runs without a server of their own and for the tests. Runs as production must
// (appendonly yes, maxmemory-policy noeviction; docs/architecture.md §2) from a temporary folder
// that is removed on stop.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/redis/connection.h"

namespace atrex {

struct LocalRedisOptions {
  // The one IPv4 address the server listens on (`--bind`), and its port (0 = a free one there).
  std::string bind = "127.0.0.1";
  int port = 0;
  // Appended to the command line (e.g. the --tls-* options of a TLS test server).
  std::vector<std::string> extra_args;
};

class LocalRedisServer {
 public:
  // Spawns `redis-server` (from PATH) and waits up to 15 s for PING. kUnavailable when the
  // binary is missing (install: deploy/install-deps.sh) or the server does not answer.
  // The server, the free-port search and the PING all happen in the calling thread's network
  // namespace (the multi-host test starts one inside a namespace from a thread that setns'd).
  static Result<std::unique_ptr<LocalRedisServer>> start(LocalRedisOptions options = {});
  ~LocalRedisServer();  // SIGTERM, wait, remove the folder
  // Stops the server (SIGTERM: Redis flushes its AOF on a clean shutdown) and starts it again
  // on the same port and folder, as a restarted production Redis would.
  Result<void> restart();
  LocalRedisServer(const LocalRedisServer&) = delete;
  LocalRedisServer& operator=(const LocalRedisServer&) = delete;

  RedisEndpoint options() const;
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  LocalRedisServer() = default;
  Result<void> spawn();
  void stop();
  std::string bind_ = "127.0.0.1";
  int port_ = 0;
  std::vector<std::string> extra_args_;
  pid_t pid_ = 0;
  bool port_taken_ = false;  // the last spawn found another server answering on port_
  std::filesystem::path dir_;
};

// A free TCP port on an IPv4 address of this network namespace (bound and released; another
// process may take it meanwhile); 0 when none can be bound.
int free_port(const std::string& address);
inline int free_loopback_port() { return free_port("127.0.0.1"); }

}  // namespace atrex
