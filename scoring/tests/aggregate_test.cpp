#include <sstream>

#include <gtest/gtest.h>

#include "atrex/scoring/aggregate.h"
#include "atrex/scoring/report.h"

namespace atrex::scoring {
namespace {

EvalRecord rec(const std::string& agent, const std::string& op, const std::string& shape,
               EvalStatus st, std::optional<double> s_j) {
  EvalRecord r;
  r.candidate.agent = agent;
  r.candidate.sha256 = "c0ffee";
  r.operator_name = op;
  r.shape_id = shape;
  r.status = st;
  r.s_j = s_j;
  if (st != EvalStatus::kOk) r.error = "boom";
  return r;
}

TEST(Aggregate, SiIsMedianOverCorrectShapesAndSaggWeightsWholeSuite) {
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  std::vector<EvalRecord> records = {
      rec("a", "rms_norm", "0", EvalStatus::kOk, 0.2),
      rec("a", "rms_norm", "1", EvalStatus::kOk, 0.4),
      rec("a", "rms_norm", "2", EvalStatus::kOk, 0.9),
      rec("a", "silu_and_mul", "0", EvalStatus::kOk, 0.5),
      rec("a", "silu_and_mul", "1", EvalStatus::kWrongResult, std::nullopt),
      rec("a", "l2_norm", "0", EvalStatus::kCrashed, std::nullopt),
      rec("b", "rms_norm", "0", EvalStatus::kOk, 1.0),  // other agent: ignored
  };
  AgentScore a = score_agent(*suite, "a", records);
  const auto find = [&](const char* name) {
    for (const auto& o : a.operators)
      if (o.name == name) return o;
    return OperatorScore{};
  };
  EXPECT_DOUBLE_EQ(find("rms_norm").s_i, 0.4);
  EXPECT_EQ(find("rms_norm").status, "correct");
  EXPECT_DOUBLE_EQ(find("silu_and_mul").s_i, 0.5);
  EXPECT_EQ(find("silu_and_mul").status, "partially correct");
  EXPECT_DOUBLE_EQ(find("l2_norm").s_i, 0.0);
  EXPECT_EQ(find("l2_norm").status, "incorrect");
  EXPECT_NE(find("l2_norm").first_error.find("crashed"), std::string::npos);
  EXPECT_EQ(find("fused_moe").status, "not attempted");
  const double expected = find("rms_norm").weight * 0.4 + find("silu_and_mul").weight * 0.5;
  EXPECT_NEAR(a.s_agg, expected, 1e-12);
  EXPECT_EQ(a.operators.size(), 30u);
  EXPECT_EQ(a.operators_attempted, 3);
  EXPECT_EQ(a.operators_correct, 1);
  EXPECT_NEAR(a.correctness_rate, 1.0 / 3, 1e-12);
  EXPECT_FALSE(a.dsl_adoption_rate.has_value());
}

TEST(Report, CappedShapesAreFlaggedInTheTables) {
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  EvalRecord r = rec("a", "rms_norm", "0", EvalStatus::kOk, 1.0);
  r.above_roofline = true;
  AgentScore a = score_agent(*suite, "a", {r});
  EXPECT_NE(agent_table_text(a).find("capped"), std::string::npos);
  EXPECT_NE(render_markdown(Report{ReportContext{}, {a}, {}}).find("capped"), std::string::npos);
}

TEST(Aggregate, MedianOfEvenCountAveragesMiddle) {
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
}

TEST(Report, JsonIsVersionedAndMarkdownListsUnattempted) {
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  AgentScore a = score_agent(*suite, "a", {rec("a", "rms_norm", "0", EvalStatus::kOk, 0.3)});
  ReportContext ctx{"sw1", "demo", "suite", "H20", "cpu", "host", "now"};
  Json j = to_json(Report{ctx, {a}, {}});
  EXPECT_EQ(j["schema"], "atrex.report/1");
  EXPECT_EQ(j["agents"][0]["operators"].size(), 30u);
  std::string md = render_markdown(Report{ctx, {a}, {}});
  EXPECT_NE(md.find("| rms_norm |"), std::string::npos);
  EXPECT_NE(md.find("29 operators"), std::string::npos);
}

TEST(Report, ModelUsageIsReportedPerAgentOnlyWhenAModelWasAsked) {
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  AgentScore llm = score_agent(*suite, "llm", {rec("llm", "rms_norm", "0", EvalStatus::kOk, 0.3)});
  llm.usage = TokenUsage{12000, 3400, 0.0123, 7};
  AgentScore search = score_agent(*suite, "search", {});
  ReportContext ctx{"sw1", "demo", "suite", "H20", "cpu", "host", "now"};
  const Report report{ctx, {llm, search}, {}};
  Json j = to_json(report);
  EXPECT_EQ(j["agents"][0]["usage"]["prompt_tokens"], 12000);
  EXPECT_EQ(j["agents"][0]["usage"]["completion_tokens"], 3400);
  EXPECT_DOUBLE_EQ(j["agents"][0]["usage"]["cost_usd"].get<double>(), 0.0123);
  EXPECT_EQ(j["agents"][1]["usage"]["requests"], 0);
  const std::string md = render_markdown(report);
  const std::string line = "model usage: 12000 prompt + 3400 completion tokens, 0.0123 USD, 7 requests";
  EXPECT_NE(md.find(line), std::string::npos) << md;
  EXPECT_EQ(md.find("model usage"), md.rfind("model usage")) << "not for the search agent";
  EXPECT_NE(agent_table_text(llm).find(line), std::string::npos);
  EXPECT_EQ(agent_table_text(search).find("model usage"), std::string::npos);
}

// Cells separated by unescaped `|` in one Markdown table row.
int markdown_cells(const std::string& row) {
  int pipes = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == '\\')
      ++i;  // an escaped character
    else if (row[i] == '|')
      ++pipes;
  }
  return pipes - 1;
}

// A `|` or a line break in an error (or an agent name) must stay inside its cell: unescaped it
// splits the row into more columns or ends the table.
TEST(Report, FreeTextInMarkdownTableCellsIsEscaped) {
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  EvalRecord r = rec("a|b", "rms_norm", "0", EvalStatus::kCompileError, std::nullopt);
  r.error = "x.cpp:3: error: no match for 'operator|' (a | b)\nsecond line <vector> & \\";
  AgentScore a = score_agent(*suite, "a|b", {r});
  const std::string md = render_markdown(Report{ReportContext{}, {a}, {}});
  std::istringstream lines(md);
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| a\\|b |", 0) == 0) {
      EXPECT_EQ(markdown_cells(line), 5) << line;
      ++rows;
    }
    if (line.rfind("| rms_norm |", 0) == 0) {
      EXPECT_EQ(markdown_cells(line), 8) << line;  // with the S_i CI and noisy-shape columns
      EXPECT_NE(line.find("'operator\\|' (a \\| b)<br>second line &lt;vector&gt; &amp; \\\\"),
                std::string::npos)
          << line;
      ++rows;
    }
    if (line.rfind("| rms_norm |", 0) != 0) {
      EXPECT_EQ(line.find("second line"), std::string::npos)
          << "the error's second line left its row: " << line;
    }
  }
  EXPECT_EQ(rows, 3) << md;  // the headline, correctness-illusion and operator tables
  EXPECT_EQ(markdown_cell("a\r\nb\rc"), "a<br>b<br>c");
}

}  // namespace
}  // namespace atrex::scoring
