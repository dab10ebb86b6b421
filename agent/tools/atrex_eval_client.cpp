// `atrex-eval` inside a cli agent's sandbox (docs/agents.md "The cli provider"): sends the
// workspace's candidate to the agent worker's evaluation socket ($ATREX_EVAL_SOCKET) and prints
// the feedback (per shape: status, errors, time, roofline time, S_j).
//
//   atrex-eval [FILE]     FILE defaults to $ATREX_CANDIDATE (the workspace's candidate file)
//
// Exit codes: 0 feedback printed; 2 bad usage or unreadable file; 3 no gateway (socket).
// Built on its own (no atrex library) so that the sandbox needs nothing of the project but it.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

namespace {

constexpr size_t kMaxSourceBytes = 900 * 1024;  // the gateway takes requests up to 1 MiB

int fail(int code, const std::string& what) {
  std::cerr << "atrex-eval: " << what << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
    std::cout << "usage: atrex-eval [FILE]\n  quick-evaluates FILE (default: $ATREX_CANDIDATE) on "
                 "the sweep's quick shapes and prints the feedback\n";
    return argc > 2 ? 2 : 0;
  }
  const char* env_file = std::getenv("ATREX_CANDIDATE");
  const std::string file = argc == 2 ? argv[1] : (env_file ? env_file : "");
  if (file.empty()) return fail(2, "no FILE given and ATREX_CANDIDATE is not set");
  std::ifstream in(file, std::ios::binary);
  if (!in) return fail(2, "cannot read " + file + ": " + std::strerror(errno));
  std::string source((std::istreambuf_iterator<char>(in)), {});
  if (source.size() > kMaxSourceBytes) return fail(2, file + " is over 900 KiB");
  const char* socket_path = std::getenv("ATREX_EVAL_SOCKET");
  if (!socket_path || !*socket_path) return fail(3, "ATREX_EVAL_SOCKET is not set");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(socket_path) >= sizeof(addr.sun_path)) return fail(3, "socket path too long");
  std::strcpy(addr.sun_path, socket_path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return fail(3, std::string("cannot reach the evaluation gateway: ") + std::strerror(errno));
  }
  std::string base = file;
  if (const size_t slash = base.rfind('/'); slash != std::string::npos) base = base.substr(slash + 1);
  const std::string request = nlohmann::json{{"file_name", base}, {"source", source}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (size_t off = 0; off < request.size();) {
    const ssize_t n = ::send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(3, std::string("sending: ") + std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::cout << "atrex-eval: evaluating " << base << " (quick shapes; this can take minutes)\n"
            << std::flush;
  char buf[65536];
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  std::fflush(stdout);
  return got > 0 ? 0 : fail(3, "the gateway closed without an answer");
}
