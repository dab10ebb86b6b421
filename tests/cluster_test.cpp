// Cluster sweeps end to end through a real redis-server and the local launcher: a runner
// killed with SIGKILL mid-sweep loses nothing; nor does a Redis restarted mid-sweep (AOF), nor a
// `sweep wait` SIGKILLed and followed by `resume`; cancelled workers are revived by `resume`;
// every result is counted once; a task whose workers die on every delivery is dead-lettered,
// reported, and never enqueued again; sweeps submitted with a list of Redis URLs land whole on
// the instance their id picks and stay there; a sweep runs whole over rediss:// (TLS) and as an
// ACL user limited to the keys atrex:*.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/redis/connection.h"
#include "atrex/common/redis/queue.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/scheduler/redis_shard.h"
#include "atrex/scheduler/resolve.h"
#include "atrex/scheduler/sweep_spec.h"
#include "atrex/testing/acl_server.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/sweep_cli.h"
#include "atrex/testing/tls_server.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

class ClusterSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_cluster_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(ATREX_TEST_FIXTURES_DIR, dir_ / "fx", fs::copy_options::recursive);
    ASSERT_TRUE(redis_.running());
    url_ = "redis://127.0.0.1:" + std::to_string(redis_.options().port);
  }
  void TearDown() override {
    // Every results folder of the test (out, out-<i>): a failed test leaves no workers behind.
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind("out", 0) == 0)
        (void)atrex({"sweep", "cancel", e.path().string()});
    }
    fs::remove_all(dir_);
  }
  testing::AtrexCli cli() const { return testing::AtrexCli(dir_); }
  std::pair<int, std::string> atrex(std::vector<std::string> args, int timeout_s = 300) {
    return cli()(std::move(args), timeout_s);
  }
  Json manifest() { return *read_json_file(dir_ / "out" / "manifest.json"); }
  Json status() { return cli().status(dir_ / "out"); }
  // Polls the sweep's status until `pred` holds (or a deadline).
  bool poll(const std::function<bool(const Json&)>& pred, int seconds) {
    return cli().poll(dir_ / "out", pred, seconds);
  }
  void expect_complete_and_counted_once() {
    testing::expect_complete_and_counted_once(cli(), dir_ / "out");
  }

  static std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static Json rms_norm_in(const Json& report) {
    for (const auto& o : report["agents"][0]["operators"]) {
      if (o["operator"] == "rms_norm") return o;
    }
    return Json();
  }

  testing::RedisServer redis_;
  fs::path dir_;
  std::string url_;
};

TEST_F(ClusterSweep, RunnerKilledMidSweepLosesNothing) {
  auto [rc, out] = atrex({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis",
                          url_, "--out", (dir_ / "out").string(), "--runners", "2",
                          "--agent-workers", "1", "--lease-timeout", "4"});
  ASSERT_EQ(rc, 0) << out;
  // Wait for an evaluation to be running, find the runner that holds it (the pending entry's
  // consumer), and SIGKILL it: its lease must expire and the other runner finish the task.
  ASSERT_TRUE(poll([](const Json& s) { return s["eval_queue"]["leased"].get<int>() > 0; }, 60));
  const Json m = manifest();
  auto conn = RedisConnection::connect(redis_.options());
  ASSERT_TRUE(conn);
  auto pending =
      (*conn)->command({"XPENDING", "atrex:{" + m["sweep_id"].get<std::string>() + "}:q:{eval}",
                        "atrex", "-", "+", "10"});
  ASSERT_TRUE(pending) << pending.error().message;
  ASSERT_FALSE(pending->elements.empty()) << "no pending evaluation to interrupt";
  const std::string holder = pending->elements.front().elements.at(1).str;
  pid_t victim = 0;
  for (const auto& w : m["workers"]["processes"]) {
    if (w["name"] == holder) victim = w["pid"].get<pid_t>();
  }
  ASSERT_GT(victim, 0) << "no worker process named " << holder;
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  expect_complete_and_counted_once();
  // The task was delivered again after the lease expired, to the surviving runner.
  EXPECT_GE(status()["eval_queue"]["acked_total"].get<int>(), 1);
}

