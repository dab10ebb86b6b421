// The runner loop (runner_loop.h): while one task is evaluated, the next is claimed and its
// candidate compiled into the cache; a loop that stops gives back what it claimed ahead; a task
// whose record the store could not take is given back, not acked. cpu backend, real evaluation
// children, the in-process queue.
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/inprocess_queue.h"
#include "atrex/common/json_io.h"
#include "atrex/common/metrics.h"
#include "atrex/common/metrics_server.h"
#include "atrex/common/result_store.h"
#include "atrex/runner/runner_loop.h"
#include "atrex/testing/http_get.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

// A result store that refuses writes (as the Redis one does when the server stays away past the
// connection's reconnects) until `available` is set.
class FlakyResultStore final : public ResultStore {
 public:
  std::atomic<bool> available{false};
  Result<bool> put(const std::string& key, const Json& record) override {
    if (!available) return make_error(ErrorCode::kUnavailable, "redis SET: Connection refused");
    return inner_.put(key, record);
  }
  Result<std::optional<Json>> get(const std::string& key) override { return inner_.get(key); }
  Result<std::optional<Json>> wait(const std::string& key,
                                   std::chrono::milliseconds timeout) override {
    return inner_.wait(key, timeout);
  }
  Result<std::vector<std::pair<std::string, Json>>> entries() override { return inner_.entries(); }

 private:
  MemoryResultStore inner_;
};

class RunnerLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(suite) << suite.error().message;
    suite_ = std::make_unique<problems::Suite>(std::move(*suite));
    auto profiles =
        problems::load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware"});
    ASSERT_TRUE(profiles);
    cache_ = fs::temp_directory_path() /
             ("atrex_loop_cache_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(cache_);
    EvaluatorOptions o;
    o.suite = suite_.get();
    o.hardware = *problems::find_hardware_profile(*profiles, "H20");
    o.cache_dir = cache_;
    o.include_dir = ATREX_TEST_INCLUDE_DIR;
    o.child_dir = ATREX_TEST_BIN_DIR;
    o.seed = 99;
    evaluator_ = std::make_unique<Evaluator>(o);
  }
  void TearDown() override { fs::remove_all(cache_); }

  // A correct rms_norm candidate made distinct by `tag` (its own cache entry).
  static EvalTask task(const std::string& tag, const std::string& file = "rms_norm_correct.cpp") {
    EvalTask t;
    t.task_id = "loop-" + tag;
    t.operator_name = "rms_norm";
    t.shape_ids = {"15"};
    t.candidate.source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / file) + "// " + tag + "\n";
    t.candidate.sha256 = sha256_hex(t.candidate.source);
    t.candidate.backend = Backend::kCpu;
    t.candidate.agent = "test";
    t.candidate.file_name = tag + ".cpp";
    t.settings.seeds = 1;
    t.settings.min_iterations = 2;
    t.settings.max_iterations = 3;
    t.settings.min_time_s = 0;
    return t;
  }
  bool cached(const EvalTask& t) {
    auto c = evaluator_->compile_cache().compile(t.candidate, "native", 120);
    return c && c->ok && c->cache_hit;
  }

  std::unique_ptr<problems::Suite> suite_;
  std::unique_ptr<Evaluator> evaluator_;
  fs::path cache_;
  InProcessQueue queue_;
  MemoryResultStore store_;
};

TEST_F(RunnerLoopTest, NextCandidateIsCompiledWhileTheCurrentTaskIsEvaluated) {
  const EvalTask a = task("a"), b = task("b");
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(a)));
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(b)));
  RunnerLoopOptions o{kEvalStream, "runner-t"};
  o.poll_block = std::chrono::milliseconds(50);
  o.prefetch = 1;
  RunnerLoop loop(queue_, store_, *evaluator_, o);
  auto first = loop.run_once();
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(loop.stats().tasks_done.load(), 1);
  EXPECT_EQ(loop.stats().compiled_ahead.load(), 1);
  EXPECT_TRUE(cached(b)) << "b was not compiled while a was evaluated";
  auto s = queue_.stats(kEvalStream);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->leased, 1) << "b is held by this runner meanwhile";
  auto second = loop.run_once();
  ASSERT_TRUE(second && *second);
  EXPECT_EQ(loop.stats().tasks_done.load(), 2);
  for (const auto& t : {a, b}) {
    auto rec = store_.get(record_key(t.task_id, "15"));
    ASSERT_TRUE(rec && *rec) << t.task_id;
    EXPECT_EQ((**rec)["status"], "ok") << (**rec).dump();
    // The record names the runner that produced it (its consumer name), not the evaluator's
    // default.
    EXPECT_EQ((**rec)["runner"], "runner-t") << (**rec).dump();
  }
}

