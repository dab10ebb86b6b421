// The reducer on a live sweep in a real redis-server: its manifest and result keys as the
// workers store them (SweepStore), scored like the same sweep's results folder; both together
// count once.
#include <gtest/gtest.h>

#include "atrex/common/redis/sweep_store.h"
#include "atrex/scoring/reducer.h"
#include "atrex/testing/redis_server.h"
#include "fixture_writer.h"

namespace atrex::scoring {
namespace {
namespace fs = std::filesystem;

TEST(ReducerRedis, ALiveSweepInRedisScoresLikeItsFolderAndBothCountOnce) {
  auto& redis = atrex::testing::shared_redis();
  ASSERT_TRUE(redis.running());
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  const fs::path dir = fs::temp_directory_path() / ("atrex_reducer_redis_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  testing::FixtureSweep f(*suite, "redis0001", "live", {"search"}, {"rms_norm", "l2_norm"});
  f.evaluated("search", "rms_norm", {{"0", 50}, {"1", 60}});
  f.write(dir);  // l2_norm not final yet: a running sweep
  ASSERT_TRUE(publish_manifest(redis.options(), f.manifest()));
  auto store = SweepStore::open(redis.options(), "redis0001");
  ASSERT_TRUE(store) << store.error().message;
  MemoryResultStore mem;
  f.fill(mem);
  auto entries = mem.entries();
  ASSERT_TRUE(entries);
  for (const auto& [k, v] : *entries) ASSERT_TRUE(store->results->put(k, v));

  Reducer live(*suite);
  ASSERT_TRUE(live.add_redis(redis.options(), "redis0001"));
  auto from_redis = live.finish("now");
  Reducer folder(*suite);
  ASSERT_TRUE(folder.add_folder(dir));
  auto from_folder = folder.finish("now");
  ASSERT_TRUE(from_redis && from_folder);
  EXPECT_DOUBLE_EQ(from_redis->agents[0].s_agg, from_folder->agents[0].s_agg);
  EXPECT_GT(from_redis->agents[0].s_agg, 0);
  EXPECT_TRUE(from_redis->partial);
  EXPECT_EQ(from_redis->sweeps[0].records_read, 2);

  Reducer both(*suite);
  ASSERT_TRUE(both.add_folder(dir));
  ASSERT_TRUE(both.add_redis(redis.options(), "redis0001"));
  auto merged = both.finish("now");
  ASSERT_TRUE(merged);
  ASSERT_EQ(merged->agents.size(), 1u);
  EXPECT_DOUBLE_EQ(merged->agents[0].s_agg, from_folder->agents[0].s_agg);
  EXPECT_EQ(merged->sweeps[0].records_read, 2);
  EXPECT_EQ(merged->sweeps[0].duplicates_dropped, 3);  // 1 marker + 2 records

  auto unknown = Reducer(*suite).add_redis(redis.options(), "nosuchsweep");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace atrex::scoring