TEST_F(ClusterSweep, CancelledSweepResumesAndCompletes) {
  auto [rc, out] =
      atrex({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis", url_,
             "--out", (dir_ / "out").string(), "--runners", "1", "--agent-workers", "1"});
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(
      poll([](const Json& s) { return s["eval_queue"]["enqueued_total"].get<int>() > 0; }, 60));
  ASSERT_EQ(atrex({"sweep", "cancel", (dir_ / "out").string()}).first, 0);
  ASSERT_TRUE(poll([](const Json& s) { return s["workers_alive"].get<int>() == 0; }, 30));
  EXPECT_EQ(manifest()["status"], "cancelled");
  auto resumed = atrex({"sweep", "resume", (dir_ / "out").string()});
  ASSERT_EQ(resumed.first, 0) << resumed.second;
  expect_complete_and_counted_once();
}

// Redis restarted mid-sweep (SIGTERM: it writes its AOF and exits; then the same port, folder and
// AOF): the workers reconnect with backoff, their blocked reads and leases carry on, and the sweep
// completes with every result counted once.
TEST_F(ClusterSweep, RedisRestartedMidSweepLosesNothing) {
  auto [rc, out] = atrex({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis",
                          url_, "--out", (dir_ / "out").string(), "--runners", "2",
                          "--agent-workers", "1", "--lease-timeout", "6"});
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(
      poll([](const Json& s) { return s["eval_queue"]["enqueued_total"].get<int>() > 0; }, 60));
  const int enqueued_before = status()["eval_queue"]["enqueued_total"].get<int>();
  redis_.restart();
  ASSERT_TRUE(redis_.running());
  // What was enqueued before the restart is still there (the AOF was replayed).
  EXPECT_GE(status()["eval_queue"]["enqueued_total"].get<int>(), enqueued_before);
  expect_complete_and_counted_once();
  // `wait` sent SIGTERM: the reconnected workers see it and exit.
  EXPECT_TRUE(poll([](const Json& s) { return s["workers_alive"].get<int>() == 0; }, 30));
  // The restart did cut the workers off (else this test shows nothing).
  bool reconnected = false;
  for (const auto& e : fs::directory_iterator(dir_ / "out" / "logs")) {
    reconnected = reconnected || read_text(e.path()).find("reconnecting") != std::string::npos;
  }
  EXPECT_TRUE(reconnected) << "no worker log mentions a reconnect";
}

