// A real redis-server on a free loopback port for integration tests (docs/architecture.md §8:
// fakes only where the real thing cannot run). Started once per test binary; stopped by pid.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/redis.h"

extern char** environ;

namespace atrex::testing {

inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

class RedisServer {
 public:
  // Starts redis-server (AOF on, noeviction, as production must run). Fails the test if the
  // binary is missing: deploy/install-deps.sh installs it, and CI must not skip these tests.
  RedisServer() {
    port_ = free_loopback_port();
    dir_ = std::filesystem::temp_directory_path() / ("atrex_redis_" + std::to_string(::getpid()) + "_" + std::to_string(port_));
    std::filesystem::create_directories(dir_);
    start();
  }
  // Stops the server (SIGTERM: Redis flushes its AOF on a clean shutdown) and starts it again
  // on the same port and folder, as a restarted production Redis would.
  void restart() {
    stop();
    start();
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisOptions options() const {
    RedisOptions o;
    o.port = port_;
    return o;
  }
  bool running() const { return pid_ > 0; }

 private:
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = 0;
    }
  }
  void start() {
    const std::string port = std::to_string(port_), dir = dir_.string(), log = (dir_ / "redis.log").string();
    std::vector<std::string> args = {"redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", dir,
                                     "--appendonly", "yes", "--save", "", "--maxmemory-policy", "noeviction",
                                     "--logfile", log};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = 0;
      ADD_FAILURE() << "cannot start redis-server (install it: deploy/install-deps.sh)";
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      RedisOptions o = options();
      o.max_reconnects = 0;
      auto c = RedisConnection::connect(o);
      if (c && (*c)->command({"PING"})) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "redis-server did not answer PING on port " << port_;
  }

  int port_ = 0;
  pid_t pid_ = 0;
  std::filesystem::path dir_;
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
