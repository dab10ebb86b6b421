// The cluster lifecycle (submit, status, wait, cancel, resume) on the in-process queue and a
// fake launcher: what each step writes to the manifest, enqueues, asks the launcher and reports,
// without Redis or processes (the end-to-end versions are tests/cluster_test.cpp).
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/inprocess_queue.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/keys.h"
#include "atrex/scheduler/follow.h"
#include "atrex/scheduler/lifecycle.h"

namespace atrex::scheduler {
namespace {
namespace fs = std::filesystem;

// One sweep's queue and store, shared by every "connection" (as one Redis is), and the copies
// of the manifest published for the workers.
struct FakeHost {
  InProcessQueue queue;
  MemoryResultStore results;
  std::vector<Manifest> published;
};

class HostView final : public SweepHost {
 public:
  explicit HostView(FakeHost& h) : h_(h) {}
  TaskQueue& queue() override { return h_.queue; }
  ResultStore& results() override { return h_.results; }
  Result<void> publish(const Manifest& m) override {
    h_.published.push_back(m);
    return ok();
  }

 private:
  FakeHost& h_;
};

struct FakeLauncher final : WorkerLauncher {
  int launched = 0, revived = 0, stopped = 0;
  Result<WorkersRecord> launch(const Manifest&, const ClusterOptions& o, const RedisEndpoint&,
                               const ProgressFn&) override {
    ++launched;
    WorkersRecord w{Launcher::kLocal, "fake", {}, {}};
    for (int i = 0; i < o.runners; ++i) w.processes.push_back(LocalWorker{"runner", 1, {"x"}, ""});
    return w;
  }
  Result<WorkersRecord> revive(const Manifest& m, const ClusterOptions&, const RedisEndpoint&,
                               const ProgressFn&) override {
    ++revived;
    return *m.workers;
  }
  std::pair<int, std::string> alive(const WorkersRecord& w) override {
    return {static_cast<int>(w.processes.size()), "fake workers"};
  }
  Result<void> stop(const WorkersRecord&) override {
    ++stopped;
    return ok();
  }
};

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_lifecycle_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    env_.host = [this](const RedisEndpoint&,
                       const Manifest&) -> Result<std::unique_ptr<SweepHost>> {
      if (unreachable_) return make_error(ErrorCode::kUnavailable, "redis: connection refused");
      return std::unique_ptr<SweepHost>(std::make_unique<HostView>(*host_));
    };
    env_.launcher = [this](Launcher) -> std::unique_ptr<WorkerLauncher> {
      return std::make_unique<Forward>(launcher_);
    };
    auto providers = agent::ProviderRegistry::builtin();
    ASSERT_TRUE(providers) << providers.error().message;
    auto spec = parse_sweep(
        "name: lc\nbackend: cpu\nhardware: H20\nagents: [{name: a}, {name: b}]\n"
        "operators: [rms_norm, l2_norm]\nshapes: {cpu: {ids: {rms_norm: [15], l2_norm: [0]}}}\n",
        "lc.yaml", *providers);
    ASSERT_TRUE(spec) << spec.error().message;
    SweepOverrides o;
    o.suite_dir = ATREX_TEST_SUITE_DIR;
    o.output = dir_;
    auto r = resolve_sweep(*spec, o);
    ASSERT_TRUE(r) << r.error().message;
    sweep_ = std::make_unique<ResolvedSweep>(std::move(*r));
    options_.cluster.runners = 2;
    options_.redis = {*parse_redis_url("redis://:pw@h:1")};
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Forwards to the test's launcher (the env hands out owning pointers).
  struct Forward final : WorkerLauncher {
    explicit Forward(FakeLauncher& l) : l_(l) {}
    Result<WorkersRecord> launch(const Manifest& m, const ClusterOptions& o, const RedisEndpoint& r,
                                 const ProgressFn& s) override {
      return l_.launch(m, o, r, s);
    }
    Result<WorkersRecord> revive(const Manifest& m, const ClusterOptions& o, const RedisEndpoint& r,
                                 const ProgressFn& s) override {
      return l_.revive(m, o, r, s);
    }
    std::pair<int, std::string> alive(const WorkersRecord& w) override { return l_.alive(w); }
    Result<void> stop(const WorkersRecord& w) override { return l_.stop(w); }
    FakeLauncher& l_;
  };

  // What an agent worker writes when an (agent, operator) ends without an evaluation.
  void finish(const std::string& agent, const std::string& op) {
    FinalMarker m;
    m.agent = agent;
    m.op = op;
    m.status = FinalStatus::kNoCorrectCandidate;
    m.error = "nothing passed";
    ASSERT_TRUE(host_->results.put(final_key(agent, op), to_json(m)));
  }