// The scheduler side killed mid-sweep: `atrex sweep wait` SIGKILLed while the workers run. The
// manifest on disk and the queues in Redis hold everything; `resume` reconciles (re-enqueues
// what is neither done, dead nor in flight; starts no worker that is still alive) and a new
// `wait` completes the sweep with every result counted once.
TEST_F(ClusterSweep, SchedulerKilledMidSweepResumesAndCompletes) {
  auto [rc, out] =
      atrex({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis", url_,
             "--out", (dir_ / "out").string(), "--runners", "1", "--agent-workers", "1"});
  ASSERT_EQ(rc, 0) << out;
  const pid_t waiter = ::fork();
  ASSERT_GE(waiter, 0);
  if (waiter == 0) {
    ::setenv("ATREX_CACHE_DIR", cli().cache_dir().c_str(), 1);
    const std::string bin = std::string(ATREX_TEST_BIN_DIR) + "/atrex";
    const std::string dir = (dir_ / "out").string();
    ::execl(bin.c_str(), bin.c_str(), "sweep", "wait", dir.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_TRUE(
      poll([](const Json& s) { return s["eval_queue"]["enqueued_total"].get<int>() > 0; }, 60));
  ASSERT_EQ(::kill(waiter, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(waiter, &wstatus, 0), waiter);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the scheduler finished before it could be killed";
  const size_t workers_before = manifest()["workers"]["processes"].size();
  auto resumed = atrex({"sweep", "resume", (dir_ / "out").string()});
  ASSERT_EQ(resumed.first, 0) << resumed.second;
  EXPECT_EQ(manifest()["workers"]["processes"].size(), workers_before)
      << "the live workers were not doubled";
  expect_complete_and_counted_once();
}

TEST_F(ClusterSweep, EvaluationThatKillsEveryRunnerIsDeadLetteredAndTheSweepCompletesWithoutIt) {
  // The first candidate SIGKILLs the runner evaluating it. Three runners and --max-deliveries 2:
  // two die on the poisoned evaluation's two deliveries, the third dead-letters it on its next
  // claim and evaluates the correct candidate. Only without the evaluation sandbox can a
  // candidate reach its runner (in it, its parent is bwrap's init: see the next test), so the
  // sweep is submitted with --no-sandbox. The runners are started without it (nor
  // $ATREX_NO_SANDBOX): they take it from the manifest's cluster.sandbox.
  auto [rc, out] = atrex({"sweep", "submit", (dir_ / "fx" / "poison_sweep.yaml").string(),
                          "--redis", url_, "--out", (dir_ / "out").string(), "--runners", "3",
                          "--agent-workers", "1", "--lease-timeout", "3", "--max-deliveries", "2",
                          "--no-sandbox"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(manifest()["cluster"]["sandbox"], "none") << manifest().dump();
  for (const auto& p : manifest()["workers"]["processes"]) {
    const auto& args = p["args"];
    EXPECT_EQ(std::find(args.begin(), args.end(), "--no-sandbox"), args.end()) << p.dump();
  }
  auto [wrc, wout] = atrex({"sweep", "wait", (dir_ / "out").string(), "--timeout", "120"});
  ASSERT_EQ(wrc, 0) << wout;
  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report);
  EXPECT_EQ(rms_norm_in(*report)["status"], "correct") << report->dump();
  ASSERT_EQ((*report)["dead_letters"].size(), 1u) << report->dump();
  const Json& d = (*report)["dead_letters"][0];
  EXPECT_EQ(d["queue"], "eval");
  EXPECT_EQ(d["operator"], "rms_norm");
  EXPECT_EQ(d["purpose"], "quick");
  EXPECT_EQ(d["deliveries"], 2) << d.dump();
  EXPECT_NE(d["error"].get<std::string>().find("lease expired"), std::string::npos) << d.dump();
  EXPECT_NE(read_text(dir_ / "out" / "report.md").find("lease expired"), std::string::npos);
  // The agent saw it as a crashed candidate, with the reason, and moved on.
  EXPECT_NE(read_text(dir_ / "out" / "audit" / "fixture" / "rms_norm.jsonl")
                .find("dead-lettered after 2 deliveries"),
            std::string::npos);
  const Json s = status();
  ASSERT_EQ(s["dead_letters"].size(), 1u) << s.dump();
  EXPECT_EQ(s["dead_letters"][0]["message_id"], d["message_id"]);
  EXPECT_EQ(s["eval_queue"]["dead"], 1);
  // Every evaluation ended exactly once (acked or dead): the dead one was not enqueued again.
  EXPECT_EQ(s["eval_queue"]["enqueued_total"].get<int>(),
            s["eval_queue"]["acked_total"].get<int>() + s["eval_queue"]["dead"].get<int>())
      << s.dump();
  auto [trc, text] = atrex({"sweep", "status", (dir_ / "out").string()});
  EXPECT_NE(text.find("dead-lettered eval task"), std::string::npos) << text;
  EXPECT_NE(text.find("sandbox: none (submitted with --no-sandbox"), std::string::npos) << text;
  // Every record says how its child ran.
  const std::string results = read_text(dir_ / "out" / "results.jsonl");
  EXPECT_NE(results.find("\"sandbox\":\"none\""), std::string::npos);
  EXPECT_EQ(results.find("\"sandbox\":\"bwrap\""), std::string::npos) << results.substr(0, 2000);
}

// The same candidate in the sandbox: its parent is bwrap's init in the PID namespace, which the
// kernel does not let it kill (SIGKILL to a namespace's init from inside is dropped); it then
// waits forever and is killed at the shape's limit: `timeout`, acked by the runner that lives on.
// Nothing is dead-lettered and the sweep completes with the correct candidate.
TEST_F(ClusterSweep, CandidateThatKillsItsParentCannotReachTheRunnerInTheSandbox) {
  auto [rc, out] = atrex({"sweep", "submit", (dir_ / "fx" / "poison_sweep.yaml").string(),
                          "--redis", url_, "--out", (dir_ / "out").string(), "--runners", "1",
                          "--agent-workers", "1", "--lease-timeout", "3", "--max-deliveries", "2"});
  ASSERT_EQ(rc, 0) << out;
  auto [wrc, wout] = atrex({"sweep", "wait", (dir_ / "out").string(), "--timeout", "120"});
  ASSERT_EQ(wrc, 0) << wout;
  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report);
  EXPECT_EQ(rms_norm_in(*report)["status"], "correct") << report->dump();
  EXPECT_TRUE((*report)["dead_letters"].empty()) << report->dump();
  const std::string results = read_text(dir_ / "out" / "results.jsonl");
  EXPECT_NE(results.find("\"status\":\"timeout\""), std::string::npos) << results.substr(0, 2000);
  EXPECT_NE(results.find("\"runner\":\"runner-0\""), std::string::npos);
  EXPECT_EQ(results.find("\"sandbox\":\"none\""), std::string::npos);
  EXPECT_EQ(manifest()["cluster"]["sandbox"], "bwrap") << manifest().dump();
  auto [trc, text] = atrex({"sweep", "status", (dir_ / "out").string()});
  EXPECT_EQ(text.find("sandbox: none"), std::string::npos) << text;
}

TEST_F(ClusterSweep, DeadLetteredAgentTaskIsReportedAndNotReenqueuedByResume) {
  auto [rc, out] = atrex({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis",
                          url_, "--out", (dir_ / "out").string(), "--runners", "1",
                          "--agent-workers", "1", "--lease-timeout", "3"});
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(atrex({"sweep", "cancel", (dir_ / "out").string()}).first, 0);
  ASSERT_TRUE(poll([](const Json& s) { return s["workers_alive"].get<int>() == 0; }, 30));
  // Stand in for an agent worker that dies on the task on every delivery, until the queue
  // dead-letters it.
  QueueOptions qo;
  qo.lease_timeout = std::chrono::seconds(3);
  auto q = RedisQueue::open(redis_.options(), qo,
                            "atrex:{" + manifest()["sweep_id"].get<std::string>() + "}");
  ASSERT_TRUE(q) << q.error().message;
  auto dead = [&] {
    auto d = (*q)->dead_letters("agent");
    EXPECT_TRUE(d) << d.error().message;
    return d ? d->size() : size_t{0};
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (dead() == 0 && std::chrono::steady_clock::now() < deadline) {
    auto leases = (*q)->claim("agent", "doomed-agent-worker", 1, std::chrono::milliseconds(500));
    ASSERT_TRUE(leases) << leases.error().message;
    for (const auto& l : *leases) {
      auto released = (*q)->release(l, "agent worker killed by the test");
      ASSERT_TRUE(released && *released);
    }
  }
  ASSERT_EQ(dead(), 1u);
  auto [rrc, rout] = atrex({"sweep", "resume", (dir_ / "out").string()});
  ASSERT_EQ(rrc, 0) << rout;
  EXPECT_NE(rout.find("0 agent task(s) re-enqueued"), std::string::npos) << rout;
  const Json s = status();
  EXPECT_EQ(s["agent_queue"]["enqueued_total"], 1) << s.dump();
  EXPECT_EQ(s["agent_queue"]["ready"].get<int>() + s["agent_queue"]["leased"].get<int>(), 0)
      << s.dump();
  // Its only agent task is dead-lettered: no (agent, operator) got a final evaluation, so the
  // sweep failed as a whole (exit 1), and the report still says why.
  auto [wrc, wout] = atrex({"sweep", "wait", (dir_ / "out").string(), "--timeout", "60"});
  ASSERT_EQ(wrc, 1) << wout;
  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report);
  EXPECT_NE(rms_norm_in(*report).value("first_error", "").find("agent worker killed by the test"),
            std::string::npos)
      << report->dump();
  ASSERT_EQ((*report)["dead_letters"].size(), 1u) << report->dump();
  EXPECT_EQ((*report)["dead_letters"][0]["kind"], "agent");
}

TEST_F(ClusterSweep, StatusOfALocalSweepFolderIsAClearError) {
  fs::create_directories(dir_ / "out");
  Manifest local;  // what `atrex sweep run` leaves: no redis_url
  local.sweep_id = "x";
  local.launcher = "in-process";
  ASSERT_TRUE(write_manifest_file(dir_ / "out", local));
  auto [rc, out] = atrex({"sweep", "status", (dir_ / "out").string()});
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("not submitted to a cluster"), std::string::npos) << out;
}

// A local worker that died may leave its pid to an unrelated process: `status` must not count
// that process alive nor `cancel` signal it; a live process with the recorded command line is
// both. Stand-ins: two `sleep`s, one recorded under its own command line, the other's pid
// recorded with an atrex runner's (a pid reused after that runner died).
TEST_F(ClusterSweep, ReusedWorkerPidIsNeitherCountedAliveNorSignalled) {
  auto start_sleep = [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return pid;
  };
  const pid_t stranger = start_sleep(), worker = start_sleep();
  ASSERT_GT(stranger, 0);
  ASSERT_GT(worker, 0);
  const std::vector<std::string> runner_args = {std::string(ATREX_TEST_BIN_DIR) + "/atrex",
                                                "runner",
                                                "--redis",
                                                url_,
                                                "--sweep",
                                                "reused-pid",
                                                "--device",
                                                "0",
                                                "--name",
                                                "runner-0"};
  fs::create_directories(dir_ / "out");
  Manifest m;
  m.sweep_id = "reused-pid";
  m.redis_url = url_;
  m.workers = WorkersRecord{Launcher::kLocal,
                            "this",
                            {LocalWorker{"runner-0", stranger, runner_args, ""},
                             LocalWorker{"stand-in", worker, {"sleep", "300"}, ""}},
                            {}};
  ASSERT_TRUE(write_manifest_file(dir_ / "out", m));
  // The stand-in must have exec'd sleep before its command line is compared.
  ASSERT_TRUE(testing::poll_until([&] { return status()["workers_alive"] == 1; }, 10))
      << status().dump();
  ASSERT_EQ(atrex({"sweep", "cancel", (dir_ / "out").string()}).first, 0);
  int wstatus = 0;
  ASSERT_TRUE(
      testing::poll_until([&] { return ::waitpid(worker, &wstatus, WNOHANG) == worker; }, 10))
      << "the recorded worker was not signalled";
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGTERM);
  // Signalled first if at all: the worker's signal has arrived, so the stranger's would have.
  EXPECT_EQ(::waitpid(stranger, &wstatus, WNOHANG), 0)
      << "cancel signalled a process that is not the sweep's worker";
  ::kill(stranger, SIGKILL);
  ::waitpid(stranger, &wstatus, 0);
}

// The sweep ids of copies of the crash fixture named shard-<i>, as `atrex sweep submit` resolves
// them.
std::string sweep_id_of(const fs::path& file, const fs::path& out) {
  auto providers = agent::ProviderRegistry::builtin();
  if (!providers) {
    ADD_FAILURE() << providers.error().message;
    return "";
  }
  auto spec = scheduler::load_sweep_file(file, *providers);
  if (!spec) {
    ADD_FAILURE() << spec.error().message;
    return "";
  }
  scheduler::SweepOverrides ov;
  ov.output = out;
  auto r = scheduler::resolve_sweep(*spec, ov);
  if (!r) ADD_FAILURE() << r.error().message;
  return r ? r->sweep_id() : std::string();
}

size_t keys_of(const RedisEndpoint& redis, const std::string& sweep_id) {
  auto conn = RedisConnection::connect(redis);
  EXPECT_TRUE(conn) << conn.error().message;
  if (!conn) return 0;
  auto keys = (*conn)->command({"KEYS", "atrex:{" + sweep_id + "}:*"});
  EXPECT_TRUE(keys) << keys.error().message;
  return keys ? keys->elements.size() : 0;
}

TEST_F(ClusterSweep, SweepsSubmittedToTwoRedisLandWholeOnTheInstanceTheirIdPicksAndStayThere) {
  testing::RedisServer redis_b;
  ASSERT_TRUE(redis_b.running());
  const std::string url_b = "redis://127.0.0.1:" + std::to_string(redis_b.options().port);
  const std::vector<std::string> urls{url_, url_b};
  const std::vector<RedisEndpoint> servers{redis_.options(), redis_b.options()};
  // Three copies of the crash fixture that differ only in name (so in sweep id), picked so both
  // instances get one: sweep ids hash the device and paths, so which names do varies by machine.
  std::string fixture = read_text(dir_ / "fx" / "crash_sweep.yaml");
  fixture.replace(fixture.find("name: crash-sweep"), 17, "name: shard-@");
  struct Sweep {
    fs::path file, out;
    std::string id;
    size_t index;
  };
  std::vector<Sweep> sweeps;
  size_t on[2] = {0, 0};
  for (int i = 0; i < 32 && sweeps.size() < 3; ++i) {
    std::string text = fixture;
    text.replace(text.find('@'), 1, std::to_string(i));
    const fs::path file = dir_ / "fx" / ("shard-" + std::to_string(i) + ".yaml");
    std::ofstream(file) << text;
    const fs::path out = dir_ / ("out-" + std::to_string(i));
    const std::string id = sweep_id_of(file, out);
    ASSERT_FALSE(id.empty());
    const size_t index = scheduler::redis_shard_index(id, urls.size());
    if (on[index] == 2) continue;  // keep room for the other instance
    ++on[index];
    sweeps.push_back({file, out, id, index});
    auto [rc, out_text] =
        atrex({"sweep", "submit", file.string(), "--redis", urls[0] + "," + urls[1], "--out",
               out.string(), "--runners", "1", "--agent-workers", "1"});
    ASSERT_EQ(rc, 0) << out_text;
    EXPECT_EQ(read_json_file(out / "manifest.json")->value("redis_url", ""), urls[index])
        << out_text;
  }
  ASSERT_EQ(sweeps.size(), 3u);
  ASSERT_TRUE(on[0] > 0 && on[1] > 0) << "all 32 names hashed to one instance";

  // A submitted sweep never moves: submitted again with the list reversed (which alone would
  // pick the other instance), it stays where its manifest says; a list without its instance is
  // refused before anything is written.
  const Sweep& moved = sweeps.front();
  ASSERT_EQ(atrex({"sweep", "cancel", moved.out.string()}).first, 0);
  auto [xrc, xout] =
      atrex({"sweep", "submit", moved.file.string(), "--redis", urls[1 - moved.index], "--out",
             moved.out.string(), "--runners", "1", "--agent-workers", "1"});
  EXPECT_EQ(xrc, 2) << xout;
  EXPECT_NE(xout.find("does not name"), std::string::npos) << xout;
  auto [rrc, rout] =
      atrex({"sweep", "submit", moved.file.string(), "--redis", urls[1] + "," + urls[0], "--out",
             moved.out.string(), "--runners", "1", "--agent-workers", "1"});
  ASSERT_EQ(rrc, 0) << rout;
  EXPECT_EQ(read_json_file(moved.out / "manifest.json")->value("redis_url", ""), urls[moved.index]);

  for (const auto& s : sweeps) {
    auto [wrc, wout] = atrex({"sweep", "wait", s.out.string(), "--timeout", "300"});
    ASSERT_EQ(wrc, 0) << s.out << ": " << wout;
    EXPECT_EQ(rms_norm_in(*read_json_file(s.out / "report.json"))["status"], "correct") << s.out;
    // Queues, records and manifest all on the chosen instance, nothing on the other.
    EXPECT_GT(keys_of(servers[s.index], s.id), 2u) << s.id;
    EXPECT_EQ(keys_of(servers[1 - s.index], s.id), 0u) << s.id;
    // The workers were given that one URL, not the list.
    const Json m = *read_json_file(s.out / "manifest.json");
    for (const auto& w : m["workers"]["processes"]) {
      const auto& args = w["args"];
      ASSERT_TRUE(args.is_array()) << m["workers"].dump();
      const auto at = std::find(args.begin(), args.end(), Json("--redis"));
      ASSERT_NE(at, args.end()) << w.dump();
      EXPECT_EQ(*(at + 1), urls[s.index]) << w.dump();
    }
  }
}

// A Redis reached only over TLS: `submit`, the workers it starts (given the rediss:// URL with
// its CA on their command line) and `wait` all verify the server certificate, and the sweep
// completes with every result counted once. A CA that did not sign the server's certificate is
// refused at submit (exit code 3, "unavailable") with OpenSSL's reason, before anything starts.
TEST_F(ClusterSweep, SweepOverTlsCompletesAndAnUntrustedServerIsRefusedAtSubmit) {
  testing::Certificates certs;
  ASSERT_TRUE(certs.ok());
  auto tls = testing::TlsRedis::start(certs, false);
  ASSERT_TRUE(tls);
  const std::string file = (dir_ / "fx" / "crash_sweep.yaml").string();
  auto [brc, bout] =
      atrex({"sweep", "submit", file, "--redis", tls->url("tls_ca=" + certs("other-ca.crt")),
             "--out", (dir_ / "out").string(), "--runners", "1", "--agent-workers", "1"});
  EXPECT_EQ(brc, 3) << bout;
  EXPECT_NE(bout.find("certificate verify failed"), std::string::npos) << bout;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "manifest.json")) << "nothing is submitted";

  const std::string url = tls->url("tls_ca=" + certs("ca.crt"));
  auto [rc, out] = atrex({"sweep", "submit", file, "--redis", url, "--out", (dir_ / "out").string(),
                          "--runners", "1", "--agent-workers", "1"});
  ASSERT_EQ(rc, 0) << out;
  const Json m = manifest();
  EXPECT_EQ(m.value("redis_url", ""), url);
  for (const auto& w : m["workers"]["processes"]) {
    const auto& args = w["args"];
    const auto at = std::find(args.begin(), args.end(), Json("--redis"));
    ASSERT_NE(at, args.end()) << w.dump();
    EXPECT_EQ(*(at + 1), url) << w.dump();
  }
  expect_complete_and_counted_once();
  // The queues and records are on that server (read back over TLS).
  auto options = parse_redis_url(url);
  ASSERT_TRUE(options) << options.error().message;
  EXPECT_GT(keys_of(*options, m["sweep_id"].get<std::string>()), 2u);
}

