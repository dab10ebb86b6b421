#include "tls_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace atrex {

struct TlsRelay::Tls {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Tls() {
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
  }
};

namespace {

std::string openssl_errors() {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += out.empty() ? "" : "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

// TCP connect within `timeout` (non-blocking connect, then back to blocking).
Result<int> tcp_connect(const RedisEndpoint& o) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(o.port);
  if (const int rc = ::getaddrinfo(o.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("redis {}:{}: {}", o.host, o.port, ::gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(o.connect_timeout.count())) == 1 ? 0 : -1;
      int err = rc == 0 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof err;
      if (rc == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        errno = err;
        rc = -1;
      }
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      const int on = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
      ::freeaddrinfo(res);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return make_error(ErrorCode::kUnavailable, fmt::format("redis {}:{}: {}", o.host, o.port, why));
}

// To hiredis' end of the socketpair; no SIGPIPE when hiredis has closed it.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Waits until the TLS socket can go on after SSL_ERROR_WANT_READ / WANT_WRITE.
bool wait_for(int fd, int ssl_error) {
  pollfd p{fd, static_cast<short>(ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
  return ::poll(&p, 1, 30'000) == 1;
}

// All of `n` bytes through SSL_write on the non-blocking socket.
bool ssl_write_all(SSL* ssl, int fd, const char* p, size_t n) {
  while (n > 0) {
    const int w = SSL_write(ssl, p, static_cast<int>(n));
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    const int e = SSL_get_error(ssl, w);
    if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || !wait_for(fd, e)) return false;
  }
  return true;
}

// SSL_connect with SIGPIPE blocked in this thread (the server may close mid-handshake: an error,
// not the end of the process); a SIGPIPE raised meanwhile is consumed.
bool handshake(SSL* ssl) {
  sigset_t pipe, old;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  const bool ok = SSL_connect(ssl) == 1;
  timespec zero{0, 0};
  while (sigtimedwait(&pipe, nullptr, &zero) == SIGPIPE) {}
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

}  // namespace

Result<std::unique_ptr<TlsRelay>> TlsRelay::open(const RedisEndpoint& o) {
  std::unique_ptr<TlsRelay> r(new TlsRelay());
  r->tls_ = std::make_unique<Tls>();
  Tls& t = *r->tls_;
  const std::string where = fmt::format("redis TLS {}:{}", o.host, o.port);
  t.ctx = SSL_CTX_new(TLS_client_method());
  if (!t.ctx) return make_error(ErrorCode::kInternal, where + ": " + openssl_errors());
  SSL_CTX_set_min_proto_version(t.ctx, TLS1_2_VERSION);
  const bool ca_ok = o.tls_ca_file.empty() ? SSL_CTX_set_default_verify_paths(t.ctx) == 1
                                           : SSL_CTX_load_verify_locations(
                                                 t.ctx, o.tls_ca_file.c_str(), nullptr) == 1;
  if (!ca_ok)
    return invalid_input(
        fmt::format("{}: tls_ca \"{}\": {}", where, o.tls_ca_file, openssl_errors()));
  if (!o.tls_cert_file.empty() || !o.tls_key_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(t.ctx, o.tls_cert_file.c_str()) != 1) {
      return invalid_input(
          fmt::format("{}: tls_cert \"{}\": {}", where, o.tls_cert_file, openssl_errors()));
    }
    if (SSL_CTX_use_PrivateKey_file(t.ctx, o.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return invalid_input(
          fmt::format("{}: tls_key \"{}\": {}", where, o.tls_key_file, openssl_errors()));
    }
  }
  SSL_CTX_set_verify(t.ctx, o.tls_insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);
  ATREX_ASSIGN_OR_RETURN(r->tcp_fd_, tcp_connect(o));
  t.ssl = SSL_new(t.ctx);
  SSL_set_fd(t.ssl, r->tcp_fd_);
  in6_addr ip6{};
  in_addr ip4{};
  const bool is_ip = ::inet_pton(AF_INET, o.host.c_str(), &ip4) == 1 ||
                     ::inet_pton(AF_INET6, o.host.c_str(), &ip6) == 1;
  if (!is_ip) SSL_set_tlsext_host_name(t.ssl, o.host.c_str());  // SNI
  if (!o.tls_insecure) {
    X509_VERIFY_PARAM* param = SSL_get0_param(t.ssl);
    if (is_ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, o.host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, o.host.c_str(), 0);
    }
  }
  // The handshake within the connect timeout (SO_RCVTIMEO/SO_SNDTIMEO; cleared afterwards).
  timeval tv{static_cast<time_t>(o.connect_timeout.count() / 1000),
             static_cast<suseconds_t>((o.connect_timeout.count() % 1000) * 1000)};
  ::setsockopt(r->tcp_fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(r->tcp_fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (!handshake(t.ssl)) {
    const long verify = SSL_get_verify_result(t.ssl);
    std::string why = openssl_errors();
    if (verify != X509_V_OK) why += fmt::format(" ({})", X509_verify_cert_error_string(verify));
    ::close(r->tcp_fd_);
    r->tcp_fd_ = -1;
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("{}: TLS handshake failed: {}", where, why));
  }
  // Non-blocking from here: a record that is not application data (a TLS 1.3 session ticket)
  // must not leave the relay blocked in SSL_read while hiredis' next command waits unread.
  ::fcntl(r->tcp_fd_, F_SETFL, ::fcntl(r->tcp_fd_, F_GETFL) | O_NONBLOCK);
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("{}: socketpair: {}", where, std::strerror(errno)));
  }
  r->client_fd_ = pair[0];
  r->relay_fd_ = pair[1];
  r->thread_ = std::thread([p = r.get()] { p->pump(); });
  return r;
}

int TlsRelay::take_client_fd() {
  const int fd = client_fd_;
  client_fd_ = -1;
  return fd;
}

// Plain bytes from hiredis go out through SSL_write; records from the server come back through
// SSL_read on the non-blocking socket, until it wants more bytes, so nothing decrypted waits.
void TlsRelay::pump() {
  sigset_t pipe;  // SSL_write to a closed connection: EPIPE here, never the process' end
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  SSL* ssl = tls_->ssl;
  char buf[16384];
  bool alive = true;
  while (alive && !stop_.load()) {
    pollfd fds[2] = {{relay_fd_, POLLIN, 0}, {tcp_fd_, POLLIN, 0}};
    const int rc = SSL_pending(ssl) > 0 ? 1 : ::poll(fds, 2, 200);
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::read(relay_fd_, buf, sizeof buf);
      if (n <= 0) break;  // hiredis closed its end
      if (!ssl_write_all(ssl, tcp_fd_, buf, static_cast<size_t>(n))) break;
    }
    // Everything readable now: whole records until OpenSSL wants more bytes from the socket.
    for (;;) {
      const int n = SSL_read(ssl, buf, sizeof buf);
      if (n > 0) {
        if (!write_all(relay_fd_, buf, static_cast<size_t>(n))) alive = false;
        if (!alive) break;
        continue;
      }
      const int e = SSL_get_error(ssl, n);
      if (e == SSL_ERROR_WANT_READ) break;  // no complete record yet (or only a session ticket)
      if (e == SSL_ERROR_WANT_WRITE && wait_for(tcp_fd_, e)) continue;
      alive = false;  // the server closed or the TLS session failed
      break;
    }
  }
  // hiredis sees EOF on its end: the command fails and the connection reconnects. Only the
  // direction toward hiredis is shut: hiredis writes with write(2), so a command sent after the
  // server dropped the session would raise SIGPIPE in the caller's thread and end the process
  // (and orphan any child holding the caller's stdout). What hiredis still sends is read and
  // dropped here until the connection is freed (RedisConnection::drop) and stop_ is set.
  ::shutdown(relay_fd_, SHUT_WR);
  while (!stop_.load()) {
    pollfd p{relay_fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, 200);
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    const ssize_t n = ::read(relay_fd_, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;  // hiredis closed its end
  }
}

TlsRelay::~TlsRelay() {
  stop_ = true;
  if (tcp_fd_ >= 0) ::shutdown(tcp_fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  for (int fd : {tcp_fd_, relay_fd_, client_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace atrex
