// Test helper: one plain HTTP/1.0 GET over a loopback TCP socket (what a Prometheus scrape
// does), and a reader for the text exposition format's samples.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <sstream>
#include <string>

namespace atrex::testing {

// The response body of GET http://host:port/path (status 200 only); nullopt on any failure.
inline std::optional<std::string> http_get(const std::string& host, int port,
                                           const std::string& path) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
    return std::nullopt;
  const int fd = ::socket(res->ai_family, SOCK_STREAM, 0);
  const bool connected = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  ::freeaddrinfo(res);
  if (!connected) {
    if (fd >= 0) ::close(fd);
    return std::nullopt;
  }
  const std::string req =
      "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const auto head_end = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.find(" 200 ") > resp.find("\r\n") ||
      head_end == std::string::npos) {
    return std::nullopt;
  }
  return resp.substr(head_end + 4);
}

// The value of the sample whose series is exactly `series` (e.g.
// `atrex_runner_tasks_total{status="done"}`) in an exposition body; nullopt when absent.
// prometheus-cpp writes labels in the order of their names.
inline std::optional<double> sample_value(const std::string& body, const std::string& series) {
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

}  // namespace atrex::testing
