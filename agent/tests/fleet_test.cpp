// Dropout across the fleet (issue 13 item 4, "Must show: dropout"), with the real Redis queue,
// result store and shared best on a real redis-server (testing/redis_server.h), the real
// audit-trail file, real AgentWorkers, a scripted provider and a stand-in runner that scores a
// candidate by the "S=<x>" marker in its source (the runner itself is tested elsewhere; here
// the fleet's mechanics are under test): a dropout's next generation is a queued task another
// worker takes, with the best kernel and without memory, in another direction; with
// parallel_generations: 2 two generations run at once on two workers and the (agent, operator)
// gets exactly one final evaluation; a worker SIGKILLed mid-generation is resumed by another
// from the audit trail with its spent budget and best kernel.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/agent/worker.h"
#include "atrex/common/best_store.h"
#include "atrex/common/redis/queue.h"
#include "atrex/common/redis/result_store.h"
#include "atrex/testing/redis_server.h"

namespace atrex::agent {
namespace {
namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// What the scripted providers saw, shared by every provider of the test binary's process.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  int at_barrier = 0;
  bool barrier_timed_out = false;
  // (sub-agent, generation) -> at the generation's first proposal: memory size, best score
  std::map<std::pair<int, int>, std::pair<size_t, double>> first_call;
};
Seen& seen() {
  static Seen s;
  return s;
}
pid_t main_pid() {
  static const pid_t pid = ::getpid();
  return pid;
}

// Proposes "sub <s> gen <g> it <i> S=<scores[i]>" (the last score repeats). Options:
// scores (array), barrier (the first proposal of each sub-agent's generation 0 waits until two
// sub-agents are there), hang_at (an iteration at which it never returns: a worker to kill).
class ScriptedProvider final : public Provider {
 public:
  explicit ScriptedProvider(Json options) : options_(std::move(options)) {}
  std::string name() const override { return "scripted"; }
  Result<std::optional<Proposal>> propose(const ProposalContext& ctx) override {
    const int sub = ctx.task->subagent;
    // Only a forked worker hangs: the test's own process is the one that resumes.
    if (ctx.iteration == options_.value("hang_at", -1) && ::getpid() != main_pid()) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    {
      std::unique_lock lock(seen().mu);
      seen().first_call.emplace(std::pair{sub, ctx.generation},
                                std::pair{ctx.memory->size(), ctx.best->score});
    }
    if (options_.value("barrier", false) && ctx.generation == 0 && !waited_) {
      waited_ = true;
      std::unique_lock lock(seen().mu);
      ++seen().at_barrier;
      seen().cv.notify_all();
      if (!seen().cv.wait_for(lock, std::chrono::seconds(30),
                              [] { return seen().at_barrier >= 2; })) {
        seen().barrier_timed_out = true;
      }
    }
    const auto& scores = options_.at("scores");
    const size_t i = std::min<size_t>(static_cast<size_t>(ctx.iteration), scores.size() - 1);
    Proposal p;
    p.source = fmt::format("sub {} gen {} it {} S={}", sub, ctx.generation, ctx.iteration,
                           scores[i].get<double>());
    p.file_name = "k.cpp";
    p.provenance = Json{{"provider", "scripted"}};
    return std::optional<Proposal>{p};
  }

 private:
  Json options_;
  bool waited_ = false;
};

class ScriptedFactory final : public ProviderFactory {
 public:
  std::string name() const override { return "scripted"; }
  std::vector<std::string> option_keys() const override { return {}; }
  Result<Json> parse_options(const JsonField&) const override { return Json::object(); }
  Result<std::unique_ptr<Provider>> make(const AgentSpec& spec) const override {
    return std::unique_ptr<Provider>(std::make_unique<ScriptedProvider>(spec.options));
  }
};

// Stands in for the runners: claims evaluation tasks and stores one record per shape, scored by
// the source's "S=<x>" marker. Counts the full evaluations it ran.
class StandInRunner {
 public:
  StandInRunner(const RedisEndpoint& redis, const std::string& prefix, QueueOptions qo) {
    queue_ = std::move(*RedisQueue::open(redis, qo, prefix));
    results_ = std::move(*RedisResultStore::open(redis, prefix));
    thread_ = std::thread([this] { run(); });
  }
  ~StandInRunner() {
    stop_ = true;
    thread_.join();
  }
  int full_evaluations() const { return full_.load(); }