// A GPU sweep's runner claims as many tasks ahead as it has agents and compiles them all at
// once: after one task, the three behind it are compiled (and leased), and all four finish ok.
TEST_F(RunnerLoopTest, SeveralTasksClaimedAheadAreAllCompiled) {
  std::vector<EvalTask> tasks = {task("p0"), task("p1"), task("p2"), task("p3")};
  for (const auto& t : tasks) ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(t)));
  RunnerLoopOptions o{kEvalStream, "runner-t"};
  o.poll_block = std::chrono::milliseconds(50);
  o.prefetch = 3;
  RunnerLoop loop(queue_, store_, *evaluator_, o);
  auto first = loop.run_once();
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(loop.stats().compiled_ahead.load(), 3);
  for (size_t i = 1; i < tasks.size(); ++i) EXPECT_TRUE(cached(tasks[i])) << tasks[i].task_id;
  EXPECT_EQ(queue_.stats(kEvalStream)->leased, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loop.run_once());
  EXPECT_EQ(loop.stats().tasks_done.load(), 4);
  for (const auto& t : tasks) {
    auto rec = store_.get(record_key(t.task_id, "15"));
    ASSERT_TRUE(rec && *rec) << t.task_id;
    EXPECT_EQ((**rec)["status"], "ok") << (**rec).dump();
  }
}

TEST_F(RunnerLoopTest, WithoutPrefetchTheNextCandidateIsNotCompiledAhead) {
  const EvalTask a = task("a"), b = task("b");
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(a)));
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(b)));
  RunnerLoopOptions o{kEvalStream, "runner-t"};
  o.poll_block = std::chrono::milliseconds(50);
  o.prefetch = 0;
  RunnerLoop loop(queue_, store_, *evaluator_, o);
  auto first = loop.run_once();
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(loop.stats().compiled_ahead.load(), 0);
  EXPECT_FALSE(cached(b));
}

TEST_F(RunnerLoopTest, StoppedLoopGivesBackTheTaskItClaimedAhead) {
  const EvalTask a = task("a"), b = task("b");
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(a)));
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(b)));
  {
    RunnerLoopOptions o{kEvalStream, "runner-t"};
    o.poll_block = std::chrono::milliseconds(50);
    RunnerLoop loop(queue_, store_, *evaluator_, o);
    auto first = loop.run_once();
    ASSERT_TRUE(first && *first);
  }  // destroyed with b claimed ahead
  auto other = queue_.claim(kEvalStream, "runner-u", 1, std::chrono::milliseconds(0));
  ASSERT_TRUE(other);
  ASSERT_EQ(other->size(), 1u) << "b was not given back";
  auto body = eval_task_from_json(other->front().body, "b");
  ASSERT_TRUE(body);
  EXPECT_EQ(body->task_id, b.task_id);
}

// A record the store could not take is not acked away with its task: the task goes back to the
// queue (one delivery used), and the next delivery, with the store back, writes the record.
TEST_F(RunnerLoopTest, TaskWhoseRecordCouldNotBeWrittenIsGivenBackNotAcked) {
  const EvalTask a = task("a");
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(a)));
  FlakyResultStore store;
  RunnerLoopOptions o{kEvalStream, "runner-t"};
  o.poll_block = std::chrono::milliseconds(50);
  o.prefetch = 0;
  RunnerLoop loop(queue_, store, *evaluator_, o);
  auto first = loop.run_once();
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(loop.stats().tasks_done.load(), 0);
  EXPECT_EQ(loop.stats().tasks_failed.load(), 1);
  auto s = queue_.stats(kEvalStream);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->acked_total, 0) << "acked without its record";
  store.available = true;
  auto second = loop.run_once();
  ASSERT_TRUE(second && *second);
  EXPECT_EQ(loop.stats().tasks_done.load(), 1);
  auto rec = store.get(record_key(a.task_id, "15"));
  ASSERT_TRUE(rec && *rec) << "the redelivered task wrote its record";
  EXPECT_EQ((**rec)["status"], "ok") << (**rec).dump();
}

