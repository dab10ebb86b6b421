// The metric catalogue follows DESIGN §4's naming rules; the /metrics endpoint started for
// `--metrics-listen` serves it over HTTP on an ephemeral port; its file_sd target file appears
// while it runs and goes away with it; bad listen addresses are invalid input naming the flag.
#include <unistd.h>

#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/metrics.h"
#include "atrex/common/metrics_server.h"
#include "atrex/testing/http_get.h"

namespace atrex::metrics {
namespace {
namespace fs = std::filesystem;

TEST(MetricCatalogue, NamesFollowTheConventionAndLabelsAreBounded) {
  std::set<std::string> names;
  const std::set<std::string> unbounded = {"task",  "task_id",  "candidate", "sha256",
                                           "shape", "shape_id", "id"};
  for (const auto& m : catalogue()) {
    EXPECT_TRUE(names.insert(m.name).second) << "twice: " << m.name;
    EXPECT_EQ(m.name.rfind("atrex_", 0), 0u) << m.name;
    const bool total = m.name.size() > 6 && m.name.compare(m.name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(total, m.type == Type::kCounter)
        << m.name << ": counters, and only they, end in _total";
    EXPECT_FALSE(m.help.empty()) << m.name;
    EXPECT_FALSE(m.unit.empty()) << m.name;
    if (m.unit == "seconds" || m.unit == "ratio") {
      EXPECT_NE(m.name.find("_" + m.unit), std::string::npos) << m.name;
    }
    for (const auto& l : m.labels)
      EXPECT_EQ(unbounded.count(l), 0u) << m.name << " has an unbounded label " << l;
  }
  EXPECT_NE(find_metric("atrex_runner_evaluations_total"), nullptr);
  EXPECT_EQ(find_metric("atrex_runner_evaluations"), nullptr);
}

TEST(MetricsListen, BadAddressesAreInvalidInputNamingTheFlagAndValue) {
  for (const std::string v :
       {"9100", "localhost:9100", "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:x", "[zz]:1"}) {
    auto a = parse_listen_address(v, "--metrics-listen");
    ASSERT_FALSE(a) << v;
    EXPECT_EQ(a.error().code, ErrorCode::kInvalidInput);
    EXPECT_NE(a.error().message.find("--metrics-listen"), std::string::npos) << a.error().message;
    EXPECT_NE(a.error().message.find("\"" + v + "\""), std::string::npos) << a.error().message;
  }
  auto v4 = parse_listen_address("0.0.0.0:0", "--metrics-listen");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->host, "0.0.0.0");
  EXPECT_EQ(v4->port, 0);
  auto v6 = parse_listen_address("[::1]:9100", "--metrics-listen");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9100);
}

TEST(MetricsServer, EphemeralPortServesTheRegistryAndItsTargetFileLivesWithIt) {
  const fs::path dir = fs::temp_directory_path() / ("atrex_metrics_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path file;
  {
    auto e = start_exposition({"127.0.0.1", 0}, dir / "targets", "sweep-x", "runner", "runner-7");
    ASSERT_TRUE(e) << e.error().message;
    const int port = (*e)->server->port();
    EXPECT_GT(port, 0);
    RunnerMetrics rm(*(*e)->registry);
    rm.count_task("done");
    rm.count_evaluation("rms_norm", "ok");
    rm.count_evaluation("rms_norm", "ok");
    rm.count_evaluation("rms_norm", "wrong_result");
    rm.evaluation_duration.Observe(0.3);
    rm.busy.Set(1);
    auto body = testing::http_get("127.0.0.1", port, "/metrics");
    ASSERT_TRUE(body);
    EXPECT_NE(body->find("# TYPE atrex_runner_evaluations_total counter"), std::string::npos)
        << *body;
    EXPECT_NE(body->find("# TYPE atrex_runner_evaluation_duration_seconds histogram"),
              std::string::npos);
    EXPECT_NE(body->find("# TYPE atrex_runner_busy gauge"), std::string::npos);
    EXPECT_EQ(testing::sample_value(
                  *body, R"(atrex_runner_evaluations_total{operator="rms_norm",status="ok"})"),
              2.0);
    EXPECT_EQ(
        testing::sample_value(
            *body, R"(atrex_runner_evaluations_total{operator="rms_norm",status="wrong_result"})"),
        1.0);
    EXPECT_EQ(testing::sample_value(*body, R"(atrex_runner_tasks_total{status="done"})"), 1.0);
    EXPECT_EQ(testing::sample_value(*body, "atrex_runner_evaluation_duration_seconds_count"), 1.0);
    EXPECT_EQ(testing::sample_value(*body, "atrex_runner_busy"), 1.0);
    // The target file: one group, the bound port, the labels Prometheus attaches.
    file = dir / "targets" / "runner-7.json";
    auto j = read_json_file(file);
    ASSERT_TRUE(j) << j.error().message;
    ASSERT_TRUE(j->is_array());
    ASSERT_EQ(j->size(), 1u);
    EXPECT_EQ((*j)[0]["targets"][0], "127.0.0.1:" + std::to_string(port));
    EXPECT_EQ((*j)[0]["labels"]["sweep"], "sweep-x");
    EXPECT_EQ((*j)[0]["labels"]["role"], "runner");
    EXPECT_EQ((*j)[0]["labels"]["worker"], "runner-7");
  }
  EXPECT_FALSE(fs::exists(file)) << "a clean exit removes the target file";
  fs::remove_all(dir);
}

TEST(MetricsServer, PortInUseIsUnavailable) {
  auto first = MetricsServer::start({"127.0.0.1", 0}, std::make_shared<prometheus::Registry>());
  ASSERT_TRUE(first) << first.error().message;
  auto second = MetricsServer::start({"127.0.0.1", (*first)->port()},
                                     std::make_shared<prometheus::Registry>());
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
}

TEST(MetricsServer, WildcardBindAdvertisesTheHostName) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(advertised_host("0.0.0.0"), std::string(name));
  EXPECT_EQ(advertised_host("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(advertised_host("::1"), "[::1]");
}

}  // namespace
}  // namespace atrex::metrics
