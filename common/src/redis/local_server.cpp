#include "atrex/common/redis/local_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

extern char** environ;

namespace atrex {

int free_port(const std::string& address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) return 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

Result<std::unique_ptr<LocalRedisServer>> LocalRedisServer::start(LocalRedisOptions options) {
  std::unique_ptr<LocalRedisServer> s(new LocalRedisServer());
  s->bind_ = options.bind;
  s->extra_args_ = options.extra_args;
  s->port_ = options.port > 0 ? options.port : free_port(options.bind);
  if (s->port_ == 0) {
    return make_error(
        ErrorCode::kUnavailable,
        fmt::format(
            "cannot find a free port on {} for redis-server (is it an address of this host?)",
            options.bind));
  }
  // The same port may be free in two network namespaces: the counter keeps the folders apart.
  static std::atomic<int> started{0};
  s->dir_ = std::filesystem::temp_directory_path() /
            fmt::format("atrex_redis_{}_{}_{}", ::getpid(), s->port_, started.fetch_add(1));
  std::error_code ec;
  std::filesystem::create_directories(s->dir_, ec);
  if (ec)
    return io_error(fmt::format("{}: cannot create the redis-server folder: {}", s->dir_.string(),
                                ec.message()));
  // A port picked here may be taken by another process before redis-server binds it (two test
  // binaries starting servers at once): then it exits at start, and another free port is tried.
  for (int attempt = 1;; ++attempt) {
    auto spawned = s->spawn();
    if (spawned) return s;
    if (options.port > 0 || attempt == 5 || !s->port_taken_) return tl::unexpected(spawned.error());
    s->port_ = free_port(options.bind);
    if (s->port_ == 0) return tl::unexpected(spawned.error());
  }
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
  // Protected mode (Redis 7) refuses every client from outside loopback to a server without a
  // password, whatever --bind says; the one address given here is the access control.
  std::vector<std::string> args = {"redis-server",
                                   "--bind",
                                   bind_,
                                   "--port",
                                   std::to_string(port_),
                                   "--protected-mode",
                                   "no",
                                   "--dir",
                                   dir_.string(),
                                   "--appendonly",
                                   "yes",
                                   "--save",
                                   "",
                                   "--maxmemory-policy",
                                   "noeviction",
                                   "--logfile",
                                   (dir_ / "redis.log").string()};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The server's own stdin, stdout and stderr are not ours: a server that outlives this process
  // (killed by a signal) must not hold the caller's output open (ctest waits on that pipe until
  // its timeout). What redis-server prints before it opens its log file goes to the log file.
  const std::string log = (dir_ / "redis.log").string();
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  const int spawn_rc =
      ::posix_spawnp(&pid_, "redis-server", &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (spawn_rc != 0) {
    pid_ = 0;
    return make_error(ErrorCode::kUnavailable,
                      spawn_rc == ENOENT
                          ? std::string("cannot start redis-server: not on PATH (install it: "
                                        "deploy/install-deps.sh)")
                          : fmt::format("cannot start redis-server (log {}): {}", log,
                                        std::strerror(spawn_rc)));
  }
  // Ready when the server on the port answers and is this child (INFO's process_id): another
  // server already on the port would answer too, while this child fails to bind and exits.
  port_taken_ = false;
  const std::string ours = fmt::format("process_id:{}\r\n", pid_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    RedisEndpoint o = options();
    o.max_reconnects = 0;
    auto c = RedisConnection::connect(o);
    if (c) {
      auto info = (*c)->command({"INFO", "server"});
      if (info && info->str.find(ours) != std::string::npos) return ok();
      port_taken_ = port_taken_ || (info && !info->str.empty());
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      return make_error(
          ErrorCode::kUnavailable,
          fmt::format(
              "redis-server exited at start{}; see {}",
              port_taken_ ? fmt::format(" (another server answers on {}:{})", bind_, port_) : "",
              (dir_ / "redis.log").string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return make_error(ErrorCode::kUnavailable,
                    fmt::format("redis-server did not answer PING on {}:{}", bind_, port_));
}

LocalRedisServer::~LocalRedisServer() {
  stop();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

RedisEndpoint LocalRedisServer::options() const {
  RedisEndpoint o;
  o.host = bind_;
  o.port = port_;
  return o;
}

}  // namespace atrex