// The runner's metrics move as its code paths run, seen the way Prometheus sees them: scraped
// over HTTP from the endpoint `--metrics-listen` starts.
TEST_F(RunnerLoopTest, MetricsCountTasksEvaluationsByStatusCompilesAndDuration) {
  auto e = metrics::start_exposition({"127.0.0.1", 0}, {}, "s", "runner", "runner-t");
  ASSERT_TRUE(e) << e.error().message;
  metrics::RunnerMetrics rm(*(*e)->registry);
  EvaluatorOptions eo;  // the fixture's evaluator, with the compile-cache hook
  eo.suite = suite_.get();
  eo.hardware = *problems::find_hardware_profile(
      *problems::load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware"}),
      "H20");
  eo.cache_dir = cache_;
  eo.include_dir = ATREX_TEST_INCLUDE_DIR;
  eo.child_dir = ATREX_TEST_BIN_DIR;
  eo.seed = 99;
  eo.on_compile = [&rm](bool hit) { rm.count_compile(hit); };
  Evaluator evaluator(eo);
  const EvalTask good = task("m-good"), bad = task("m-bad", "rms_norm_syntax_error.cpp");
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(good)));
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(bad)));
  ASSERT_TRUE(queue_.enqueue(kEvalStream, Json{{"schema", "nonsense"}}));
  RunnerLoopOptions o{kEvalStream, "runner-t"};
  o.poll_block = std::chrono::milliseconds(50);
  o.prefetch = 1;
  o.metrics = &rm;
  RunnerLoop loop(queue_, store_, evaluator, o);
  for (int i = 0; i < 3; ++i) {
    auto r = loop.run_once();
    ASSERT_TRUE(r && *r) << i;
  }
  auto body = testing::http_get("127.0.0.1", (*e)->server->port(), "/metrics");
  ASSERT_TRUE(body);
  using testing::sample_value;
  EXPECT_EQ(sample_value(*body, R"(atrex_runner_tasks_total{status="done"})"), 2.0) << *body;
  EXPECT_EQ(sample_value(*body, R"(atrex_runner_tasks_total{status="invalid"})"), 1.0);
  EXPECT_EQ(
      sample_value(*body, R"(atrex_runner_evaluations_total{operator="rms_norm",status="ok"})"),
      1.0);
  EXPECT_EQ(
      sample_value(*body,
                   R"(atrex_runner_evaluations_total{operator="rms_norm",status="compile_error"})"),
      1.0);
  EXPECT_EQ(sample_value(*body, "atrex_runner_evaluation_duration_seconds_count"), 2.0);
  EXPECT_GT(*sample_value(*body, "atrex_runner_evaluation_duration_seconds_sum"), 0.0);
  EXPECT_EQ(sample_value(*body, "atrex_runner_busy"), 0.0);
  // The bad candidate was compiled ahead while the good one was measured (a miss), then found
  // in the cache by its own evaluation (a hit, failures are cached too).
  EXPECT_EQ(sample_value(*body, "atrex_runner_compiled_ahead_total"), 1.0);
  EXPECT_EQ(sample_value(*body, R"(atrex_runner_compile_cache_lookups_total{result="miss"})"), 2.0);
  EXPECT_EQ(sample_value(*body, R"(atrex_runner_compile_cache_lookups_total{result="hit"})"), 1.0);
}

TEST_F(RunnerLoopTest, HeartbeatRenewalsAreCounted) {
  auto reg = std::make_shared<prometheus::Registry>();
  metrics::RunnerMetrics m(*reg);
  ASSERT_TRUE(queue_.enqueue(kEvalStream, to_json(task("hb"))));
  RunnerLoopOptions o{kEvalStream, "runner-t"};
  o.poll_block = std::chrono::milliseconds(50);
  o.heartbeat = std::chrono::milliseconds(1);  // renews many times during one evaluation
  o.prefetch = 0;
  o.metrics = &m;
  RunnerLoop loop(queue_, store_, *evaluator_, o);
  auto r = loop.run_once();
  ASSERT_TRUE(r && *r);
  EXPECT_GT(m.lease_renewals.Add({{"result", "ok"}}).Value(), 0.0);
}

}  // namespace
}  // namespace atrex::runner
