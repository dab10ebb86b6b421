// dashboards/rules.yml and dashboards/atrex.json against the metric catalogue
// (common/src/metrics.cpp): promtool (Prometheus 2.42) accepts the rules; every atrex_* metric
// their PromQL names exists in the catalogue (histogram series by their _bucket/_sum/_count
// names), so renaming a metric without the dashboards fails here; every recording rule the
// dashboard uses is defined in rules.yml.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "atrex/common/json_io.h"
#include "atrex/common/metrics.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

const fs::path kDir = ATREX_TEST_DASHBOARDS_DIR;

// The atrex_* names in `expr` that are not catalogue metrics (nor a histogram's series).
std::vector<std::string> unknown_metrics(const std::string& expr,
                                         std::set<std::string>* seen = nullptr) {
  static const std::regex name(R"(\batrex_[a-z0-9_]+)");
  std::vector<std::string> out;
  for (std::sregex_iterator it(expr.begin(), expr.end(), name), end; it != end; ++it) {
    std::string n = it->str();
    const metrics::MetricSpec* m = metrics::find_metric(n);
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (m || n.size() <= s.size() || n.compare(n.size() - s.size(), s.size(), s) != 0) continue;
      const metrics::MetricSpec* h = metrics::find_metric(n.substr(0, n.size() - s.size()));
      if (h && h->type == metrics::Type::kHistogram) m = h;
    }
    if (!m) out.push_back(n);
    if (m && seen) seen->insert(m->name);
  }
  return out;
}

std::vector<std::string> dashboard_exprs(const Json& j) {
  std::vector<std::string> out;
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if ((k == "expr" || k == "definition") && v.is_string())
        out.push_back(v.get<std::string>());
      else
        for (auto& e : dashboard_exprs(v)) out.push_back(std::move(e));
    }
  } else if (j.is_array()) {
    for (const auto& v : j)
      for (auto& e : dashboard_exprs(v)) out.push_back(std::move(e));
  }
  return out;
}

TEST(Dashboards, UnknownMetricNamesAreCaught) {
  // The check itself: a renamed or misspelt metric is reported, real ones are not.
  EXPECT_EQ(unknown_metrics("rate(atrex_runner_evaluation_total[1m])"),
            std::vector<std::string>{"atrex_runner_evaluation_total"});
  EXPECT_TRUE(unknown_metrics("rate(atrex_runner_evaluation_duration_seconds_bucket[5m])").empty());
  EXPECT_EQ(unknown_metrics("atrex_runner_busy_bucket"),
            std::vector<std::string>{"atrex_runner_busy_bucket"});
}

// promtool is Debian's `prometheus` package; without it the promtool tests skip, unless
// ATREX_REQUIRE_PROMETHEUS=1 (.ci/run) makes that a failure.
#define ATREX_NEED_PROMTOOL()                                                          \
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {                       \
    const char* req = std::getenv("ATREX_REQUIRE_PROMETHEUS");                         \
    if (req && std::string(req) == "1")                                                \
      FAIL() << "promtool not found (apt-get install prometheus)";                     \
    GTEST_SKIP() << "promtool not found (deploy/install-deps.sh installs prometheus)"; \
  }