// A Redis that requires authentication, reached as the ACL user of acl_server.h (keys atrex:*
// only, no @dangerous command): every key the sweep, its workers and `wait` touch lies under
// atrex:, and the password never reaches the manifest's `redis` field or the output.
TEST_F(ClusterSweep, SweepAsAnAclUserLimitedToAtrexKeysCompletes) {
  auto& server = testing::shared_acl_redis();
  ASSERT_TRUE(server.running());
  const std::string url =
      testing::url_with(server, std::string(testing::kAclUser) + ":" + testing::kAclPassword);
  auto [rc, out] =
      atrex({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis", url,
             "--out", (dir_ / "out").string(), "--runners", "1", "--agent-workers", "1"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find(testing::kAclPassword), std::string::npos) << out;
  EXPECT_EQ(manifest().value("redis", "").find(testing::kAclPassword), std::string::npos)
      << manifest().dump();
  expect_complete_and_counted_once();
  // KEYS is @dangerous: count them as the default user.
  auto admin =
      parse_redis_url(testing::url_with(server, std::string(":") + testing::kDefaultPassword));
  ASSERT_TRUE(admin);
  EXPECT_GT(keys_of(*admin, manifest()["sweep_id"].get<std::string>()), 2u);
}

TEST_F(ClusterSweep, RedisListWithAnEmptyOrBadEntryIsRefusedNamingTheFlagAndEntry) {
  const std::string file = (dir_ / "fx" / "crash_sweep.yaml").string();
  auto [erc, eout] = atrex(
      {"sweep", "submit", file, "--redis", url_ + ",," + url_, "--out", (dir_ / "out").string()});
  EXPECT_EQ(erc, 2) << eout;
  EXPECT_NE(eout.find("--redis"), std::string::npos) << eout;
  EXPECT_NE(eout.find("entry 2 is empty"), std::string::npos) << eout;
  auto [brc, bout] = atrex(
      {"sweep", "submit", file, "--redis", url_ + ",http://x:1", "--out", (dir_ / "out").string()});
  EXPECT_EQ(brc, 2) << bout;
  EXPECT_NE(bout.find("entry 2"), std::string::npos) << bout;
  EXPECT_NE(bout.find("http://x:1"), std::string::npos) << bout;
  auto [drc, dout] = atrex({"sweep", "submit", file, "--redis", url_ + "," + url_ + "/0", "--out",
                            (dir_ / "out").string()});
  EXPECT_EQ(drc, 2) << dout;
  EXPECT_NE(dout.find("a second time"), std::string::npos) << dout;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "manifest.json")) << "nothing is submitted";
}