 private:
  void run() {
    while (!stop_) {
      auto leases = queue_->claim(kEvalStream, "stand-in-runner", 4, milliseconds(50));
      if (!leases) continue;
      for (const auto& l : *leases) {
        auto task = eval_task_from_json(l.body, "eval task");
        if (!task) continue;
        std::smatch m;
        std::regex_search(task->candidate.source, m, std::regex("S=(-?[0-9.]+)"));
        const double s = std::stod(m[1]);
        for (const auto& shape : task->shape_ids) {
          EvalRecord r = new_eval_record(*task, shape);
          r.status = s < 0 ? EvalStatus::kWrongResult : EvalStatus::kOk;
          if (s >= 0) r.s_j = s;
          (void)results_->put(record_key(task->task_id, shape), to_json(r));
        }
        if (task->purpose == EvalPurpose::kFull) ++full_;
        (void)queue_->ack(l);
      }
    }
  }
  std::unique_ptr<RedisQueue> queue_;
  std::unique_ptr<RedisResultStore> results_;
  std::atomic<bool> stop_{false};
  std::atomic<int> full_{0};
  std::thread thread_;
};

class Fleet : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    (void)main_pid();  // fixed before any fork
    prefix_ = fmt::format("fleet{}_{}", ::getpid(), n++);
    dir_ = fs::temp_directory_path() / prefix_;
    fs::remove_all(dir_);
    qo_.lease_timeout = milliseconds(1000);
    registry_.add(std::make_shared<ScriptedFactory>());
    {
      std::lock_guard lock(seen().mu);
      seen().at_barrier = 0;
      seen().barrier_timed_out = false;
      seen().first_call.clear();
    }
    task_.sweep_id = prefix_;
    task_.agent.name = "stall";
    task_.agent.provider = "scripted";
    task_.agent.iterations = 8;
    task_.agent.patience = 2;
    task_.agent.max_generations = 3;
    task_.op = "rms_norm";
    task_.quick_shapes = {"0"};
    task_.full_shapes = {"0", "1"};
    task_.quick_settings.shape_timeout_s = 5;
    task_.quick_settings.compile_timeout_s = 5;
    task_.full_settings = task_.quick_settings;
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Worker {
    std::unique_ptr<RedisQueue> queue;
    std::unique_ptr<RedisResultStore> results;
    std::unique_ptr<RedisBestStore> best;
    std::unique_ptr<AgentWorker> worker;
  };
  // A worker with its own connections, as a worker process on another host has.
  Worker worker(const std::string& name) {
    Worker w;
    const auto redis = testing::shared_redis().options();
    w.queue = std::move(*RedisQueue::open(redis, qo_, prefix_));
    w.results = std::move(*RedisResultStore::open(redis, prefix_));
    w.best = std::move(*RedisBestStore::open(redis, prefix_));
    AgentWorkerOptions o;
    o.consumer = name;
    o.audit_dir = dir_ / "audit";
    o.poll_block = milliseconds(100);
    o.heartbeat = milliseconds(200);
    o.shared_best = w.best.get();
    w.worker = std::make_unique<AgentWorker>(*w.queue, *w.results, registry_, o);
    return w;
  }
  void enqueue(const AgentTask& t) {
    auto q = RedisQueue::open(testing::shared_redis().options(), qo_, prefix_);
    ASSERT_TRUE(q && (*q)->enqueue(kAgentStream, to_json(t)));
  }
  std::optional<FinalMarker> final_marker() {
    auto r = RedisResultStore::open(testing::shared_redis().options(), prefix_);
    auto j = (*r)->get(final_key(task_.agent.name, task_.op));
    if (!j || !*j) return std::nullopt;
    return *final_marker_from_json(**j, "final");
  }
  std::vector<Json> events(const std::string& kind) const {
    std::vector<Json> out;
    std::ifstream in(dir_ / "audit" / task_.agent.name / (task_.op + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      Json e = Json::parse(line, nullptr, false);
      if (!e.is_discarded() && e["event"] == kind) out.push_back(e);
    }
    return out;
  }

  std::string prefix_;
  fs::path dir_;
  QueueOptions qo_;
  ProviderRegistry registry_;
  AgentTask task_;
};

TEST_F(Fleet, DropoutRequeuesTheNextGenerationThatAnotherWorkerTakesWithTheBestAndNoMemory) {
  task_.agent.options = Json{{"scores", {0.5, 0.1}}};  // improves once, then stalls
  StandInRunner runner(testing::shared_redis().options(), prefix_, qo_);
  Worker a = worker("worker-a"), b = worker("worker-b");
  enqueue(task_);
  auto ran = a.worker->run_once();
  ASSERT_TRUE(ran && *ran) << (ran ? "no task" : ran.error().message);
  ASSERT_EQ(events("generation_end").size(), 1u);
  EXPECT_EQ(events("generation_end")[0]["reason"], "dropout");
  EXPECT_EQ(events("evaluated").size(), 3u) << "1 improvement + patience 2";
  ran = b.worker->run_once();  // generation 1 is a queued task: worker b takes it
  ASSERT_TRUE(ran && *ran) << (ran ? "no task" : ran.error().message);
  const auto starts = events("generation_start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0]["worker"], "worker-a");
  EXPECT_EQ(starts[1]["worker"], "worker-b");
  EXPECT_EQ(starts[1]["generation"], 1);
  EXPECT_DOUBLE_EQ(starts[1]["best_score"].get<double>(), 0.5) << "the best kernel came along";
  EXPECT_NE(starts[1]["direction"]["id"], starts[0]["direction"]["id"]);
  {
    std::lock_guard lock(seen().mu);
    const auto g1 = seen().first_call.at({0, 1});
    EXPECT_EQ(g1.first, 0u) << "generation 1 starts without generation 0's memory";
    EXPECT_DOUBLE_EQ(g1.second, 0.5);
  }
  // The rest of the budget: generation 2 (the last) on whichever worker, then the final.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!final_marker() && Clock::now() < deadline) (void)a.worker->run_once();
  auto marker = final_marker();
  ASSERT_TRUE(marker);
  EXPECT_EQ(marker->status, FinalStatus::kEvaluated);
  EXPECT_DOUBLE_EQ(marker->quick_score, 0.5);
  EXPECT_EQ(marker->iterations_used, 8);
  EXPECT_EQ(marker->generations, 3);
  EXPECT_EQ(runner.full_evaluations(), 1);
}

TEST_F(Fleet, ParallelGenerationsRunAtOnceOnTwoWorkersShareTheBestAndCloseOnce) {
  task_.agent.parallel_generations = 2;
  task_.agent.iterations = 10;
  task_.agent.options = Json{{"scores", {0.2, 0.4, 0.3, 0.7, 0.1}}, {"barrier", true}};
  StandInRunner runner(testing::shared_redis().options(), prefix_, qo_);
  for (int s = 0; s < 2; ++s) {
    AgentTask t = task_;
    t.subagent = s;
    enqueue(t);
  }
  Worker a = worker("worker-a"), b = worker("worker-b");
  std::atomic<bool> stop{false};
  std::thread ta([&] { a.worker->run(stop); });
  std::thread tb([&] { b.worker->run(stop); });
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!final_marker() && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(50));
  stop = true;
  ta.join();
  tb.join();
  {
    std::lock_guard lock(seen().mu);
    EXPECT_FALSE(seen().barrier_timed_out) << "the two generation-0s did not overlap";
    EXPECT_EQ(seen().at_barrier, 2);
  }
  auto marker = final_marker();
  ASSERT_TRUE(marker);
  EXPECT_EQ(marker->status, FinalStatus::kEvaluated);
  EXPECT_EQ(runner.full_evaluations(), 1) << "exactly one final evaluation per (agent, operator)";
  EXPECT_EQ(events("final").size(), 1u);
  EXPECT_EQ(events("evaluated").size(), 10u) << "the iteration budget is shared, not per sub-agent";
  int closes = 0;
  for (const auto& e : events("generation_end")) closes += e["closes_pair"].get<bool>();
  EXPECT_EQ(closes, 1);
  const auto starts = events("generation_start");
  std::map<int, Json> g0;
  for (const auto& s : starts) {
    if (s["generation"] == 0) g0[s["subagent"].get<int>()] = s;
  }
  ASSERT_EQ(g0.size(), 2u);
  EXPECT_NE(g0[0]["worker"], g0[1]["worker"]) << "two workers";
  EXPECT_NE(g0[0]["direction"]["id"], g0[1]["direction"]["id"]) << "two directions";
  // The shared best is the best any sub-agent evaluated.
  double max_score = -1;
  for (const auto& e : events("evaluated"))
    max_score = std::max(max_score, e["score"].get<double>());
  auto shared = (*RedisBestStore::open(testing::shared_redis().options(), prefix_))
                    ->get(task_.agent.name + "/" + task_.op);
  ASSERT_TRUE(shared && *shared);
  EXPECT_DOUBLE_EQ((*shared)->score, max_score);
  EXPECT_DOUBLE_EQ(marker->quick_score, max_score);
}

TEST_F(Fleet, KilledWorkerIsResumedFromTheAuditTrailWithItsSpentBudgetAndBest) {
  task_.agent.iterations = 6;
  task_.agent.patience = 100;
  task_.agent.options = Json{{"scores", {0.1, 0.9, 0.2, 0.3}}, {"hang_at", 3}};
  enqueue(task_);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The victim: its own connections, claims the task, evaluates 3 candidates, then hangs in
    // the provider until it is killed.
    Worker v = worker("victim");
    (void)v.worker->run_once();
    ::_exit(0);
  }
  {
    StandInRunner runner(testing::shared_redis().options(), prefix_, qo_);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (events("evaluated").size() < 3 && Clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(20));
    ASSERT_EQ(events("evaluated").size(), 3u);
    std::this_thread::sleep_for(milliseconds(100));  // let it claim iteration 3 and hang
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status));
    // The rescuer (this process: its provider does not hang) takes the task once its lease
    // expires.
    Worker r = worker("rescuer");
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (!final_marker() && Clock::now() < until) (void)r.worker->run_once();
    EXPECT_EQ(runner.full_evaluations(), 1);
  }
  auto marker = final_marker();
  ASSERT_TRUE(marker);
  const auto starts = events("generation_start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0]["worker"], "victim");
  EXPECT_EQ(starts[1]["worker"], "rescuer");
  EXPECT_EQ(starts[1]["resumed"], true);
  EXPECT_EQ(starts[1]["iterations_used"], 3) << "spent budget kept";
  EXPECT_EQ(events("evaluated").size(), 6u) << "3 before the kill + the 3 left, not 6 more";
  EXPECT_EQ(marker->iterations_used, 6);
  EXPECT_DOUBLE_EQ(marker->quick_score, 0.9) << "the best found before the kill is kept";
  {
    std::lock_guard lock(seen().mu);  // only the rescuer's calls are in this process
    const auto resumed = seen().first_call.at({0, 0});
    EXPECT_EQ(resumed.first, 0u) << "the dead worker's memory is gone";
    EXPECT_DOUBLE_EQ(resumed.second, 0.9) << "its best kernel is not";
  }
}

}  // namespace
}  // namespace atrex::agent
