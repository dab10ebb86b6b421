// Dropout across the fleet, the loop's side (issue 13 item 4), with a scripted provider and
// evaluator and the real audit-trail file: dropout exactly after `patience`, each generation's
// direction one the trail has not tried, the wall-time, token and cost budgets, parallel
// sub-agents sharing one iteration budget through the trail's lock, a generation resumed after
// its worker died, and a torn last line.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/agent/direction.h"
#include "atrex/agent/loop.h"

namespace atrex::agent {
namespace {
namespace fs = std::filesystem;

// Proposes "kernel <n> S=<score>" with scores from a table (the last entry repeats); offers
// three directions; records what each call was shown.
class StallingProvider final : public Provider {
 public:
  explicit StallingProvider(std::vector<double> scores) : scores_(std::move(scores)) {}
  std::string name() const override { return "stalling"; }
  std::vector<Direction> directions(const AgentTask&) const override {
    return {{"d:a", "direction a", "try a"},
            {"d:b", "direction b", "try b"},
            {"d:c", "direction c", "try c"}};
  }
  Result<std::optional<Proposal>> propose(const ProposalContext& ctx) override {
    if (fail_at >= 0 && calls == fail_at) {
      ++calls;
      return make_error(ErrorCode::kUnavailable, "the worker died here");
    }
    memory_sizes.push_back(ctx.memory->size());
    directions_seen.push_back(ctx.direction ? ctx.direction->id : "");
    best_seen.push_back(ctx.best->score);
    const double s = scores_[std::min<size_t>(static_cast<size_t>(calls), scores_.size() - 1)];
    Proposal p;
    p.source = fmt::format("kernel {} {} S={}", subagent_tag, calls, s);
    p.file_name = "k.cpp";
    p.provenance = Json{{"n", calls}};
    p.usage = usage;
    ++calls;
    return std::optional<Proposal>{p};
  }
  int calls = 0;
  int fail_at = -1;
  int subagent_tag = 0;  // keeps the sources of two sub-agents apart
  TokenUsage usage;
  std::vector<size_t> memory_sizes;
  std::vector<std::string> directions_seen;
  std::vector<double> best_seen;

 private:
  std::vector<double> scores_;
};

std::vector<EvalRecord> score_source(const EvalTask& t) {
  std::smatch m;
  std::regex_search(t.candidate.source, m, std::regex("S=(-?[0-9.]+)"));
  const double s = std::stod(m[1]);
  std::vector<EvalRecord> out;
  for (const auto& shape : t.shape_ids) {
    EvalRecord r;
    r.task_id = t.task_id;
    r.shape_id = shape;
    r.candidate = t.candidate;
    r.status = s < 0 ? EvalStatus::kWrongResult : EvalStatus::kOk;
    if (s >= 0) r.s_j = s;
    out.push_back(r);
  }
  return out;
}

class FleetLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_fleet_loop_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    task_.sweep_id = "sw";
    task_.agent.name = "stall";
    task_.agent.iterations = 40;
    task_.agent.patience = 3;
    task_.agent.max_generations = 10;
    task_.op = "rms_norm";
    task_.quick_shapes = {"0"};
    task_.full_shapes = {"0", "1"};
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<AuditTrail> trail() { return *AuditTrail::open(dir_ / "audit.jsonl"); }
  std::vector<Json> events(const std::string& kind) const {
    std::vector<Json> out;
    std::ifstream in(dir_ / "audit.jsonl");
    for (std::string line; std::getline(in, line);) {
      Json e = Json::parse(line);
      if (e["event"] == kind) out.push_back(e);
    }
    return out;
  }
  fs::path dir_;
  AgentTask task_;
};

TEST_F(FleetLoop, StallingProviderDropsOutExactlyAfterPatience) {
  for (int patience : {1, 2, 4}) {
    fs::remove_all(dir_);
    task_.agent.patience = patience;
    // 0.5 improves on nothing; 0.505 is within min_improvement (2%); then worse ones.
    StallingProvider provider({0.5, 0.505, 0.3, 0.2});
    auto t = trail();
    auto r = run_generation(task_, provider, score_source, *t);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->end, GenerationEnd::kDropout) << "patience " << patience;
    EXPECT_EQ(provider.calls, 1 + patience) << "one improvement, then `patience` without";
    EXPECT_EQ(events("evaluated").size(), static_cast<size_t>(1 + patience));
    EXPECT_EQ(r->next.generation, 1);
    EXPECT_DOUBLE_EQ(r->next.best.score, 0.505) << "a within-noise gain is still kept as best";
    ASSERT_EQ(events("generation_end").size(), 1u);
    EXPECT_EQ(events("generation_end")[0]["reason"], "dropout");
  }
}

