// Parameterised contract suite for TaskQueue implementations. An implementation provides a
// QueueFactory; time-dependent cases move a ManualClock (in-process) or wait out a short real
// lease (Redis), through QueueFactory::advance.
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/clock.h"
#include "atrex/common/queue.h"

namespace atrex {

class QueueFactory {
 public:
  virtual ~QueueFactory() = default;
  virtual std::unique_ptr<TaskQueue> make(const QueueOptions& options, ManualClock& clock) = 0;
  // Lets at least `d` of lease time pass.
  virtual void advance(ManualClock& clock, std::chrono::milliseconds d) = 0;
};

class QueueContractTest : public ::testing::TestWithParam<std::shared_ptr<QueueFactory>> {
 protected:
  std::unique_ptr<TaskQueue> make(QueueOptions options = {}) {
    return GetParam()->make(options, clock_);
  }
  void advance(std::chrono::milliseconds d) { GetParam()->advance(clock_, d); }
  ManualClock clock_;
};

using std::chrono::milliseconds;

TEST_P(QueueContractTest, DeliversEachMessageOnceInOrder) {
  auto q = make();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q->enqueue("s", Json{{"i", i}}));
  auto a = q->claim("s", "c1", 3, milliseconds(0));
  ASSERT_TRUE(a);
  ASSERT_EQ(a->size(), 3u);
  auto b = q->claim("s", "c2", 10, milliseconds(0));
  ASSERT_TRUE(b);
  ASSERT_EQ(b->size(), 2u);
  std::vector<int> seen;
  for (auto& l : *a) seen.push_back(l.body["i"].get<int>());
  for (auto& l : *b) seen.push_back(l.body["i"].get<int>());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
  for (auto& l : *a) EXPECT_EQ(l.delivery_count, 1);
}

TEST_P(QueueContractTest, AckedMessageIsNeverRedelivered) {
  QueueOptions opt;
  opt.lease_timeout = milliseconds(200);
  auto q = make(opt);
  ASSERT_TRUE(q->enqueue("s", Json{{"x", 1}}));
  auto a = q->claim("s", "c1", 1, milliseconds(0));
  ASSERT_EQ(a->size(), 1u);
  auto acked = q->ack(a->front());
  ASSERT_TRUE(acked);
  EXPECT_TRUE(*acked);
  advance(milliseconds(400));
  auto b = q->claim("s", "c2", 1, milliseconds(0));
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->empty());
  auto st = q->stats("s");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->acked_total, 1);
  EXPECT_EQ(st->leased, 0);
}

TEST_P(QueueContractTest, ExpiredLeaseIsReclaimedByAnotherConsumer) {
  QueueOptions opt;
  opt.lease_timeout = milliseconds(200);
  auto q = make(opt);
  ASSERT_TRUE(q->enqueue("s", Json{{"x", 1}}));
  auto a = q->claim("s", "dead-runner", 1, milliseconds(0));
  ASSERT_EQ(a->size(), 1u);
  // Not yet expired: nobody else gets it.
  auto early = q->claim("s", "c2", 1, milliseconds(0));
  EXPECT_TRUE(early->empty());
  advance(milliseconds(400));
  auto b = q->claim("s", "c2", 1, milliseconds(0));
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ(b->front().message_id, a->front().message_id);
  EXPECT_EQ(b->front().delivery_count, 2);
  // The dead runner's late ack no longer counts.
  auto late = q->ack(a->front());
  ASSERT_TRUE(late);
  EXPECT_FALSE(*late);
  auto mine = q->ack(b->front());
  EXPECT_TRUE(*mine);
}

TEST_P(QueueContractTest, RenewKeepsLeaseAlive) {
  QueueOptions opt;
  opt.lease_timeout = milliseconds(300);
  auto q = make(opt);
  ASSERT_TRUE(q->enqueue("s", Json{{"x", 1}}));
  auto a = q->claim("s", "c1", 1, milliseconds(0));
  ASSERT_EQ(a->size(), 1u);
  for (int i = 0; i < 3; ++i) {
    advance(milliseconds(200));
    auto r = q->renew(a->front());
    ASSERT_TRUE(r);
    EXPECT_TRUE(*r);
  }
  auto b = q->claim("s", "c2", 1, milliseconds(0));
  EXPECT_TRUE(b->empty());
}

