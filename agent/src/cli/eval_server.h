// The evaluation gateway of a sandboxed CLI (docs/agents.md "The cli provider"): a unix socket
// the agent worker serves for the length of one CLI run, bound into the sandbox, where the
// `atrex-eval` command sends a candidate and reads back its feedback. Evaluations go through
// the worker's own EvalFn (the queue), so the sandbox holds no queue address or credentials;
// a pathname socket works across the sandbox's network namespace.
//
// Protocol (one request per connection): the client writes one JSON object
// {"file_name": "kernel.cpp", "source": "..."} and shuts down its writing side; the server
// answers with the feedback text and closes. Requests over 1 MiB, malformed JSON or a client
// silent for 30 s get an error text. Connections are served one at a time, in order.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "atrex/common/error.h"

namespace atrex::agent::cli {

class EvalSocketServer {
 public:
  // (file name, source) -> the text atrex-eval prints. Called on the server's thread.
  using Handler = std::function<std::string(const std::string&, const std::string&)>;

  EvalSocketServer() = default;
  EvalSocketServer(const EvalSocketServer&) = delete;
  EvalSocketServer& operator=(const EvalSocketServer&) = delete;
  ~EvalSocketServer() { stop(); }

  // Listens on `path` (a new socket file, mode 0600; an existing file there is an error).
  Result<void> start(const std::filesystem::path& path, Handler handler);
  // Stops accepting, waits for the request in hand, removes the socket file. Idempotent.
  void stop();
  int requests_served() const { return served_.load(); }

 private:
  void serve();
  void answer(int fd);

  std::filesystem::path path_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<int> served_{0};
};

}  // namespace atrex::agent::cli
