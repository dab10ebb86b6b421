// Cluster sweeps with `--launcher slurm` against the real single-node Slurm that
// deploy/cluster-in-a-box.sh starts (docs/architecture.md §8): job arrays of workers pulling from
// a real redis-server (one per test binary, on a free port), a runner job cancelled mid-sweep and
// recovered by `resume`, USR1 before the time limit (requeue), every result counted once.
// Without a running Slurm these tests FAIL (CI must not skip them silently) unless
// ATREX_SKIP_SLURM_TESTS=1.
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/testing/http_get.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/sweep_cli.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

std::string slurm_conf() {
  if (const char* c = std::getenv("SLURM_CONF"); c && *c) return c;
  const char* dir = std::getenv("ATREX_CLUSTER_DIR");
  return std::string(dir && *dir ? dir : "/tmp/atrex-cluster") + "/slurm/slurm.conf";
}

// A Slurm client command with the box's config; (exit code, output).
std::pair<int, std::string> slurm(std::vector<std::string> argv) {
  SubprocessOptions o;
  o.argv = std::move(argv);
  o.timeout = std::chrono::seconds(30);
  o.extra_env = {{"SLURM_CONF", slurm_conf()}};
  auto r = run_subprocess(o);
  if (!r || !r->started) return {-1, "cannot run " + o.argv.front()};
  return {r->exit_code, r->output_tail};
}

class SlurmSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [rc, out] = slurm({"sinfo", "--noheader", "--format=%P %T"});
    while (!out.empty() && out.back() == '\n') out.pop_back();
    if (rc != 0 || out.find("cpu") == std::string::npos) {
      const std::string why =
          "no Slurm cluster reachable with SLURM_CONF=" + slurm_conf() + " (sinfo: " + out +
          "). Start it with `deploy/cluster-in-a-box.sh start` (as root) and export its "
          "settings with `eval \"$(deploy/cluster-in-a-box.sh env)\"`; set "
          "ATREX_SKIP_SLURM_TESTS=1 to skip these tests";
      const char* skip = std::getenv("ATREX_SKIP_SLURM_TESTS");
      if (skip && std::string(skip) == "1") GTEST_SKIP() << why;
      FAIL() << why;
    }
    dir_ = fs::temp_directory_path() /
           ("atrex_slurm_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(ATREX_TEST_FIXTURES_DIR, dir_ / "fx", fs::copy_options::recursive);
    ASSERT_TRUE(redis_.running());
    url_ = "redis://127.0.0.1:" + std::to_string(redis_.options().port);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    (void)atrex({"sweep", "cancel", (dir_ / "out").string()});
    fs::remove_all(dir_);
  }
  testing::AtrexCli cli() const {
    return testing::AtrexCli(dir_, {}, {{"SLURM_CONF", slurm_conf()}});
  }
  std::pair<int, std::string> atrex(std::vector<std::string> args, int timeout_s = 300) {
    return cli()(std::move(args), timeout_s);
  }
  std::pair<int, std::string> submit(const fs::path& sweep, std::vector<std::string> flags) {
    std::vector<std::string> args = {"sweep", "submit", sweep.string(),         "--redis",
                                     url_,    "--out",  (dir_ / "out").string()};
    args.insert(args.end(), flags.begin(), flags.end());
    return atrex(args);
  }
  Json manifest() { return *read_json_file(dir_ / "out" / "manifest.json"); }
  Json role(const std::string& name) {
    const Json m = manifest();
    for (const auto& r : m["workers"].value("roles", Json::array())) {
      if (r.value("role", "") == name) return r;
    }
    ADD_FAILURE() << "no " << name << " role in " << m["workers"].dump();
    return Json{{"job_ids", {"none"}}, {"ended_job_ids", Json::array()}, {"sbatch", Json::array()}};
  }
  Json status() { return cli().status(dir_ / "out"); }
  bool poll(const std::function<bool()>& pred, int seconds) {
    return testing::poll_until(pred, seconds);
  }
  // The states of a job's array tasks as slurmctld reports them, one per line ("" when unknown).
  std::string task_state(const std::string& job) {
    auto [rc, out] =
        slurm({"squeue", "--noheader", "--array", "--states=all", "--jobs=" + job, "--format=%T"});
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return rc == 0 ? out : "";
  }
  // Slurm's SIGTERM/USR1 to the job must never be recorded as a candidate's crash.
  void expect_complete_and_counted_once() {
    testing::expect_complete_and_counted_once(
        cli(), dir_ / "out",
        testing::CompletionCheck{
            .wait_timeout_s = 400, .never_in_records = {"SIGTERM", "SIGUSR1"}, .min_records = 2});
  }
  // After `wait`, the sweep's jobs are cancelled: nothing of them stays alive.
  void expect_workers_gone() {
    EXPECT_TRUE(poll([&] { return status()["workers_alive"].get<int>() == 0; }, 60))
        << status().dump();
  }

  testing::RedisServer redis_;
  fs::path dir_;
  std::string url_;
};