TEST_P(QueueContractTest, ReleaseRedeliversThenDeadLettersWithLastError) {
  QueueOptions opt;
  opt.max_deliveries = 2;
  auto q = make(opt);
  ASSERT_TRUE(q->enqueue("s", Json{{"poison", true}}));
  auto a = q->claim("s", "c1", 1, milliseconds(0));
  ASSERT_EQ(a->size(), 1u);
  ASSERT_TRUE(*q->release(a->front(), "worker crashed: SIGSEGV"));
  auto b = q->claim("s", "c2", 1, milliseconds(0));
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ(b->front().delivery_count, 2);
  ASSERT_TRUE(*q->release(b->front(), "worker crashed again"));
  auto c = q->claim("s", "c3", 1, milliseconds(0));
  EXPECT_TRUE(c->empty());
  auto dead = q->dead_letters("s");
  ASSERT_TRUE(dead);
  ASSERT_EQ(dead->size(), 1u);
  EXPECT_EQ(dead->front().last_error, "worker crashed again");
  EXPECT_EQ(dead->front().delivery_count, 2);
  EXPECT_EQ(dead->front().body["poison"], true);
}

TEST_P(QueueContractTest, ExpiredLeasePastMaxDeliveriesIsDeadLettered) {
  QueueOptions opt;
  opt.lease_timeout = milliseconds(200);
  opt.max_deliveries = 1;
  auto q = make(opt);
  ASSERT_TRUE(q->enqueue("s", Json{{"x", 1}}));
  ASSERT_EQ(q->claim("s", "c1", 1, milliseconds(0))->size(), 1u);
  advance(milliseconds(400));
  EXPECT_TRUE(q->claim("s", "c2", 1, milliseconds(0))->empty());
  auto st = q->stats("s");
  EXPECT_EQ(st->dead, 1);
  EXPECT_EQ(st->leased, 0);
}

TEST_P(QueueContractTest, InFlightListsReadyAndLeasedButNotAckedOrDead) {
  QueueOptions opt;
  opt.max_deliveries = 1;
  auto q = make(opt);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q->enqueue("s", Json{{"i", i}}));
  auto got = q->claim("s", "c", 3, milliseconds(0));
  ASSERT_EQ(got->size(), 3u);
  ASSERT_TRUE(*q->ack((*got)[0]));
  ASSERT_TRUE(*q->release((*got)[1], "dead"));  // max_deliveries 1: dead-lettered
  auto flying = q->in_flight("s");
  ASSERT_TRUE(flying);
  std::multiset<int> ids;
  for (const auto& b : *flying) ids.insert(b["i"].get<int>());
  EXPECT_EQ(ids, (std::multiset<int>{2, 3}));  // one leased, one never delivered
}

TEST_P(QueueContractTest, StreamsAreIndependent) {
  auto q = make();
  ASSERT_TRUE(q->enqueue("a", Json{{"x", 1}}));
  EXPECT_TRUE(q->claim("b", "c", 1, milliseconds(0))->empty());
  EXPECT_EQ(q->claim("a", "c", 1, milliseconds(0))->size(), 1u);
}

TEST_P(QueueContractTest, BlockingClaimWakesOnEnqueue) {
  auto q = make();
  std::thread producer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    (void)q->enqueue("s", Json{{"x", 1}});  // a failed enqueue shows as the claim below failing
  });
  auto a = q->claim("s", "c", 1, milliseconds(5000));
  producer.join();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size(), 1u);
}