TEST_F(FleetLoop, EachGenerationTakesADirectionTheTrailHasNotTried) {
  task_.agent.patience = 1;
  AgentTask task = task_;
  std::vector<std::string> taken;
  for (int g = 0; g < 4; ++g) {
    StallingProvider provider({0.5, 0.1});
    auto t = trail();  // a fresh instance each time: the choice comes from the file
    auto r = run_generation(task, provider, score_source, *t);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->end, GenerationEnd::kDropout);
    ASSERT_FALSE(provider.directions_seen.empty());
    EXPECT_EQ(provider.directions_seen.front(), r->direction.id) << "the provider is told it";
    EXPECT_EQ(provider.memory_sizes.front(), 0u) << "generation " << g << " starts without memory";
    taken.push_back(r->direction.id);
    task = r->next;
  }
  EXPECT_EQ(taken, (std::vector<std::string>{"d:a", "d:b", "d:c", "d:a"}));
  const auto starts = events("generation_start");
  ASSERT_EQ(starts.size(), 4u);
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(starts[g]["generation"], g);
    EXPECT_EQ(starts[g]["direction"]["id"], taken[g]);
    EXPECT_EQ(starts[g]["direction_repeated"], g == 3) << "all three tried: the least tried again";
  }
  EXPECT_NE(starts[1]["direction"]["id"], starts[0]["direction"]["id"]);
  EXPECT_EQ(trail()->progress().directions.at("d:a"), 2);
}

TEST_F(FleetLoop, KnowledgeBaseDirectionsAreDistinctTechniques) {
  const auto cuda = kb_directions("rms_norm", Backend::kCuda);
  ASSERT_GE(cuda.size(), 3u);
  EXPECT_EQ(cuda.front().id.rfind("kb:", 0), 0u);
  std::set<std::string> ids;
  for (const auto& d : cuda) {
    EXPECT_TRUE(ids.insert(d.id).second) << d.id;
    EXPECT_FALSE(d.text.empty()) << d.id;
  }
  EXPECT_GE(kb_directions("rms_norm", Backend::kCpu).size(), 2u) << "cpu.md's techniques";
}

TEST_F(FleetLoop, TokenBudgetEndsTheGenerationWithItsReason) {
  task_.agent.patience = 100;
  task_.agent.tokens = 400;  // 150 per proposal: spent after the 3rd
  StallingProvider provider({0.1, 0.2, 0.3, 0.4, 0.5});
  provider.usage = TokenUsage{100, 50, 0.01, 1};
  auto t = trail();
  auto r = run_generation(task_, provider, score_source, *t);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->end, GenerationEnd::kTokens);
  EXPECT_EQ(provider.calls, 3);
  EXPECT_EQ(events("generation_end").at(0)["reason"], "tokens");
  EXPECT_TRUE(r->closes_pair) << "the only sub-agent ended: its worker runs the final evaluation";
}

TEST_F(FleetLoop, CostBudgetEndsTheGenerationWithItsReason) {
  task_.agent.patience = 100;
  task_.agent.cost_usd = 0.025;
  StallingProvider provider({0.1, 0.2, 0.3, 0.4, 0.5});
  provider.usage = TokenUsage{100, 50, 0.01, 1};
  auto t = trail();
  auto r = run_generation(task_, provider, score_source, *t);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->end, GenerationEnd::kCost);
  EXPECT_EQ(provider.calls, 3);
  EXPECT_EQ(events("generation_end").at(0)["reason"], "cost");
}

TEST_F(FleetLoop, WallTimeBudgetCountsFromTheFirstGenerationAcrossGenerations) {
  task_.agent.patience = 2;
  task_.agent.wall_time_s = 35;
  double now = 1000;
  GenerationOptions o;
  o.now_unix_s = [&] { return now += 10; };  // each reading of the clock is 10 s later
  StallingProvider provider({0.5, 0.1});
  auto t = trail();
  auto g0 = run_generation(task_, provider, score_source, *t, o);
  ASSERT_TRUE(g0) << g0.error().message;
  ASSERT_EQ(g0->end, GenerationEnd::kDropout);
  StallingProvider second({0.6, 0.7, 0.8});
  auto g1 = run_generation(g0->next, second, score_source, *t, o);
  ASSERT_TRUE(g1) << g1.error().message;
  EXPECT_EQ(g1->end, GenerationEnd::kWallTime) << "the clock of generation 0's start runs on";
  EXPECT_EQ(events("generation_end").back()["reason"], "wall_time");
  EXPECT_LE(second.calls, 1);
}