bool has(const Json& list, const std::string& s) {
  return std::find(list.begin(), list.end(), Json(s)) != list.end();
}

// The cluster section of the sweep file drives the arrays: partition, throttle, time, no gres on
// a cpu sweep; the sweep completes with the right result on Slurm-started workers.
TEST_F(SlurmSweep, SweepOnSlurmArraysCompletesWithRightResults) {
  {
    std::ifstream in(dir_ / "fx" / "crash_sweep.yaml");
    std::ofstream out(dir_ / "fx" / "slurm_sweep.yaml");
    out << in.rdbuf()
        << "cluster:\n  launcher: slurm\n  runners: 2\n  agent_workers: 1\n  cpu_partition: cpu\n"
        << "  gpu_partition: gpu\n  array_throttle: 1\n  time_limit: \"30:00\"\n  sbatch_args: "
           "[--comment=atrex-test]\n";
  }
  auto [rc, out] = submit(dir_ / "fx" / "slurm_sweep.yaml", {});
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(manifest()["workers"]["launcher"], "slurm") << manifest()["workers"].dump();
  const Json runner = role("runner"), agent = role("agent-worker");
  EXPECT_TRUE(has(runner["sbatch"], "--array=0-1%1")) << runner.dump();
  EXPECT_TRUE(has(runner["sbatch"], "--partition=cpu"))
      << "a cpu sweep's runners go to the CPU partition";
  EXPECT_TRUE(has(runner["sbatch"], "--time=30:00")) << runner.dump();
  EXPECT_TRUE(has(runner["sbatch"], "--comment=atrex-test")) << runner.dump();
  for (const auto& a : runner["sbatch"])
    EXPECT_EQ(a.get<std::string>().find("--gres"), std::string::npos) << a;
  EXPECT_TRUE(has(agent["sbatch"], "--array=0-0%1")) << agent.dump();
  // Slurm runs them: the first runner task and the agent worker reach RUNNING.
  const std::string runner_job = runner["job_ids"][0];
  ASSERT_TRUE(poll([&] { return task_state(runner_job).find("RUNNING") != std::string::npos; }, 60))
      << task_state(runner_job);
  expect_complete_and_counted_once();
  expect_workers_gone();
}

// scancel of the runner job mid-sweep: the runner finishes its task (its evaluation children
// ignore Slurm's SIGTERM), `resume` submits a new runner array, nothing is lost or doubled.
TEST_F(SlurmSweep, CancelledRunnerJobIsReplacedByResumeAndNothingIsLost) {
  auto [rc, out] = submit(
      dir_ / "fx" / "crash_sweep.yaml",
      {"--launcher", "slurm", "--runners", "1", "--agent-workers", "1", "--cpu-partition", "cpu"});
  ASSERT_EQ(rc, 0) << out;
  const std::string runner_job = role("runner")["job_ids"][0];
  // Cancel while the second candidate (the one that hangs until its 3 s shape timeout) is being
  // evaluated, so that an evaluation child is alive when Slurm signals the job.
  ASSERT_TRUE(poll(
      [&] {
        const Json q = status()["eval_queue"];
        return q["acked_total"].get<int>() >= 1 && q["leased"].get<int>() > 0;
      },
      90))
      << status().dump();
  auto [src, sout] = slurm({"scancel", runner_job});
  ASSERT_EQ(src, 0) << sout;
  ASSERT_TRUE(poll([&] { return task_state(runner_job) == "CANCELLED"; }, 60))
      << task_state(runner_job);
  EXPECT_EQ(status()["workers_alive"], 1) << "only the agent worker is left";
  auto resumed = atrex({"sweep", "resume", (dir_ / "out").string()});
  ASSERT_EQ(resumed.first, 0) << resumed.second;
  const Json runner = role("runner");
  ASSERT_EQ(runner["job_ids"].size(), 1u) << runner.dump();
  EXPECT_NE(runner["job_ids"][0], runner_job) << "a new runner array";
  EXPECT_TRUE(has(runner["ended_job_ids"], runner_job)) << runner.dump();
  EXPECT_EQ(role("agent-worker")["job_ids"].size(), 1u)
      << "the live agent worker is kept, not doubled";
  expect_complete_and_counted_once();
  expect_workers_gone();
}

