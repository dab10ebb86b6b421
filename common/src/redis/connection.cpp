#include "atrex/common/redis/connection.h"

#include <hiredis/hiredis.h>

#include <random>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tls_relay.h"

namespace atrex {

namespace {

RedisValue copy_reply(const redisReply* r) {
  RedisValue v;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      v.type = RedisValue::Type::kString;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      v.type = RedisValue::Type::kStatus;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      v.type = RedisValue::Type::kError;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      v.type = RedisValue::Type::kInteger;
      v.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      v.type = RedisValue::Type::kArray;
      v.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) v.elements.push_back(copy_reply(r->element[i]));
      break;
    default: v.type = RedisValue::Type::kNil; break;
  }
  return v;
}

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

}  // namespace

Result<std::unique_ptr<RedisConnection>> RedisConnection::connect(const RedisEndpoint& options) {
  std::unique_ptr<RedisConnection> c(new RedisConnection(options));
  ATREX_TRY(c->reconnect());
  return c;
}

RedisConnection::RedisConnection(RedisEndpoint options) : options_(std::move(options)) {}

RedisConnection::~RedisConnection() { drop(); }

void RedisConnection::drop() {
  if (ctx_) redisFree(ctx_);  // closes hiredis' end of a TLS relay's socketpair
  ctx_ = nullptr;
  relay_.reset();
}

Result<void> RedisConnection::reconnect() {
  drop();
  if (options_.tls) {
    ATREX_ASSIGN_OR_RETURN(relay_, TlsRelay::open(options_));
    ctx_ = redisConnectFd(relay_->take_client_fd());
  } else {
    ctx_ = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                   to_timeval(options_.connect_timeout));
  }
  if (!ctx_ || ctx_->err) {
    std::string why = ctx_ ? ctx_->errstr : "out of memory";
    drop();
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("redis {}:{}: {}", options_.host, options_.port, why));
  }
  redisSetTimeout(ctx_, to_timeval(options_.command_timeout));
  if (!options_.tls)
    redisEnableKeepAlive(ctx_);  // TCP only (the relay keeps its own TCP socket alive)
  auto simple = [&](std::vector<std::string> args) -> Result<void> {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (!r)
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("redis {}: {}", args[0], ctx_->errstr));
    std::string err = r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "";
    freeReplyObject(r);
    if (!err.empty())
      return invalid_input(
          fmt::format("redis {} {}:{}: {}", args[0], options_.host, options_.port, err));
    return ok();
  };
  if (!options_.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!options_.user.empty()) auth.push_back(options_.user);
    auth.push_back(options_.password);
    ATREX_TRY(simple(auth));
  }
  if (options_.db != 0) ATREX_TRY(simple({"SELECT", std::to_string(options_.db)}));
  return ok();
}

Result<RedisValue> RedisConnection::command(const std::vector<std::string>& args,
                                            std::optional<std::chrono::milliseconds> timeout) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  thread_local std::mt19937 rng{std::random_device{}()};
  auto backoff = std::chrono::milliseconds(50);
  for (int attempt = 0;; ++attempt) {
    if (!ctx_) {
      auto rc = reconnect();
      if (!rc) {
        if (attempt >= options_.max_reconnects) return tl::unexpected(rc.error());
        std::this_thread::sleep_for(backoff +
                                    std::chrono::milliseconds(rng() % (backoff.count() + 1)));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(3000));
        continue;
      }
    }
    if (timeout) redisSetTimeout(ctx_, to_timeval(*timeout));
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (timeout && ctx_ && !ctx_->err) redisSetTimeout(ctx_, to_timeval(options_.command_timeout));
    if (!r) {
      const std::string why = ctx_ && ctx_->errstr[0] ? ctx_->errstr : "connection lost";
      spdlog::warn("redis {}:{}: {} failed ({}); reconnecting", options_.host, options_.port,
                   args[0], why);
      drop();
      if (attempt >= options_.max_reconnects) {
        return make_error(ErrorCode::kUnavailable, fmt::format("redis {}: {}", args[0], why));
      }
      std::this_thread::sleep_for(backoff +
                                  std::chrono::milliseconds(rng() % (backoff.count() + 1)));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(3000));
      continue;
    }
    RedisValue v = copy_reply(r);
    freeReplyObject(r);
    if (v.type == RedisValue::Type::kError) {
      // The error code is the reply's first word: BUSYGROUP (a group that exists) is not BUSY.
      const std::string code = v.str.substr(0, v.str.find(' '));
      const bool transient =
          code == "LOADING" || code == "BUSY" || code == "TRYAGAIN" || code == "MASTERDOWN";
      if (transient && attempt < options_.max_reconnects) {
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(3000));
        continue;
      }
      if (code == "NOAUTH" || code == "NOPERM") {  // the URL's credentials, not a fault of ours
        return invalid_input(fmt::format("redis {} {}:{}: {}{}", args[0], options_.host,
                                         options_.port, v.str,
                                         code == "NOAUTH" ? " (give the password in the URL: "
                                                            "redis://[user]:password@host[:port])"
                                                          : ""));
      }
      return make_error(transient ? ErrorCode::kUnavailable : ErrorCode::kInternal,
                        fmt::format("redis {}: {}", args[0], v.str));
    }
    return v;
  }
}

Result<RedisPool::Handle> RedisPool::acquire() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return Handle(*this, std::move(c));
    }
  }
  ATREX_ASSIGN_OR_RETURN(auto c, RedisConnection::connect(options_));
  return Handle(*this, std::move(c));
}

void RedisPool::give_back(std::unique_ptr<RedisConnection> c) {
  std::lock_guard lock(mu_);
  if (idle_.size() < 32) idle_.push_back(std::move(c));
}

}  // namespace atrex
