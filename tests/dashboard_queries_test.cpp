// Every PromQL query of dashboards/atrex.json (each panel's targets, and the `sweep` variable's
// label_values) against the real Prometheus of the cluster in a box (deploy/cluster-in-a-box.sh:
// 1 s scrapes of the file_sd targets in $ATREX_PROMETHEUS_TARGETS, rules.yml loaded) while a
// real short cluster sweep runs (local launcher, a real redis-server, one runner and one agent
// worker serving /metrics, `sweep wait --metrics-listen` serving the sweep's gauges): each query
// must return data at some point of the sweep. A panel whose metric is renamed, never set, set
// only at exit, or whose recording rule is missing fails here, naming the panel.
//
// The sweep (two operators, dropouts, a 3 s lease so renewals happen) takes about half a minute
// on the CPU backend: the rate() panels need several scrapes of counters that move.
// Skips without that Prometheus, unless ATREX_REQUIRE_PROMETHEUS=1 (.ci/run).
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/testing/http_get.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/sweep_cli.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

struct Query {
  std::string panel;
  std::string expr;  // with $sweep replaced
  bool seen = false;
  std::string last;  // the last answer, for the failure message
};

TEST(DashboardQueries, EveryPanelQueryReturnsDataWhileARealSweepRuns) {
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
    if (required) FAIL() << "ATREX_REQUIRE_PROMETHEUS=1 but no Prometheus at $ATREX_PROMETHEUS_URL";
    GTEST_SKIP() << "no Prometheus (deploy/cluster-in-a-box.sh start; eval "
                    "\"$(deploy/cluster-in-a-box.sh env)\")";
  }
  const fs::path dir = fs::temp_directory_path() / ("atrex_dash_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The shared Prometheus sees every test's sweeps: this one's name is its own.
  const std::string name = "dash-" + std::to_string(::getpid());
  {
    std::ofstream(dir / "sweep.yaml")
        << "name: " << name << "\n"
        << "backend: cpu\nhardware: H20\n"
           "agents:\n"
           "  - name: search\n"
           "    provider: search\n"
           "    budget: {iterations: 4}\n"
           "    dropout: {patience: 1, max_generations: 2}\n"
           "operators: [rms_norm, l2_norm]\n"
           "shapes:\n"
           "  cpu: {max_input_elements: 100000, max_per_operator: 1, at_least: 1}\n"
           "  quick: 1\n"
           "evaluation: {seeds: 1, unseen_shapes: 0, min_iterations: 5, max_iterations: 20, "
           "min_time_s: 0.3}\n"
           "quick_evaluation: {seeds: 1, min_iterations: 3, max_iterations: 10, min_time_s: 0.3}\n";
  }
  testing::RedisServer redis;
  const std::string redis_url = "redis://127.0.0.1:" + std::to_string(redis.options().port);
  testing::AtrexCli cli(dir);
  auto [rc, out] = cli({"sweep", "submit", (dir / "sweep.yaml").string(), "--redis", redis_url,
                        "--out", (dir / "out").string(), "--runners", "1", "--agent-workers",
                        "1", "--lease-timeout", "3", "--metrics", "127.0.0.1:0",
                        "--metrics-targets", folder});
  ASSERT_EQ(rc, 0) << out;
  auto wait = std::async(std::launch::async, [&] {
    return cli({"sweep", "wait", (dir / "out").string(), "--timeout", "240", "--metrics-listen",
                "127.0.0.1:0"},
               300);
  });

  auto dash = read_json_file(fs::path(ATREX_TEST_DASHBOARDS_DIR) / "atrex.json");
  ASSERT_TRUE(dash) << dash.error().message;
  std::vector<Query> queries;
  const std::string sweep_re = "\"" + name + "\"";
  for (const auto& p : (*dash)["panels"]) {
    if (!p.contains("targets")) continue;
    for (const auto& t : p["targets"]) {
      std::string e = t["expr"].get<std::string>();
      e = std::regex_replace(e, std::regex("\"\\$sweep\""), sweep_re);
      ASSERT_EQ(e.find('$'), std::string::npos) << "a variable this test does not know: " << e;
      queries.push_back(Query{p["title"].get<std::string>(), e});
    }
  }
  ASSERT_GE(queries.size(), 19u);
  // The `sweep` variable: label_values(up{job="atrex"}, sweep) must offer this sweep.
  const std::string variable = (*dash)["templating"]["list"][1]["definition"];
  ASSERT_EQ(variable, "label_values(up{job=\"atrex\"}, sweep)");
  bool variable_seen = false;

  auto answered = [&](Query& q) {
    auto body = testing::http_get(host, port, "/api/v1/query?query=" + url_encode(q.expr));
    if (!body) return false;
    q.last = body->substr(0, 300);
    auto j = Json::parse(*body, nullptr, false);
    return !j.is_discarded() && j.value("status", "") == "success" &&
           !j["data"]["result"].empty();
  };
  for (;;) {
    const bool done = wait.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
    int missing = 0;
    for (auto& q : queries) {
      if (!q.seen) q.seen = answered(q);
      missing += !q.seen;
    }
    if (!variable_seen) {
      auto body = testing::http_get(
          host, port, "/api/v1/label/sweep/values?match[]=" + url_encode("up{job=\"atrex\"}"));
      variable_seen = body && body->find(sweep_re) != std::string::npos;
    }
    if ((missing == 0 && variable_seen) || done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  auto [wrc, wout] = wait.get();
  EXPECT_EQ(wrc, 0) << wout;
  EXPECT_TRUE(variable_seen) << "label_values(up{job=\"atrex\"}, sweep) never offered " << name;
  for (const auto& q : queries) {
    EXPECT_TRUE(q.seen) << "panel \"" << q.panel << "\": " << q.expr
                        << " returned no data during the sweep; last answer: " << q.last;
  }
  (void)cli({"sweep", "cancel", (dir / "out").string()});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace atrex