TEST(Dashboards, RulesPassPromtoolCheck) {
  ATREX_NEED_PROMTOOL();
  const std::string cmd =
      "promtool check rules '" + (kDir / "rules.yml").string() + "' >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// rules_test.yml: the alerts fire (and stay quiet) on series shaped like atrex's, and the
// recording rules compute what the dashboard shows.
TEST(Dashboards, AlertsAndRecordingRulesPassTheirPromtoolUnitTests) {
  ATREX_NEED_PROMTOOL();
  const std::string cmd =
      "cd '" + kDir.string() + "' && promtool test rules rules_test.yml >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0)
      << cmd << " (run it by hand to see which expectation failed)";
}

TEST(Dashboards, RulesAndDashboardNameOnlyCatalogueMetrics) {
  std::set<std::string> seen, recorded;
  int exprs = 0;
  const YAML::Node rules = YAML::LoadFile((kDir / "rules.yml").string());
  for (const auto& group : rules["groups"]) {
    for (const auto& rule : group["rules"]) {
      const std::string expr = rule["expr"].as<std::string>();
      ++exprs;
      EXPECT_TRUE(unknown_metrics(expr, &seen).empty()) << "rules.yml: " << expr;
      if (rule["record"]) recorded.insert(rule["record"].as<std::string>());
    }
  }
  auto dash = read_json_file(kDir / "atrex.json");
  ASSERT_TRUE(dash) << dash.error().message;
  static const std::regex recording(R"(\batrex:[a-z0-9_:]+)");
  for (const auto& expr : dashboard_exprs(*dash)) {
    ++exprs;
    EXPECT_TRUE(unknown_metrics(expr, &seen).empty()) << "atrex.json: " << expr;
    for (std::sregex_iterator it(expr.begin(), expr.end(), recording), end; it != end; ++it) {
      EXPECT_EQ(recorded.count(it->str()), 1u)
          << "atrex.json uses " << it->str() << ", which rules.yml does not record";
    }
  }
  EXPECT_GE(exprs, 20);
  // The dashboard's five views draw on every component's metrics.
  for (const char* m :
       {"atrex_runner_evaluations_total", "atrex_runner_busy", "atrex_agent_candidates_total",
        "atrex_agent_best_score_ratio", "atrex_sweep_queue_tasks", "atrex_sweep_operators_done",
        "atrex_sweep_s_agg_ratio", "atrex_sweep_s_i_ratio"}) {
    EXPECT_EQ(seen.count(m), 1u) << m << " is shown nowhere";
  }
}

// dashboards/provisioning/: a Grafana pointed at it (paths.provisioning) gets the data source and
// the dashboard. Provisioned dashboards are not imported, so nothing may need an import input
// (`__inputs`, ${DS_...}): every panel and query names the `datasource` variable.
TEST(Dashboards, ProvisioningFolderNamesADataSourceAndTheDashboardFolder) {
  const YAML::Node ds = YAML::LoadFile((kDir / "provisioning" / "datasources" / "atrex.yaml").string());
  ASSERT_EQ(ds["apiVersion"].as<int>(), 1);
  ASSERT_EQ(ds["datasources"].size(), 1u);
  EXPECT_EQ(ds["datasources"][0]["type"].as<std::string>(), "prometheus");
  const std::string uid = ds["datasources"][0]["uid"].as<std::string>();
  EXPECT_EQ(ds["datasources"][0]["url"].as<std::string>(), "${ATREX_PROMETHEUS_URL}");
  const YAML::Node dp = YAML::LoadFile((kDir / "provisioning" / "dashboards" / "atrex.yaml").string());
  ASSERT_EQ(dp["apiVersion"].as<int>(), 1);
  ASSERT_EQ(dp["providers"].size(), 1u);
  EXPECT_EQ(dp["providers"][0]["type"].as<std::string>(), "file");
  EXPECT_EQ(dp["providers"][0]["options"]["path"].as<std::string>(), "${ATREX_DASHBOARDS_DIR}");
  EXPECT_TRUE(fs::exists(kDir / "atrex.json")) << "the folder ATREX_DASHBOARDS_DIR names";

  auto dash = read_json_file(kDir / "atrex.json");
  ASSERT_TRUE(dash) << dash.error().message;
  EXPECT_FALSE(dash->contains("__inputs"));
  const std::string text = dash->dump();
  EXPECT_EQ(text.find("${DS_"), std::string::npos) << "an import-only input";
  const Json& var = (*dash)["templating"]["list"][0];
  EXPECT_EQ(var["type"], "datasource");
  EXPECT_EQ(var["query"], "prometheus");
  EXPECT_EQ(var["current"]["value"], uid) << "defaults to the provisioned data source";
  int panels = 0;
  for (const auto& p : (*dash)["panels"]) {
    if (p["type"] == "row") continue;
    ++panels;
    EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << p["title"];
    for (const auto& t : p["targets"]) EXPECT_EQ(t["datasource"]["uid"], "${datasource}") << p["title"];
  }
  EXPECT_GE(panels, 19);
}

}  // namespace
}  // namespace atrex
