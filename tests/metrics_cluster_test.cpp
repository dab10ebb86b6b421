// Metrics of a cluster sweep end to end (local launcher, a real redis-server): workers started
// for a sweep with `--metrics` serve /metrics on ephemeral ports and announce them in file_sd
// target files that disappear when they stop; a real Prometheus (the cluster in a box's,
// deploy/cluster-in-a-box.sh) discovers them through those files and sees evaluations counted;
// an unparseable listen address is bad input (exit code 2) naming the flag and the value.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/testing/http_get.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/sweep_cli.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

class SweepMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_metrics_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(ATREX_TEST_FIXTURES_DIR, dir_ / "fx", fs::copy_options::recursive);
  }
  void TearDown() override {
    if (fs::exists(dir_ / "out" / "manifest.json"))
      (void)cli()({"sweep", "cancel", (dir_ / "out").string()});
    fs::remove_all(dir_);
  }
  testing::AtrexCli cli() const { return testing::AtrexCli(dir_); }
  std::string redis_url() const {
    return "redis://127.0.0.1:" + std::to_string(redis_.options().port);
  }
  std::pair<int, std::string> submit(std::vector<std::string> extra) {
    std::vector<std::string> args = {"sweep",
                                     "submit",
                                     (dir_ / "fx" / "crash_sweep.yaml").string(),
                                     "--redis",
                                     redis_url(),
                                     "--out",
                                     (dir_ / "out").string(),
                                     "--runners",
                                     "1",
                                     "--agent-workers",
                                     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli()(args);
  }
  // The "host:port" of a target file, once it exists.
  static std::optional<std::pair<std::string, int>> target_of(const fs::path& file) {
    auto j = read_json_file(file);
    if (!j || !j->is_array() || j->empty()) return std::nullopt;
    const std::string t = (*j)[0]["targets"][0].get<std::string>();
    const auto colon = t.rfind(':');
    return std::make_pair(t.substr(0, colon), std::stoi(t.substr(colon + 1)));
  }
  static double scraped(const std::pair<std::string, int>& target, const std::string& series) {
    auto body = testing::http_get(target.first, target.second, "/metrics");
    if (!body) return -1;
    return testing::sample_value(*body, series).value_or(-2);  // -2: no such series
  }

  testing::RedisServer redis_;
  fs::path dir_;
};

TEST_F(SweepMetrics, WorkersServeMetricsAndTheirTargetFilesLiveAsLongAsThey) {
  auto [rc, out] = submit({"--metrics", "127.0.0.1:0"});
  ASSERT_EQ(rc, 0) << out;
  // `sweep wait` follows the sweep meanwhile, serving the sweep's gauges.
  std::pair<int, std::string> waited{-3, ""};
  std::thread wait([&] {
    waited = cli()({"sweep", "wait", (dir_ / "out").string(), "--timeout", "300",
                    "--metrics-listen", "127.0.0.1:0"},
                   350);
  });
  const fs::path targets = dir_ / "out" / "metrics" / "targets";
  std::optional<std::pair<std::string, int>> runner, agent, follower;
  EXPECT_TRUE(testing::poll_until(
      [&] { return (runner = target_of(targets / "runner-0.json")).has_value(); }, 60));
  EXPECT_TRUE(testing::poll_until(
      [&] { return (agent = target_of(targets / "agent-worker-0.json")).has_value(); }, 60));
  EXPECT_TRUE(testing::poll_until(
      [&] { return (follower = target_of(targets / "sweep-wait.json")).has_value(); }, 60));
  if (runner && agent && follower) {
    auto j = read_json_file(targets / "runner-0.json");
    EXPECT_EQ((*j)[0]["labels"]["sweep"], "crash-sweep");
    EXPECT_EQ((*j)[0]["labels"]["role"], "runner");
    // One (agent, operator) planned; the eval queue's gauges exist while wait follows the sweep.
    EXPECT_TRUE(testing::poll_until(
        [&] {
          return scraped(*follower, "atrex_sweep_operators_planned") == 1 &&
                 scraped(*follower, R"(atrex_sweep_queue_tasks{queue="eval",state="dead"})") == 0;
        },
        60));
    // The counters move as the sweep runs: the crash fixture's segfaulting candidate is `crashed`.
    EXPECT_TRUE(testing::poll_until(
        [&] {
          return scraped(
                     *runner,
                     R"(atrex_runner_evaluations_total{operator="rms_norm",status="crashed"})") > 0;
        },
        120));
    EXPECT_TRUE(testing::poll_until(
        [&] { return scraped(*agent, R"(atrex_agent_candidates_total{agent="fixture"})") > 0; },
        60));
  }
  wait.join();
  ASSERT_EQ(waited.first, 0) << waited.second;
  EXPECT_NE(waited.second.find("metrics at http://127.0.0.1:"), std::string::npos) << waited.second;
  // `wait` stopped the workers (SIGTERM): a clean exit removes each target file, as does wait's
  // own.
  EXPECT_TRUE(testing::poll_until([&] { return fs::exists(targets) && fs::is_empty(targets); }, 60))
      << "target files left behind in " << targets;
}

