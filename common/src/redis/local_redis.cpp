#include "atrex/common/local_redis.h"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

extern char** environ;

namespace atrex {

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

Result<std::unique_ptr<LocalRedisServer>> LocalRedisServer::start() {
  std::unique_ptr<LocalRedisServer> s(new LocalRedisServer());
  s->port_ = free_loopback_port();
  if (s->port_ == 0) return make_error(ErrorCode::kUnavailable, "cannot find a free loopback port for redis-server");
  s->dir_ = std::filesystem::temp_directory_path() / fmt::format("atrex_redis_{}_{}", ::getpid(), s->port_);
  std::error_code ec;
  std::filesystem::create_directories(s->dir_, ec);
  if (ec) return io_error(fmt::format("{}: cannot create the redis-server folder: {}", s->dir_.string(), ec.message()));
  ATREX_TRY(s->spawn());
  return s;
}

Result<void> LocalRedisServer::restart() {
  stop();
  return spawn();
}

void LocalRedisServer::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }
}

Result<void> LocalRedisServer::spawn() {
  std::vector<std::string> args = {"redis-server", "--bind", "127.0.0.1", "--port", std::to_string(port_),
                                   "--dir", dir_.string(), "--appendonly", "yes", "--save", "",
                                   "--maxmemory-policy", "noeviction", "--logfile", (dir_ / "redis.log").string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (::posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
    pid_ = 0;
    return make_error(ErrorCode::kUnavailable, "cannot start redis-server: not on PATH (install it: deploy/install-deps.sh)");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    RedisOptions o = options();
    o.max_reconnects = 0;
    auto c = RedisConnection::connect(o);
    if (c && (*c)->command({"PING"})) return ok();
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("redis-server exited at start; see {}", (dir_ / "redis.log").string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return make_error(ErrorCode::kUnavailable, fmt::format("redis-server did not answer PING on port {}", port_));
}

LocalRedisServer::~LocalRedisServer() {
  stop();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

RedisOptions LocalRedisServer::options() const {
  RedisOptions o;
  o.port = port_;
  return o;
}

}  // namespace atrex
