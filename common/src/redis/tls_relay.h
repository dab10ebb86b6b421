// TLS for Redis connections with Debian 12's hiredis 0.14, which has no TLS of its own: the
// hiredis context talks plain RESP over one end of a socketpair (redisConnectFd), and a relay
// thread moves the bytes between the other end and a TLS connection (OpenSSL) to the server.
// One relay per RedisConnection; it ends when either side closes or the relay is destroyed.
// Redis docs, "TLS":
// https://redis.io/docs/latest/operate/oss_and_stack/management/security/encryption/
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "atrex/common/error.h"
#include "atrex/common/redis/connection.h"

namespace atrex {

class TlsRelay {
 public:
  // Connects to options.host:port over TCP (options.connect_timeout), completes the TLS
  // handshake (server certificate verified against options.tls_ca_file, else the system's CAs,
  // and matched to the host name or IP address, unless tls_insecure; client certificate from
  // tls_cert_file/tls_key_file when set) and starts the relay thread. kUnavailable for a network
  // or handshake failure, naming the host, port and OpenSSL's reason (e.g. "certificate verify
  // failed: unable to get local issuer certificate"); kInvalidInput for an unreadable file.
  static Result<std::unique_ptr<TlsRelay>> open(const RedisEndpoint& options);
  ~TlsRelay();
  TlsRelay(const TlsRelay&) = delete;
  TlsRelay& operator=(const TlsRelay&) = delete;

  // The plain end for hiredis (redisConnectFd takes ownership); -1 after the first call.
  int take_client_fd();

 private:
  TlsRelay() = default;
  void pump();

  struct Tls;  // OpenSSL objects
  std::unique_ptr<Tls> tls_;
  int tcp_fd_ = -1;
  int client_fd_ = -1;  // handed to hiredis
  int relay_fd_ = -1;   // the relay's end of the socketpair
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace atrex
