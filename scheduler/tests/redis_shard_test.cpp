// Placing sweeps on one of several Redis instances: the list's validation, the stable shard
// function, and the manifest pinning a submitted sweep.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/common/wire/manifest.h"
#include "atrex/scheduler/redis_shard.h"

namespace atrex::scheduler {
namespace {
namespace fs = std::filesystem;

TEST(RedisShard, ListIsSplitOnCommasWithBlanksDropped) {
  auto l = parse_redis_url_list(" redis://a:1, redis://:pw@b:2/3 ", "--redis");
  ASSERT_TRUE(l) << l.error().message;
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[0].to_url(), "redis://a:1");
  EXPECT_EQ((*l)[1].to_url(), "redis://:pw@b:2/3");
  EXPECT_EQ((*l)[1].redacted(), "redis://***@b:2/3");
  EXPECT_EQ((*l)[1].instance(), "b:2/3");
  auto one = parse_redis_url_list("redis://a", "--redis");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->size(), 1u);
}

TEST(RedisShard, EmptyBadOrRepeatedEntryNamesTheFlagAndEntryWithoutPasswords) {
  auto empty = parse_redis_url_list("redis://a:1,,redis://b:2", "--redis");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(empty.error().message.find("--redis \"redis://a:1,,redis://b:2\": entry 2 is empty"),
            std::string::npos)
      << empty.error().message;
  EXPECT_FALSE(parse_redis_url_list("redis://a:1,", "--redis"));
  EXPECT_FALSE(parse_redis_url_list("  ", "--redis"));
  auto bad = parse_redis_url_list("redis://:secret@a:1,http://b", "cluster.redis");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(bad.error().message.find("cluster.redis"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("entry 2"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("http://b"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().message.find("secret"), std::string::npos) << bad.error().message;
  // The same instance, spelt differently (default db, credentials, host case), twice.
  auto twice = parse_redis_url_list("redis://Host:1,redis://:pw@host:1/0", "--redis");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("entry 2 names the instance host:1/0 a second time"),
            std::string::npos)
      << twice.error().message;
  EXPECT_TRUE(parse_redis_url_list("redis://host:1,redis://host:1/1", "--redis"))
      << "another db is another instance";
}

TEST(RedisShard, IndexIsTheSweepIdsSha256PrefixModuloTheInstances) {
  // SHA-256("abc") starts ba7816bf8f01cfea; 0xba7816bf8f01cfea mod 2, 3, 5, 7 = 0, 0, 4, 2.
  EXPECT_EQ(redis_shard_index("abc", 1), 0u);
  EXPECT_EQ(redis_shard_index("abc", 2), 0u);
  EXPECT_EQ(redis_shard_index("abc", 3), 0u);
  EXPECT_EQ(redis_shard_index("abc", 5), 4u);
  EXPECT_EQ(redis_shard_index("abc", 7), 2u);
}

class RedisShardPinning : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atrex_redis_shard_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A manifest of sweep `id` on `redis_url` (none: a local sweep's).
  void write_manifest(const std::string& id, std::optional<std::string> redis_url) {
    Manifest m;
    m.sweep_id = id;
    m.redis_url = std::move(redis_url);
    ASSERT_TRUE(write_manifest_file(dir_, m));
  }
  std::vector<RedisEndpoint> endpoints(const std::vector<std::string>& urls) {
    std::vector<RedisEndpoint> out;
    for (const auto& u : urls) out.push_back(*parse_redis_url(u));
    return out;
  }
  fs::path dir_;
  const std::vector<RedisEndpoint> urls_ = endpoints({"redis://a:1", "redis://b:2", "redis://c:3"});
};

TEST_F(RedisShardPinning, NewSweepGoesToItsShard) {
  auto u = choose_redis_endpoint(urls_, "--redis", "abc", dir_);
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->to_url(), urls_[redis_shard_index("abc", urls_.size())].to_url());
}

TEST_F(RedisShardPinning, ManifestOfTheSameSweepWinsOverTheShard) {
  write_manifest("abc", "redis://:pw@c:3/0");  // the shard is a (0 of 3)
  auto u = choose_redis_endpoint(urls_, "--redis", "abc", dir_);
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->to_url(), "redis://:pw@c:3/0");
  // Another sweep's manifest, or a local sweep's (no URL), pins nothing.
  write_manifest("other", "redis://c:3");
  EXPECT_EQ(choose_redis_endpoint(urls_, "--redis", "abc", dir_)->to_url(), "redis://a:1");
  write_manifest("abc", std::nullopt);
  EXPECT_EQ(choose_redis_endpoint(urls_, "--redis", "abc", dir_)->to_url(), "redis://a:1");
}

TEST_F(RedisShardPinning, ListWithoutTheManifestsInstanceIsRefused) {
  write_manifest("abc", "redis://:secret@d:4");
  auto u = choose_redis_endpoint(urls_, "--redis", "abc", dir_);
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(u.error().message.find("--redis: sweep abc is already on redis://***@d:4"),
            std::string::npos)
      << u.error().message;
  EXPECT_EQ(u.error().message.find("secret"), std::string::npos) << u.error().message;
}

}  // namespace
}  // namespace atrex::scheduler
