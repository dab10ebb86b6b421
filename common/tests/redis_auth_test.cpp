// AUTH against a real redis-server that requires it (acl_server.h): the default user's password
// (`redis://:password@host`) and a Redis 6 ACL user (`redis://user:password@host`) authenticate;
// a wrong password is refused at connect with Redis' WRONGPASS; a connection without credentials
// gets NOAUTH; the ACL user's key pattern holds. The queue contract suite also runs as that ACL
// user (redis_test.cpp), so its Lua scripts touch only the keys they declare.
#include <chrono>

#include <gtest/gtest.h>

#include "atrex/testing/acl_server.h"
#include "atrex/common/redis/connection.h"
#include "atrex/common/redis/queue.h"

namespace atrex {
namespace {

Result<std::unique_ptr<RedisConnection>> connect(const std::string& url) {
  auto o = parse_redis_url(url);
  if (!o) return tl::unexpected(o.error());
  o->max_reconnects = 0;
  return RedisConnection::connect(*o);
}

TEST(RedisAuth, DefaultUserPasswordAndAclUserAuthenticate) {
  auto& server = testing::shared_acl_redis();
  ASSERT_TRUE(server.running());
  auto d = connect(testing::url_with(server, std::string(":") + testing::kDefaultPassword));
  ASSERT_TRUE(d) << d.error().message;
  auto who = (*d)->command({"ACL", "WHOAMI"});
  ASSERT_TRUE(who) << who.error().message;
  EXPECT_EQ(who->str, "default");

  auto u = connect(
      testing::url_with(server, std::string(testing::kAclUser) + ":" + testing::kAclPassword));
  ASSERT_TRUE(u) << u.error().message;
  who = (*u)->command({"ACL", "WHOAMI"});
  ASSERT_TRUE(who) << who.error().message;
  EXPECT_EQ(who->str, testing::kAclUser);
  EXPECT_TRUE((*u)->command({"SET", "atrex:auth-test", "1"}));
  auto outside = (*u)->command({"SET", "elsewhere", "1"});
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, ErrorCode::kInvalidInput) << outside.error().message;
  EXPECT_NE(outside.error().message.find("NOPERM"), std::string::npos) << outside.error().message;
  auto flush = (*u)->command({"FLUSHALL"});
  ASSERT_FALSE(flush) << "FLUSHALL is @dangerous";
  EXPECT_NE(flush.error().message.find("NOPERM"), std::string::npos) << flush.error().message;
}

TEST(RedisAuth, WrongOrMissingCredentialsAreRefusedWithTheReason) {
  auto& server = testing::shared_acl_redis();
  ASSERT_TRUE(server.running());
  const auto started = std::chrono::steady_clock::now();
  const std::string acl_user = testing::kAclUser;
  for (const std::string& userinfo :
       {std::string(":wrong"), acl_user + ":wrong", std::string("nobody:acl-secret")}) {
    auto c = connect(testing::url_with(server, userinfo));
    ASSERT_FALSE(c) << userinfo;
    EXPECT_EQ(c.error().code, ErrorCode::kInvalidInput) << c.error().message;
    EXPECT_NE(c.error().message.find("WRONGPASS"), std::string::npos) << c.error().message;
    EXPECT_EQ(c.error().message.find("wrong"), std::string::npos)
        << "the password is not echoed: " << c.error().message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5))
      << "refused at once, not retried";

  auto anonymous = connect("redis://127.0.0.1:" + std::to_string(server.options().port));
  ASSERT_TRUE(anonymous) << anonymous.error().message;  // nothing is sent before the first command
  auto ping = (*anonymous)->command({"PING"});
  ASSERT_FALSE(ping);
  EXPECT_EQ(ping.error().code, ErrorCode::kInvalidInput) << ping.error().message;
  EXPECT_NE(ping.error().message.find("NOAUTH"), std::string::npos) << ping.error().message;
  EXPECT_NE(ping.error().message.find("redis://[user]:password@"), std::string::npos)
      << ping.error().message;
}

}  // namespace
}  // namespace atrex