// `atrex sweep run --metrics-listen`: the in-process runner, agent worker and the sweep share
// one endpoint, announced in <results>/metrics/targets/sweep-run.json while the sweep runs.
TEST_F(SweepMetrics, LocalSweepServesRunnerAgentAndSweepMetricsWhileItRuns) {
  std::pair<int, std::string> ran{-3, ""};
  std::thread run([&] {
    ran = cli()({"sweep", "run", (dir_ / "fx" / "crash_sweep.yaml").string(), "--out",
                 (dir_ / "local").string(), "--metrics-listen", "127.0.0.1:0"},
                300);
  });
  const fs::path file = dir_ / "local" / "metrics" / "targets" / "sweep-run.json";
  std::optional<std::pair<std::string, int>> t;
  EXPECT_TRUE(testing::poll_until([&] { return (t = target_of(file)).has_value(); }, 60)) << file;
  if (t) {
    EXPECT_TRUE(testing::poll_until(
        [&] {
          return scraped(*t, "atrex_sweep_operators_planned") == 1 &&
                 scraped(
                     *t,
                     R"(atrex_runner_evaluations_total{operator="rms_norm",status="crashed"})") >
                     0 &&
                 scraped(*t, R"(atrex_agent_candidates_total{agent="fixture"})") > 0;
        },
        120));
  }
  run.join();
  EXPECT_EQ(ran.first, 0) << ran.second;
  EXPECT_FALSE(fs::exists(file)) << "sweep run left its target file";
}

TEST_F(SweepMetrics, UnparseableListenAddressIsBadInputNamingTheFlagAndValue) {
  auto check = [&](std::vector<std::string> args, const std::string& flag,
                   const std::string& value) {
    auto [rc, out] = cli()(args);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find(flag), std::string::npos) << out;
    EXPECT_NE(out.find(value), std::string::npos) << out;
  };
  check(
      {"runner", "--redis", redis_url(), "--sweep", "nosuch", "--metrics-listen", "localhost:91x"},
      "--metrics-listen", "localhost:91x");
  check({"agent-worker", "--redis", redis_url(), "--sweep", "nosuch", "--metrics-listen", "9100"},
        "--metrics-listen", "9100");
  check({"sweep", "run", (dir_ / "fx" / "crash_sweep.yaml").string(), "--metrics-listen",
         "1.2.3.4:70000"},
        "--metrics-listen", "1.2.3.4:70000");
  check({"sweep", "wait", (dir_ / "nothing").string(), "--metrics-listen", "[::1]"},
        "--metrics-listen", "[::1]");
  check({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis", redis_url(),
         "--metrics", "host:1"},
        "--metrics", "host:1");
  EXPECT_FALSE(fs::exists(dir_ / "nothing"));
}

// A real Prometheus (deploy/cluster-in-a-box.sh start; its URL and target folder from
// `cluster-in-a-box.sh env`) discovers the sweep's runner through its file_sd target file and
// scrapes its evaluations. Skips when none runs, unless ATREX_REQUIRE_PROMETHEUS=1 (.ci/run).
TEST_F(SweepMetrics, PrometheusDiscoversTheRunnersAndSeesTheirEvaluations) {
  const char* url = std::getenv("ATREX_PROMETHEUS_URL");
  const char* folder = std::getenv("ATREX_PROMETHEUS_TARGETS");
  const bool required = std::getenv("ATREX_REQUIRE_PROMETHEUS") &&
                        std::string(std::getenv("ATREX_REQUIRE_PROMETHEUS")) == "1";
  std::string host;
  int port = 0;
  if (url && folder) {
    const std::string u = url;
    const auto colon = u.rfind(':');
    host = u.substr(u.find("//") + 2, colon - u.find("//") - 2);
    port = std::atoi(u.c_str() + colon + 1);
  }
  if (port <= 0 || !testing::http_get(host, port, "/-/ready")) {
    if (required)
      FAIL() << "ATREX_REQUIRE_PROMETHEUS=1 but no Prometheus answers at $ATREX_PROMETHEUS_URL ("
             << (url ? url : "unset") << "); run deploy/cluster-in-a-box.sh start and eval its env";
    GTEST_SKIP() << "no Prometheus (deploy/cluster-in-a-box.sh start; eval "
                    "\"$(deploy/cluster-in-a-box.sh env)\")";
  }
  auto [rc, out] = submit({"--metrics", "127.0.0.1:0", "--metrics-targets", folder});
  ASSERT_EQ(rc, 0) << out;
  const std::string id = read_json_file(dir_ / "out" / "manifest.json")->value("sweep_id", "");
  const fs::path file = fs::path(folder) / (id + "-runner-0.json");
  std::optional<std::pair<std::string, int>> runner;
  ASSERT_TRUE(testing::poll_until([&] { return (runner = target_of(file)).has_value(); }, 60))
      << file;
  // This run's runner only: its instance (host:port) is unique while it lives.
  const std::string instance = runner->first + ":" + std::to_string(runner->second);
  const std::string query =
      "sum(atrex_runner_evaluations_total%7Brole%3D%22runner%22%2Cinstance%3D%22" + instance +
      "%22%7D)";
  double seen = 0;
  std::string last;
  const bool ok = testing::poll_until(
      [&] {
        auto body = testing::http_get(host, port, "/api/v1/query?query=" + query);
        if (!body) return false;
        last = *body;
        auto j = Json::parse(*body, nullptr, false);
        if (j.is_discarded() || j.value("status", "") != "success" || j["data"]["result"].empty())
          return false;
        seen = std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
        return seen > 0;
      },
      180);
  EXPECT_TRUE(ok) << "Prometheus never saw an evaluation of " << instance
                  << "; last answer: " << last;
  auto [wrc, wout] = cli()({"sweep", "wait", (dir_ / "out").string(), "--timeout", "300"}, 350);
  ASSERT_EQ(wrc, 0) << wout;
  EXPECT_TRUE(testing::poll_until([&] { return !fs::exists(file); }, 60))
      << "the runner left " << file;
}

}  // namespace
}  // namespace atrex