TEST_F(FleetLoop, ParallelSubagentsNeverOverspendTheSharedIterationBudget) {
  for (int round = 0; round < 4; ++round) {
    fs::remove_all(dir_);
    task_.agent.parallel_generations = 2;
    task_.agent.iterations = 9;
    task_.agent.patience = 1000;
    std::atomic<int> closes{0};
    std::vector<std::thread> threads;
    std::vector<std::string> directions(2);
    // Lockstep: an evaluation waits until the other sub-agent is evaluating too (or has ended),
    // so both always have an iteration in flight when one of them asks for the next: the
    // budget check must count the other's claim, not only finished iterations.
    std::mutex mu;
    std::condition_variable cv;
    int inside = 0, ended = 0;
    const EvalFn lockstep = [&](const EvalTask& t) -> Result<std::vector<EvalRecord>> {
      std::unique_lock lock(mu);
      ++inside;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::seconds(5), [&] { return inside >= 2 || ended >= 1; });
      --inside;
      return score_source(t);
    };
    for (int s = 0; s < 2; ++s) {
      threads.emplace_back([&, s] {
        AgentTask t = task_;
        t.subagent = s;
        StallingProvider provider({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0});
        provider.subagent_tag = s;
        auto audit = trail();  // each sub-agent its own instance, as on two workers
        auto r = run_generation(t, provider, lockstep, *audit);
        {
          std::lock_guard lock(mu);
          ++ended;
          cv.notify_all();
        }
        ASSERT_TRUE(r) << r.error().message;
        EXPECT_EQ(r->end, GenerationEnd::kBudget);
        closes += r->closes_pair;
        directions[static_cast<size_t>(s)] = r->direction.id;
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(events("evaluated").size(), 9u) << "round " << round;
    EXPECT_EQ(closes.load(), 1) << "exactly one sub-agent closes the (agent, operator)";
    EXPECT_NE(directions[0], directions[1]) << "sub-agents started at once take different ones";
    EXPECT_EQ(trail()->progress().iterations_claimed_open, 0);
  }
}

TEST_F(FleetLoop, GenerationResumedAfterItsWorkerDiedKeepsSpentBudgetAndBest) {
  task_.agent.iterations = 6;
  task_.agent.patience = 100;
  {
    StallingProvider provider({0.1, 0.9, 0.2});
    provider.fail_at = 3;  // after 3 evaluated iterations, with the 4th claimed
    auto t = trail();
    auto r = run_generation(task_, provider, score_source, *t);
    ASSERT_FALSE(r);
  }
  EXPECT_EQ(trail()->progress().iterations_claimed_open, 1) << "the dead worker's claim";
  StallingProvider resumed({0.3});
  auto t = trail();
  auto r = run_generation(task_, resumed, score_source, *t);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->end, GenerationEnd::kBudget);
  EXPECT_EQ(resumed.calls, 3) << "3 of 6 iterations were spent before the worker died";
  EXPECT_EQ(events("evaluated").size(), 6u);
  ASSERT_FALSE(resumed.best_seen.empty());
  EXPECT_DOUBLE_EQ(resumed.best_seen.front(), 0.9) << "the resumed generation starts from the best";
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.9);
  const auto starts = events("generation_start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[1]["resumed"], true);
  EXPECT_EQ(starts[1]["direction"]["id"], starts[0]["direction"]["id"]) << "same generation";
  EXPECT_EQ(resumed.memory_sizes.front(), 0u);
}

TEST_F(FleetLoop, TornLastLineIsCutOffByTheNextAppend) {
  {
    auto t = trail();
    ASSERT_TRUE(t->append(Json{{"event", "final"}}));
  }
  {
    std::ofstream out(dir_ / "audit.jsonl", std::ios::app);
    out << R"({"event":"evaluated","sha256":"x","sc)";  // a writer killed mid-line
  }
  auto t = trail();
  ASSERT_TRUE(t->append(Json{{"event", "final"}}));
  auto reopened = AuditTrail::open(dir_ / "audit.jsonl");
  ASSERT_TRUE(reopened) << reopened.error().message;
  EXPECT_EQ(events("final").size(), 2u);
}

}  // namespace
}  // namespace atrex::agent
