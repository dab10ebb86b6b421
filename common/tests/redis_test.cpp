// The Redis queue and result store against a real redis-server: the same contract suite as
// the in-process queue, plus Redis-specific behaviour (restart with AOF, URL parsing).
#include <atomic>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "atrex/common/redis/local_server.h"
#include "atrex/common/redis/queue.h"
#include "atrex/common/redis/result_store.h"
#include "atrex/testing/acl_server.h"
#include "atrex/testing/queue_contract.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/tls_server.h"

namespace atrex {
namespace {

std::string unique_prefix() {
  static std::atomic<int> n{0};
  return "test" + std::to_string(::getpid()) + "_" + std::to_string(n++);
}

// The Redis queue behind the contract suite: the lease lives on the Redis clock, so time passes
// for real. Subclasses say which server and how to reach it.
class RedisFactoryBase : public QueueFactory {
 public:
  std::unique_ptr<TaskQueue> make(const QueueOptions& options, ManualClock&) override {
    auto q = RedisQueue::open(redis(), options, prefix() + unique_prefix());
    EXPECT_TRUE(q) << q.error().message;
    return q ? std::move(*q) : nullptr;
  }
  void advance(ManualClock& clock, std::chrono::milliseconds d) override {
    std::this_thread::sleep_for(d + std::chrono::milliseconds(20));
    clock.advance(d);
  }

 protected:
  virtual RedisEndpoint redis() = 0;
  virtual std::string prefix() { return ""; }
  static RedisEndpoint from_url(const std::string& url) {
    auto o = parse_redis_url(url);
    EXPECT_TRUE(o) << o.error().message;
    return o ? *o : RedisEndpoint{};
  }
};

class RedisQueueFactory final : public RedisFactoryBase {
  RedisEndpoint redis() override { return testing::shared_redis().options(); }
};

// The same suite over rediss:// (the in-process TLS relay, redis_tls_test.cpp).
class TlsRedisQueueFactory final : public RedisFactoryBase {
  RedisEndpoint redis() override {
    return from_url(
        testing::shared_tls_redis().url("tls_ca=" + testing::shared_certificates()("ca.crt")));
  }
};

// The same suite as the ACL user of acl_server.h, whose keys are limited to atrex:*: every key a
// queue command or Lua script touches must lie under the prefix (and be declared to the script).
class AclUserRedisQueueFactory final : public RedisFactoryBase {
  RedisEndpoint redis() override {
    return from_url(testing::url_with(
        testing::shared_acl_redis(), std::string(testing::kAclUser) + ":" + testing::kAclPassword));
  }
  std::string prefix() override { return "atrex:"; }
};

std::string redis_factory_name(
    const ::testing::TestParamInfo<std::shared_ptr<QueueFactory>>& info) {
  static const char* const kNames[] = {"Redis", "RedisTls", "RedisAclUser"};
  return kNames[info.index];
}

INSTANTIATE_TEST_SUITE_P(Redis, QueueContractTest,
                         ::testing::Values(std::make_shared<RedisQueueFactory>(),
                                           std::make_shared<TlsRedisQueueFactory>(),
                                           std::make_shared<AclUserRedisQueueFactory>()),
                         redis_factory_name);

TEST(RedisUrl, ParsesUserPasswordHostPortDb) {
  auto o = parse_redis_url("redis://runner:s3cret@redis.example:6380/2");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->user, "runner");
  EXPECT_EQ(o->password, "s3cret");
  EXPECT_EQ(o->host, "redis.example");
  EXPECT_EQ(o->port, 6380);
  EXPECT_EQ(o->db, 2);
  auto p = parse_redis_url("redis://:pw@10.0.0.1");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->password, "pw");
  EXPECT_EQ(p->port, 6379);
  EXPECT_FALSE(parse_redis_url("http://host"));
  EXPECT_FALSE(parse_redis_url("redis://host:99999"));
}

TEST(RedisResultStore, FirstWriteWinsAcrossClients) {
  const std::string prefix = unique_prefix();
  auto a = RedisResultStore::open(testing::shared_redis().options(), prefix);
  auto b = RedisResultStore::open(testing::shared_redis().options(), prefix);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(*(*a)->put("t/0", Json{{"s_j", 0.5}}));
  EXPECT_FALSE(*(*b)->put("t/0", Json{{"s_j", 0.9}}));
  EXPECT_EQ((**(*b)->get("t/0"))["s_j"], 0.5);
  EXPECT_TRUE(*(*b)->put("t/1", Json{{"s_j", 0.7}}));
  auto all = (*a)->entries();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].first, "t/0");
  EXPECT_EQ((*all)[0].second["s_j"], 0.5);
}

