// A small synchronous Redis client over hiredis (Debian libhiredis-dev 0.14): one connection
// per RedisConnection (hiredis contexts are not thread-safe), replies copied into RedisValue
// trees, reconnection with jittered exponential backoff, AUTH (password or ACL user) and
// SELECT on every (re)connect. Redis docs: https://redis.io/docs/latest/commands/
//
// TLS: hiredis 0.14 (Debian 12) has no TLS support; a rediss:// URL connects through an
// in-process OpenSSL relay (tls_relay.h): hiredis speaks plain RESP over a socketpair.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/redis/endpoint.h"

struct redisContext;

namespace atrex {

class TlsRelay;

struct RedisValue {
  enum class Type { kNil, kString, kInteger, kArray, kStatus, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RedisValue> elements;
  bool is_nil() const { return type == Type::kNil; }
};

class RedisConnection {
 public:
  static Result<std::unique_ptr<RedisConnection>> connect(const RedisEndpoint& options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends one command and waits for its reply. An I/O failure reconnects (with backoff) and
  // resends: commands must tolerate being applied twice (Redis' answer to a write that was
  // lost with the connection is unknowable). A Redis error reply is kUnavailable for
  // LOADING/BUSY-type errors, else kInternal with the server's message. `timeout` replaces
  // the command timeout for this call (a blocking XREADGROUP needs more than its BLOCK time).
  Result<RedisValue> command(const std::vector<std::string>& args,
                             std::optional<std::chrono::milliseconds> timeout = std::nullopt);

 private:
  explicit RedisConnection(RedisEndpoint options);  // out of line: TlsRelay is incomplete here
  Result<void> reconnect();

  void drop();  // frees the context and its TLS relay

  RedisEndpoint options_;
  redisContext* ctx_ = nullptr;
  std::unique_ptr<TlsRelay> relay_;  // rediss:// only
};

// A fixed set of connections shared by threads; a blocking read holds its own connection so it
// never delays other commands.
class RedisPool {
 public:
  explicit RedisPool(RedisEndpoint options) : options_(std::move(options)) {}
  class Handle {
   public:
    Handle(RedisPool& pool, std::unique_ptr<RedisConnection> c)
        : pool_(&pool), conn_(std::move(c)) {}
    Handle(Handle&&) = default;
    ~Handle() {
      if (conn_) pool_->give_back(std::move(conn_));
    }
    RedisConnection* operator->() { return conn_.get(); }
    RedisConnection& operator*() { return *conn_; }

   private:
    RedisPool* pool_;
    std::unique_ptr<RedisConnection> conn_;
  };
  Result<Handle> acquire();
  const RedisEndpoint& options() const { return options_; }

 private:
  void give_back(std::unique_ptr<RedisConnection> c);
  RedisEndpoint options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
};

}  // namespace atrex