  fs::path dir_;
  std::unique_ptr<FakeHost> host_ = std::make_unique<FakeHost>();
  FakeLauncher launcher_;
  bool unreachable_ = false;
  ClusterEnv env_;
  std::unique_ptr<ResolvedSweep> sweep_;
  SubmitOptions options_;
};

TEST_F(LifecycleTest, SubmitQueuesOneAgentTaskPerPairPublishesAndRecordsTheWorkers) {
  auto m = submit_sweep(*sweep_, options_, nullptr, env_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->status, SweepStatus::kRunning);
  EXPECT_EQ(m->redis.value_or(""), "redis://***@h:1");
  EXPECT_EQ(m->redis_url.value_or(""), "redis://:pw@h:1");
  ASSERT_TRUE(m->workers);
  EXPECT_EQ(m->workers->processes.size(), 2u);
  EXPECT_EQ(launcher_.launched, 1);
  EXPECT_EQ(host_->queue.stats(kAgentStream)->ready, 4);  // 2 agents x 2 operators
  ASSERT_EQ(host_->published.size(), 1u);
  EXPECT_EQ(host_->published[0].sweep_id, sweep_->sweep_id());
  auto on_disk = read_manifest_file(dir_);
  ASSERT_TRUE(on_disk) << on_disk.error().message;
  EXPECT_EQ(on_disk->status, SweepStatus::kRunning);
  auto st = sweep_status(dir_, env_);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(st->total, 4);
  EXPECT_EQ(st->done, 0);
  EXPECT_EQ(st->workers_alive, 2);
}

TEST_F(LifecycleTest, UnreachableRedisWritesNothing) {
  unreachable_ = true;
  auto m = submit_sweep(*sweep_, options_, nullptr, env_);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kUnavailable);
  EXPECT_FALSE(fs::exists(dir_ / "manifest.json"));
  EXPECT_EQ(launcher_.launched, 0);
}

// A Redis that lost everything (restarted without persistence): resume publishes the manifest
// again and re-enqueues every pair without a final marker, but not those in flight or done.
TEST_F(LifecycleTest, ResumeReenqueuesWhatIsNeitherDoneNorInFlight) {
  ASSERT_TRUE(submit_sweep(*sweep_, options_, nullptr, env_));
  host_ = std::make_unique<FakeHost>();  // the sweep's keys are gone
  finish("a", "rms_norm");
  auto m = resume_sweep(dir_, nullptr, env_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(host_->queue.stats(kAgentStream)->ready, 3);
  EXPECT_EQ(host_->published.size(), 1u);
  EXPECT_EQ(launcher_.revived, 1);
  EXPECT_TRUE(m->resumed_at);
  // Resumed again at once: everything is in flight, nothing is enqueued twice.
  ASSERT_TRUE(resume_sweep(dir_, nullptr, env_));
  EXPECT_EQ(host_->queue.stats(kAgentStream)->ready, 3);
}

TEST_F(LifecycleTest, WaitEndsWhenEveryPairHasAMarkerAndReportsTheDeadLetters) {
  ASSERT_TRUE(submit_sweep(*sweep_, options_, nullptr, env_));
  // One agent task dies on every delivery (max_deliveries 3): it is dead-lettered.
  for (int i = 0; i < 3; ++i) {
    auto leases = host_->queue.claim(kAgentStream, "w", 1, std::chrono::milliseconds(0));
    ASSERT_TRUE(leases && leases->size() == 1u);
    ASSERT_TRUE(host_->queue.release(leases->front(), "agent worker killed"));
  }
  const auto dead = host_->queue.dead_letters(kAgentStream);
  ASSERT_TRUE(dead && dead->size() == 1u);
  for (const auto& [agent, op] : std::vector<std::pair<std::string, std::string>>{
           {"a", "rms_norm"}, {"a", "l2_norm"}, {"b", "rms_norm"}, {"b", "l2_norm"}}) {
    if (dead->front().body["agent"]["name"] == agent && dead->front().body["operator"] == op) {
      continue;  // finalized by wait from its dead letter
    }
    finish(agent, op);
  }
  auto out = wait_sweep(dir_, std::chrono::seconds(30), nullptr, nullptr, nullptr, env_);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(launcher_.stopped, 1);
  auto report = read_json_file(out->report_json);
  ASSERT_TRUE(report);
  ASSERT_EQ((*report)["dead_letters"].size(), 1u) << report->dump();
  EXPECT_EQ((*report)["dead_letters"][0]["kind"], "agent");
  EXPECT_EQ(read_manifest_file(dir_)->status, SweepStatus::kComplete);
  EXPECT_TRUE(fs::exists(dir_ / "results.jsonl"));
}

// An agent task removed from the queue behind its back (here acked by a broken worker without
// a final marker; XDEL or a deleted consumer on Redis look the same) is found missing at two
// loss checks in a row and enqueued again, counted; pairs still in flight are left alone.
TEST_F(LifecycleTest, FollowPutsBackAnAgentTaskLostFromTheQueue) {
  ASSERT_TRUE(submit_sweep(*sweep_, options_, nullptr, env_));
  auto lease = host_->queue.claim(kAgentStream, "broken", 1, std::chrono::milliseconds(0));
  ASSERT_TRUE(lease && lease->size() == 1u);
  ASSERT_TRUE(*host_->queue.ack(lease->front()));
  ASSERT_EQ(host_->queue.stats(kAgentStream)->ready, 3);
  prometheus::Registry registry;
  metrics::SweepMetrics sm(registry);
  auto m = read_manifest_file(dir_);
  ASSERT_TRUE(m);
  FollowOptions fo;
  fo.poll = std::chrono::milliseconds(5);
  fo.loss_check_every = std::chrono::milliseconds(1);
  fo.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  fo.metrics = &sm;
  auto r = follow_sweep(*m, host_->queue, host_->results, fo);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->end, FollowEnd::kTimedOut);
  EXPECT_EQ(host_->queue.stats(kAgentStream)->ready, 4) << "the lost one is back, once";
  EXPECT_EQ(sm.agent_tasks_lost.Value(), 1);
}