TEST_P(QueueContractTest, ConcurrentConsumersNeverShareAMessage) {
  auto q = make();
  constexpr int kMessages = 400;
  for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(q->enqueue("s", Json{{"i", i}}));
  std::mutex mu;
  std::multiset<int> seen;
  std::vector<std::thread> consumers;
  for (int c = 0; c < 4; ++c) {
    consumers.emplace_back([&, c] {
      for (;;) {
        const std::string consumer = "c" + std::to_string(c);
        auto got = q->claim("s", consumer, 7, milliseconds(0));
        if (!got || got->empty()) return;
        for (auto& l : *got) {
          (void)q->ack(l);  // an ack that failed would redeliver: the count below catches it
          std::lock_guard lock(mu);
          seen.insert(l.body["i"].get<int>());
        }
      }
    });
  }
  for (auto& t : consumers) t.join();
  ASSERT_EQ(seen.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
}

TEST_P(QueueContractTest, BatchEnqueueAndAckKeepOrderAndCountOnlyHeldLeases) {
  QueueOptions opt;
  opt.lease_timeout = milliseconds(200);
  auto q = make(opt);
  std::vector<Json> bodies;
  for (int i = 0; i < 6; ++i) bodies.push_back(Json{{"i", i}});
  auto ids = q->enqueue_batch("s", bodies);
  ASSERT_TRUE(ids) << ids.error().message;
  ASSERT_EQ(ids->size(), 6u);
  EXPECT_EQ(std::set<std::string>(ids->begin(), ids->end()).size(), 6u);
  auto a = q->claim("s", "c1", 4, milliseconds(0));
  ASSERT_TRUE(a);
  ASSERT_EQ(a->size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*a)[i].body["i"].get<int>(), i);
  // c1's first two leases expire and go to c2; acking all four then counts only the other two.
  ASSERT_TRUE(q->ack((*a)[3]));
  advance(milliseconds(400));
  auto b = q->claim("s", "c2", 3, milliseconds(0));
  ASSERT_TRUE(b);
  ASSERT_EQ(b->size(), 3u);  // three expired leases (0, 1, 2), before the new messages
  auto acked = q->ack_batch(*a);
  ASSERT_TRUE(acked);
  EXPECT_EQ(*acked, 0u);
  auto acked_b = q->ack_batch(*b);
  ASSERT_TRUE(acked_b);
  EXPECT_EQ(*acked_b, 3u);
  auto st = q->stats("s");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->acked_total, 4);
  EXPECT_EQ(st->enqueued_total, 6);
  EXPECT_TRUE(q->ack_batch({}));
  auto empty = q->enqueue_batch("s", {});
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST_P(QueueContractTest, MaxLengthRefusesEnqueueUntilAnAckMakesRoom) {
  QueueOptions opt;
  opt.max_length = 3;
  auto q = make(opt);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q->enqueue("s", Json{{"i", i}}));
  auto full = q->enqueue("s", Json{{"i", 3}});
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(full.error().message.find("full"), std::string::npos) << full.error().message;
  // A batch that does not fit is refused whole.
  auto a = q->claim("s", "c1", 1, milliseconds(0));
  ASSERT_EQ(a->size(), 1u);
  EXPECT_FALSE(q->enqueue_batch("s", {Json{{"i", 3}}, Json{{"i", 4}}}));
  ASSERT_TRUE(q->ack(a->front()));
  ASSERT_TRUE(q->enqueue_batch("s", {Json{{"i", 3}}}));
  auto st = q->stats("s");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->ready + st->leased, 3);
  EXPECT_EQ(st->enqueued_total, 4);
}

// What a reconciler sees: a message stays "queued" while ready or leased and is "gone" once
// acked or dead-lettered; requeue_lost() puts a body back as a new message, delivered afresh and
// counted.
TEST_P(QueueContractTest, StateFollowsAMessageAndRequeueLostRedeliversItOnce) {
  QueueOptions opt;
  opt.max_deliveries = 1;
  auto q = make(opt);
  auto a = q->enqueue("s", Json{{"i", 0}});
  auto b = q->enqueue("s", Json{{"i", 1}});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*q->state("s", *a), MessageState::kQueued);
  auto leased = q->claim("s", "c1", 2, milliseconds(0));
  ASSERT_EQ(leased->size(), 2u);
  EXPECT_EQ(*q->state("s", *a), MessageState::kQueued) << "leased is still queued";
  ASSERT_TRUE(*q->ack(leased->at(0)));
  EXPECT_EQ(*q->state("s", *a), MessageState::kGone);
  ASSERT_TRUE(*q->release(leased->at(1), "boom"));  // past max_deliveries: dead-lettered
  EXPECT_EQ(*q->state("s", *b), MessageState::kGone);
  auto again = q->requeue_lost("s", *a, Json{{"i", 0}, {"again", true}});
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_NE(*again, *a);
  EXPECT_EQ(*q->state("s", *again), MessageState::kQueued);
  auto redelivered = q->claim("s", "c2", 10, milliseconds(0));
  ASSERT_TRUE(redelivered);
  ASSERT_EQ(redelivered->size(), 1u);
  EXPECT_TRUE(redelivered->front().body.at("again").get<bool>());
  EXPECT_EQ(redelivered->front().delivery_count, 1);
  auto st = q->stats("s");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->lost_total, 1);
  EXPECT_EQ(st->enqueued_total, 3);
  // Requeueing a message that is still held replaces it: it is never delivered twice.
  auto c = q->enqueue("s", Json{{"i", 2}});
  ASSERT_TRUE(c);
  ASSERT_TRUE(q->requeue_lost("s", *c, Json{{"i", 2}}));
  auto once = q->claim("s", "c3", 10, milliseconds(0));
  ASSERT_TRUE(once);
  EXPECT_EQ(once->size(), 1u);
}

}  // namespace atrex
