// The shared best-so-far (issue 13 item 4): one contract, run against MemoryBestStore and against
// RedisBestStore on a real redis-server, with writers racing from several threads and
// connections. The stored best only ever improves, and score and candidate stay paired.
#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/best_store.h"
#include "atrex/testing/redis_server.h"

namespace atrex {
namespace {

BestCandidate candidate(double score) {
  BestCandidate b;
  b.score = score;
  b.source = fmt::format("// kernel scoring {:.17g}\n", score);
  b.sha256 = fmt::format("sha-{:.17g}", score);
  b.file_name = "k.cpp";
  b.provenance = Json{{"score_written", score}};
  return b;
}

enum class Kind { kMemory, kRedis };

class BestStoreContract : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    prefix_ = fmt::format("best{}_{}", ::getpid(), n++);
    if (GetParam() == Kind::kMemory) shared_memory_ = std::make_shared<MemoryBestStore>();
  }
  // A fresh client (its own connections for Redis; the one shared object in memory).
  std::shared_ptr<BestStore> client() {
    if (GetParam() == Kind::kMemory) return shared_memory_;
    auto s = RedisBestStore::open(testing::shared_redis().options(), prefix_);
    EXPECT_TRUE(s) << s.error().message;
    return s ? std::shared_ptr<BestStore>(std::move(*s)) : nullptr;
  }
  std::string prefix_;
  std::shared_ptr<MemoryBestStore> shared_memory_;
};

TEST_P(BestStoreContract, StaleLowerScoreNeverOverwritesHigher) {
  auto s = client();
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->get("a/rms_norm")->has_value());
  EXPECT_TRUE(*s->offer("a/rms_norm", candidate(0.5)));
  EXPECT_FALSE(*s->offer("a/rms_norm", candidate(0.25))) << "lower score must lose";
  EXPECT_FALSE(*s->offer("a/rms_norm", candidate(0.5))) << "an equal score is no improvement";
  EXPECT_TRUE(*s->offer("a/rms_norm", candidate(0.75)));
  auto got = s->get("a/rms_norm");
  ASSERT_TRUE(got && *got);
  EXPECT_DOUBLE_EQ((*got)->score, 0.75);
  EXPECT_EQ((*got)->source, candidate(0.75).source);
  EXPECT_FALSE(s->get("a/other")->has_value()) << "pairs are separate";
  BestCandidate incorrect = candidate(0.9);
  incorrect.score = -1;
  EXPECT_FALSE(s->offer("a/rms_norm", incorrect)) << "an incorrect candidate is refused";
  EXPECT_DOUBLE_EQ((*s->get("a/rms_norm"))->score, 0.75);
}

TEST_P(BestStoreContract, RacingWritersLeaveTheMaximumAndReadsNeverGoDown) {
  constexpr int kWriters = 6;
  constexpr int kOffersEach = 60;
  // Distinct scores, dealt to the writers in a shuffled order, so that most offers are stale
  // by the time they arrive.
  std::vector<double> scores;
  for (int i = 0; i < kWriters * kOffersEach; ++i) scores.push_back(0.001 * (i + 1));
  std::shuffle(scores.begin(), scores.end(), std::mt19937(7));
  std::atomic<bool> go{false}, done{false};
  std::atomic<int> wins{0}, errors{0}, went_down{0}, mismatched{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w, s = client()] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kOffersEach; ++i) {
        auto r = s->offer("a/op", candidate(scores[static_cast<size_t>(w * kOffersEach + i)]));
        if (!r)
          ++errors;
        else if (*r)
          ++wins;
      }
    });
  }
  std::thread reader([&, s = client()] {
    double last = -1;
    while (!go.load()) std::this_thread::yield();
    while (!done.load()) {
      auto r = s->get("a/op");
      if (!r) {
        ++errors;
        continue;
      }
      if (!*r) continue;
      if ((*r)->score < last) ++went_down;
      if ((*r)->source != candidate((*r)->score).source) ++mismatched;
      last = (*r)->score;
    }
  });
  go = true;
  for (auto& t : threads) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(went_down.load(), 0) << "a reader saw the best get worse";
  EXPECT_EQ(mismatched.load(), 0) << "score and candidate were written apart";
  EXPECT_GE(wins.load(), 1);
  EXPECT_LT(wins.load(), kWriters * kOffersEach) << "stale offers must have lost";
  auto final_best = client()->get("a/op");
  ASSERT_TRUE(final_best && *final_best);
  EXPECT_DOUBLE_EQ((*final_best)->score, *std::max_element(scores.begin(), scores.end()));
}

INSTANTIATE_TEST_SUITE_P(Stores, BestStoreContract, ::testing::Values(Kind::kMemory, Kind::kRedis),
                         [](const auto& param_info) {
                           return param_info.param == Kind::kMemory ? "Memory" : "Redis";
                         });

}  // namespace
}  // namespace atrex