// The gauges a dashboard reads: S_agg moves while the sweep runs (not only at its end), and the
// leased count returns to 0 at the end although the last worker acks after writing its marker.
TEST_F(LifecycleTest, FollowSetsSaggWhileRunningAndEndsWithNoLeaseCounted) {
  ASSERT_TRUE(submit_sweep(*sweep_, options_, nullptr, env_));
  auto suite = problems::load_suite_or_bundled(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  auto m = read_manifest_file(dir_);
  ASSERT_TRUE(m);
  prometheus::Registry registry;
  metrics::SweepMetrics sm(registry);
  FollowOptions fo;
  fo.poll = std::chrono::milliseconds(5);
  fo.metrics = &sm;
  fo.suite = &*suite;
  finish("a", "rms_norm");
  fo.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  auto running = follow_sweep(*m, host_->queue, host_->results, fo);
  ASSERT_TRUE(running && running->end == FollowEnd::kTimedOut);
  ASSERT_TRUE(sm.s_agg.Has({{"agent", "a"}})) << "set while the sweep runs";
  EXPECT_EQ(sm.s_agg.Add({{"agent", "a"}}).Value(), 0.0) << "nothing correct yet";
  // Every pair done; one worker still holds its lease and acks it 100 ms later.
  auto lease = host_->queue.claim(kAgentStream, "w", 1, std::chrono::milliseconds(0));
  ASSERT_TRUE(lease && lease->size() == 1u);
  finish("a", "l2_norm");
  finish("b", "rms_norm");
  finish("b", "l2_norm");
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (void)host_->queue.ack(lease->front());  // test: a failed ack shows as a leased gauge of 1
  });
  fo.deadline.reset();
  auto done = follow_sweep(*m, host_->queue, host_->results, fo);
  late.join();
  ASSERT_TRUE(done && done->end == FollowEnd::kDone);
  EXPECT_EQ(sm.queue_tasks.Add({{"queue", "agent"}, {"state", "leased"}}).Value(), 0.0);
}

TEST_F(LifecycleTest, WaitTimesOutWithWhatIsDone) {
  ASSERT_TRUE(submit_sweep(*sweep_, options_, nullptr, env_));
  finish("a", "rms_norm");
  auto out = wait_sweep(dir_, std::chrono::seconds(0), nullptr, nullptr, nullptr, env_);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kTimeout);
  EXPECT_NE(out.error().message.find("1/4 operators done"), std::string::npos)
      << out.error().message;
  EXPECT_EQ(launcher_.stopped, 0);
}

TEST_F(LifecycleTest, CancelStopsTheWorkersAndMarksTheSweep) {
  ASSERT_TRUE(submit_sweep(*sweep_, options_, nullptr, env_));
  ASSERT_TRUE(cancel_sweep(dir_, env_));
  EXPECT_EQ(launcher_.stopped, 1);
  auto m = read_manifest_file(dir_);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, SweepStatus::kCancelled);
  EXPECT_TRUE(m->cancelled_at);
}

TEST_F(LifecycleTest, ALocalSweepsFolderIsNotACluster) {
  Manifest local = sweep_->manifest;
  fs::create_directories(dir_);
  ASSERT_TRUE(write_manifest_file(dir_, local));
  auto st = sweep_status(dir_, env_);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(st.error().message.find("not submitted to a cluster"), std::string::npos);
}

}  // namespace
}  // namespace atrex::scheduler