TEST(RedisResultStore, WaitSeesAWriteFromAnotherClient) {
  const std::string prefix = unique_prefix();
  auto a = RedisResultStore::open(testing::shared_redis().options(), prefix);
  auto b = RedisResultStore::open(testing::shared_redis().options(), prefix);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (void)(*b)->put("k", Json{{"v", 1}});
  });
  auto got = (*a)->wait("k", std::chrono::seconds(10));
  writer.join();
  ASSERT_TRUE(got && got->has_value());
}

// Redis restarted with AOF: queued tasks, leases and results survive, and clients reconnect.
TEST(RedisRestart, QueueAndResultsSurviveARestartWithAof) {
  testing::RedisServer server;
  ASSERT_TRUE(server.running());
  QueueOptions qo;
  qo.lease_timeout = std::chrono::milliseconds(200);
  auto q = RedisQueue::open(server.options(), qo, "restart");
  auto store = RedisResultStore::open(server.options(), "restart");
  ASSERT_TRUE(q && store);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*q)->enqueue("eval", Json{{"i", i}}));
  auto leased = (*q)->claim("eval", "runner-a", 1, std::chrono::milliseconds(0));
  ASSERT_EQ(leased->size(), 1u);
  ASSERT_TRUE(*(*store)->put("t/0", Json{{"ok", true}}));
  server.restart();
  auto st = (*q)->stats("eval");  // the client reconnects by itself
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(st->ready, 2);
  EXPECT_EQ(st->leased, 1);
  EXPECT_TRUE((**(*store)->get("t/0")).at("ok"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto rest = (*q)->claim("eval", "runner-b", 10, std::chrono::milliseconds(0));
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->size(), 3u) << "the expired lease and the two queued tasks";
}

// A second queue object on a stream whose consumer group exists gets BUSYGROUP, which is a final
// answer (not the transient BUSY): it must neither be retried with backoff nor fail the open.
TEST(RedisConnectionTest, BusyGroupIsAFinalErrorNotARetriedBusy) {
  auto c = RedisConnection::connect(testing::shared_redis().options());
  ASSERT_TRUE(c);
  const std::string stream = unique_prefix() + ":s";
  ASSERT_TRUE((*c)->command({"XGROUP", "CREATE", stream, "g", "0", "MKSTREAM"}));
  auto again = (*c)->command({"XGROUP", "CREATE", stream, "g", "0", "MKSTREAM"});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kInternal) << again.error().message;
  EXPECT_NE(again.error().message.find("BUSYGROUP"), std::string::npos);
  // Two queues on one prefix (a producer and a consumer process) share the group.
  const std::string prefix = unique_prefix();
  auto a = RedisQueue::open(testing::shared_redis().options(), {}, prefix);
  auto b = RedisQueue::open(testing::shared_redis().options(), {}, prefix);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->enqueue("s", Json{{"x", 1}}));
  auto got = (*b)->claim("s", "c", 1, std::chrono::milliseconds(0));
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->size(), 1u);
}

TEST(RedisConnectionTest, UnreachableServerIsUnavailable) {
  RedisEndpoint o;
  o.port = free_loopback_port();
  o.max_reconnects = 1;
  o.connect_timeout = std::chrono::milliseconds(200);
  auto c = RedisConnection::connect(o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kUnavailable);
}

// A server already on the port is not mistaken for the new one (it answers PING too, while the
// new one fails to bind and exits): asked for that port, the start fails and says why.
TEST(LocalRedis, AServerAlreadyOnThePortIsNotMistakenForTheNewOne) {
  auto a = LocalRedisServer::start();
  ASSERT_TRUE(a) << a.error().message;
  LocalRedisOptions o;
  o.port = (*a)->port();
  auto b = LocalRedisServer::start(o);
  ASSERT_FALSE(b) << "a second server claimed port " << o.port;
  EXPECT_NE(b.error().message.find("another server answers"), std::string::npos)
      << b.error().message;
  auto c = RedisConnection::connect((*a)->options());
  ASSERT_TRUE(c);
  EXPECT_TRUE((*c)->command({"PING"})) << "the first server is untouched";
}

// The server's stdin, stdout and stderr are not the test's: a server orphaned by a test killed
// mid-way (stop 27's CI: a SIGPIPE) held ctest's output pipe open until ctest's 900 s timeout.
TEST(LocalRedis, TheServerDoesNotHoldTheCallersOutput) {
  auto a = LocalRedisServer::start();
  ASSERT_TRUE(a) << a.error().message;
  const pid_t pid = (*a)->pid();
  for (int fd : {0, 1, 2}) {
    std::error_code ec;
    const auto theirs = std::filesystem::read_symlink(fmt::format("/proc/{}/fd/{}", pid, fd), ec);
    ASSERT_FALSE(ec) << ec.message();
    if (fd == 0) {
      EXPECT_EQ(theirs, "/dev/null");
    } else {
      EXPECT_EQ(theirs.filename(), "redis.log") << "fd " << fd << " is " << theirs;
    }
  }
}

}  // namespace
}  // namespace atrex
