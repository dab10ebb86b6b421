// Tasks removed behind the Redis queue's back (issue 14, "no task lost"): an entry deleted
// (XDEL), the stream trimmed (XTRIM), or the consumer holding a lease deleted (XGROUP
// DELCONSUMER). Each is done with raw commands on a real redis-server, as an operator's mistake
// or a rogue client would, and the queue must let its owner see the loss and put the task back.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/redis/connection.h"
#include "atrex/common/redis/queue.h"
#include "atrex/testing/redis_server.h"

namespace atrex {
namespace {

using std::chrono::milliseconds;

class RedisLoss : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    prefix_ = "loss" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    QueueOptions o;
    o.lease_timeout = milliseconds(150);
    auto q = RedisQueue::open(testing::shared_redis().options(), o, prefix_);
    ASSERT_TRUE(q) << q.error().message;
    queue_ = std::move(*q);
    auto c = RedisConnection::connect(testing::shared_redis().options());
    ASSERT_TRUE(c) << c.error().message;
    raw_ = std::move(*c);
  }
  // The stream key RedisQueue uses for `stream` (prefix:q:{stream}).
  std::string stream_key(const std::string& stream) const {
    return prefix_ + ":q:{" + stream + "}";
  }
  RedisValue raw(const std::vector<std::string>& cmd) {
    auto v = raw_->command(cmd);
    EXPECT_TRUE(v) << v.error().message;
    return v ? *v : RedisValue{};
  }

  std::string prefix_;
  std::unique_ptr<RedisQueue> queue_;
  std::unique_ptr<RedisConnection> raw_;
};

TEST_F(RedisLoss, ReadyEntryDeletedWithXdelIsGoneAndRequeuedOnce) {
  auto id = queue_->enqueue("eval", Json{{"task_id", "t1"}});
  ASSERT_TRUE(id);
  raw({"XDEL", stream_key("eval"), *id});
  EXPECT_EQ(*queue_->state("eval", *id), MessageState::kGone);
  EXPECT_TRUE(queue_->in_flight("eval")->empty());
  ASSERT_TRUE(queue_->requeue_lost("eval", *id, Json{{"task_id", "t1"}}));
  auto got = queue_->claim("eval", "r1", 10, milliseconds(0));
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(got->front().body.at("task_id"), "t1");
  EXPECT_EQ(queue_->stats("eval")->lost_total, 1);
}

TEST_F(RedisLoss, LeasedEntryDeletedIsGoneAndXautoclaimCountsItVanished) {
  auto id = queue_->enqueue("eval", Json{{"task_id", "t2"}});
  ASSERT_TRUE(id);
  auto leased = queue_->claim("eval", "r1", 1, milliseconds(0));
  ASSERT_EQ(leased->size(), 1u);
  raw({"XDEL", stream_key("eval"), *id});
  EXPECT_EQ(*queue_->state("eval", *id), MessageState::kGone);
  std::this_thread::sleep_for(milliseconds(200));  // the lease expires on the Redis clock
  auto none = queue_->claim("eval", "r2", 10, milliseconds(0));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty()) << "a deleted entry has no body to deliver";
  auto st = queue_->stats("eval");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->vanished_total, 1) << "XAUTOCLAIM's deleted ids are counted";
  EXPECT_EQ(st->leased, 0) << "and dropped from the pending list";
}

TEST_F(RedisLoss, TrimmedStreamLosesReadyEntriesWhichStateReportsGone) {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*queue_->enqueue("agent", Json{{"i", i}}));
  raw({"XTRIM", stream_key("agent"), "MAXLEN", "1"});
  EXPECT_EQ(*queue_->state("agent", ids[0]), MessageState::kGone);
  EXPECT_EQ(*queue_->state("agent", ids[1]), MessageState::kGone);
  EXPECT_EQ(*queue_->state("agent", ids[2]), MessageState::kQueued);
  EXPECT_EQ(queue_->in_flight("agent")->size(), 1u);
}

// The consumer holding a lease is deleted: its pending entry goes, the stream entry stays but
// no claim ever delivers it again (XREADGROUP ">" only reads past the last-delivered id, and
// XAUTOCLAIM only sees pending entries). That is "stranded", not "queued".
TEST_F(RedisLoss, LeaseOfADeletedConsumerIsStrandedThenRequeuedWithoutADuplicate) {
  auto id = queue_->enqueue("eval", Json{{"task_id", "t3"}});
  auto later = queue_->enqueue("eval", Json{{"task_id", "t4"}});
  ASSERT_TRUE(id && later);
  auto leased = queue_->claim("eval", "r1", 1, milliseconds(0));
  ASSERT_EQ(leased->size(), 1u);
  raw({"XGROUP", "DELCONSUMER", stream_key("eval"), "atrex", "r1"});
  EXPECT_EQ(*queue_->state("eval", *id), MessageState::kStranded);
  EXPECT_EQ(*queue_->state("eval", *later), MessageState::kQueued) << "not yet delivered";
  auto flying = queue_->in_flight("eval");
  ASSERT_TRUE(flying);
  ASSERT_EQ(flying->size(), 1u) << "a stranded entry is not in flight";
  EXPECT_EQ(flying->front().at("task_id"), "t4");
  std::this_thread::sleep_for(milliseconds(200));
  auto before = queue_->claim("eval", "r2", 10, milliseconds(0));
  ASSERT_EQ(before->size(), 1u) << "only t4: the stranded t3 is never delivered by itself";
  ASSERT_TRUE(*queue_->ack(before->front()));
  ASSERT_TRUE(queue_->requeue_lost("eval", *id, Json{{"task_id", "t3"}}));
  EXPECT_EQ(*queue_->state("eval", *id), MessageState::kGone) << "the stranded entry is removed";
  auto after = queue_->claim("eval", "r2", 10, milliseconds(0));
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ(after->front().body.at("task_id"), "t3");
  EXPECT_EQ(raw({"XLEN", stream_key("eval")}).integer, 1) << "the new t3 only, no leftover";
}

}  // namespace
}  // namespace atrex
