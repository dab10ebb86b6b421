#include "cli/eval_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "atrex/common/untrusted_json.h"

namespace atrex::agent::cli {

namespace {

constexpr size_t kMaxRequestBytes = 1 << 20;
constexpr int kReadTimeoutMs = 30'000;

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away: nothing to tell it
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// The request, or an error text for the client.
Result<std::string> read_request(int fd) {
  std::string data;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReadTimeoutMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return make_error(ErrorCode::kUnavailable, "atrex-eval: the request did not end within 30 s");
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(ErrorCode::kUnavailable, fmt::format("atrex-eval: reading the request: {}", std::strerror(errno)));
    if (n == 0) return data;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxRequestBytes) {
      return invalid_input(fmt::format("atrex-eval: the request is over {} bytes", kMaxRequestBytes));
    }
  }
}

}  // namespace

Result<void> EvalSocketServer::start(const std::filesystem::path& path, Handler handler) {
  ATREX_ASSERT(listen_fd_ < 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.string().size() >= sizeof(addr.sun_path)) {
    return invalid_input(fmt::format("the evaluation socket path {} is too long (at most {} bytes)",
                                     path.string(), sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.string().size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error(fmt::format("socket: {}", std::strerror(errno)));
  const mode_t old = ::umask(077);
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (bound != 0 || ::listen(fd, 8) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return internal_error(fmt::format("listening on {}: {}", path.string(), why));
  }
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return internal_error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  listen_fd_ = fd;
  path_ = path;
  handler_ = std::move(handler);
  thread_ = std::thread([this] { serve(); });
  return ok();
}

void EvalSocketServer::stop() {
  if (listen_fd_ < 0) return;
  const char x = 'x';
  (void)!::write(wake_[1], &x, 1);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
  listen_fd_ = -1;
  wake_[0] = wake_[1] = -1;
  ::unlink(path_.c_str());
}

void EvalSocketServer::serve() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    answer(c);
    ::close(c);
  }
}

void EvalSocketServer::answer(int fd) {
  auto request = read_request(fd);
  if (!request) {
    write_all(fd, request.error().message + "\n");
    return;
  }
  // The coding agent writes the request: parsed as untrusted (depth-bounded).
  auto parsed = parse_untrusted_json(*request, kAgentJsonDepth);
  Json j = parsed ? std::move(*parsed) : Json(Json::value_t::discarded);
  if (j.is_discarded() || !j.is_object() || !j.contains("source") || !j["source"].is_string()) {
    write_all(fd, "atrex-eval: malformed request (expected {\"file_name\", \"source\"})\n");
    return;
  }
  const std::string file_name =
      j.contains("file_name") && j["file_name"].is_string() ? j["file_name"].get<std::string>() : "";
  ++served_;
  write_all(fd, handler_(file_name, j["source"].get<std::string>()));
}

}  // namespace atrex::agent::cli