// `atrex bench connections` parks idle workers (a blocked XREADGROUP connection each) until the
// server refuses them: with maxclients lowered to 40, 20 park, and of 60 only the ones the
// server still has room for park and the rest are counted as refused with Redis' reason.
TEST_F(ClusterSweep, BenchConnectionsParksIdleWorkersAndCountsTheRefusedPastMaxclients) {
  auto admin = RedisConnection::connect(redis_.options());
  ASSERT_TRUE(admin);
  ASSERT_TRUE((*admin)->command({"CONFIG", "SET", "maxclients", "40"}));
  const auto [rc, out] = atrex({"bench", "connections", "--redis", url_, "--counts", "0,20,60",
                                "--seconds", "0.2", "--runners", "2", "--rate", "200"},
                               120);
  ASSERT_TRUE((*admin)->command({"CONFIG", "SET", "maxclients", "10000"}));
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::map<int, std::vector<std::string>> rows;  // idle count -> columns
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cols(line);
    std::vector<std::string> c{std::istream_iterator<std::string>(cols),
                               std::istream_iterator<std::string>()};
    if (c.size() >= 3 && std::all_of(c[0].begin(), c[0].end(), ::isdigit))
      rows[std::stoi(c[0])] = c;
  }
  ASSERT_EQ(rows.size(), 3u) << out;
  EXPECT_EQ(rows[0][1], "0") << out;
  EXPECT_EQ(rows[20][1], "20") << out;  // parked
  EXPECT_EQ(rows[20][2], "0") << out;   // refused
  EXPECT_EQ(rows[20][4], "20") << out;  // Redis' blocked_clients
  const int parked = std::stoi(rows[60][1]), refused = std::stoi(rows[60][2]);
  EXPECT_EQ(parked + refused, 60) << out;
  EXPECT_GE(refused, 20) << out;  // 40 clients at most, the bench's own among them
  EXPECT_NE(out.find("max number of clients reached"), std::string::npos) << out;
}

}  // namespace
}  // namespace atrex