// USR1 (what --signal=B:USR1@120 sends before the time limit) reaches the job script: the
// runners stop after their task and the array task requeues itself; the sweep completes.
TEST_F(SlurmSweep, Usr1BeforeTheTimeLimitRequeuesTheRunnerTask) {
  auto [rc, out] = submit(
      dir_ / "fx" / "crash_sweep.yaml",
      {"--launcher", "slurm", "--runners", "1", "--agent-workers", "1", "--cpu-partition", "cpu"});
  ASSERT_EQ(rc, 0) << out;
  const std::string task = role("runner")["job_ids"][0].get<std::string>() + "_0";
  ASSERT_TRUE(poll([&] { return status()["eval_queue"]["enqueued_total"].get<int>() > 0; }, 90))
      << status().dump();
  ASSERT_TRUE(poll([&] { return task_state(task) == "RUNNING"; }, 60)) << task_state(task);
  auto [src, sout] = slurm({"scancel", "--batch", "--signal=USR1", task});
  ASSERT_EQ(src, 0) << sout;
  auto restarts = [&] {
    auto [r, o] = slurm({"scontrol", "--oneliner", "show", "job", task});
    return r == 0 && o.find("Restarts=0") == std::string::npos &&
           o.find("Restarts=") != std::string::npos;
  };
  ASSERT_TRUE(poll(restarts, 60)) << slurm({"scontrol", "show", "job", task}).second;
  expect_complete_and_counted_once();
  expect_workers_gone();
}

// Bad values in the sweep file's cluster section are input errors naming the field (no Slurm
// needed: they fail before anything is submitted).
TEST(SlurmSweepInput, BadClusterSectionIsExitCode2NamingTheField) {
  const fs::path dir =
      fs::temp_directory_path() / ("atrex_slurm_input_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& [section, field] : std::vector<std::pair<std::string, std::string>>{
           {"{runners: 0}", "cluster.runners"},
           {"{launcher: pbs}", "cluster.launcher"},
           {"{sbatch_args: [account=x]}", "cluster.sbatch_args[0]"},
           {"{time_limit: soon}", "cluster.time_limit"},
           {"{partition: gpu}", "cluster.partition"},
           {"{max_deliveries: 0}", "cluster.max_deliveries"}}) {
    std::ofstream(dir / "s.yaml") << "name: s\nbackend: cpu\noperators: [rms_norm]\ncluster: "
                                  << section << "\n";
    SubprocessOptions o;
    o.argv = {std::string(ATREX_TEST_BIN_DIR) + "/atrex",
              "sweep",
              "submit",
              (dir / "s.yaml").string(),
              "--redis",
              "redis://127.0.0.1:1"};
    o.output_tail_bytes = 1 << 16;
    auto r = run_subprocess(o);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->exit_code, 2) << section << ": " << r->output_tail;
    EXPECT_NE(r->output_tail.find(field), std::string::npos) << section << ": " << r->output_tail;
  }
  fs::remove_all(dir);
}

// A sweep's cluster.metrics reaches Slurm-started workers (through the manifest, like prefetch):
// each runner and agent worker of the arrays serves /metrics and announces itself in a file_sd
// target file; the runner's endpoint counts the sweep's evaluations; `wait` stops the jobs and
// the workers' clean exits remove their files.
TEST_F(SlurmSweep, WorkersOfSlurmArraysServeMetricsAndAnnounceThemselves) {
  auto [rc, out] = submit(dir_ / "fx" / "crash_sweep.yaml",
                          {"--launcher", "slurm", "--runners", "1", "--agent-workers", "1",
                           "--cpu-partition", "cpu", "--metrics", "127.0.0.1:0"});
  ASSERT_EQ(rc, 0) << out;
  const fs::path targets = dir_ / "out" / "metrics" / "targets";
  std::string runner_target;
  std::set<std::string> roles;
  ASSERT_TRUE(poll(
      [&] {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(targets, ec)) {
          auto j = read_json_file(e.path());
          if (!j || !j->is_array() || j->empty()) continue;
          const std::string role = (*j)[0]["labels"].value("role", "");
          roles.insert(role);
          if (role == "runner") runner_target = (*j)[0]["targets"][0].get<std::string>();
        }
        return roles.count("runner") && roles.count("agent-worker");
      },
      90))
      << "roles seen: " << roles.size();
  const auto colon = runner_target.rfind(':');
  const std::string host = runner_target.substr(0, colon);
  const int port = std::stoi(runner_target.substr(colon + 1));
  EXPECT_TRUE(poll(
      [&] {
        auto body = testing::http_get(host, port, "/metrics");
        return body && body->find("atrex_runner_evaluations_total{operator=\"rms_norm\"") !=
                           std::string::npos;
      },
      180))
      << "no evaluation counted at " << runner_target;
  expect_complete_and_counted_once();
  expect_workers_gone();
  EXPECT_TRUE(poll([&] { return fs::is_empty(targets); }, 60))
      << "target files left in " << targets;
}

}  // namespace
}  // namespace atrex
