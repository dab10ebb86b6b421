// The ghost-kernel flag of the sweep report: kernels a candidate defines but never launched on
// any of its traced shapes (records' unlaunched_kernels, intersected per operator).
#include <gtest/gtest.h>

#include "atrex/scoring/aggregate.h"
#include "atrex/scoring/report.h"

namespace atrex::scoring {
namespace {

EvalRecord ok_record(const std::string& shape, std::optional<std::vector<std::string>> unlaunched) {
  EvalRecord r;
  r.candidate.agent = "a";
  r.candidate.sha256 = "c0ffee";
  r.operator_name = "rms_norm";
  r.shape_id = shape;
  r.status = EvalStatus::kOk;
  r.s_j = 0.5;
  r.unlaunched_kernels = std::move(unlaunched);
  return r;
}

const OperatorScore& rms_norm(const AgentScore& a) {
  for (const auto& o : a.operators) {
    if (o.name == "rms_norm") return o;
  }
  throw std::logic_error("rms_norm missing");
}

// A kernel that ran on one shape is not a ghost (it serves that shape); one that ran on none is,
// and it is flagged in every table without changing the score or the status.
TEST(GhostKernels, OnlyKernelsLaunchedOnNoTracedShapeAreFlagged) {
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  std::vector<EvalRecord> records = {
      ok_record("0",
                std::vector<std::string>{"small_rows_kernel(float*)", "wide_kernel<4>(float*)"}),
      ok_record("1", std::vector<std::string>{"wide_kernel<4>(float*)"}),
      ok_record("2", std::nullopt),  // not traced: says nothing
  };
  AgentScore a = score_agent(*suite, "a", records);
  const OperatorScore& o = rms_norm(a);
  EXPECT_EQ(o.unlaunched_kernels, std::vector<std::string>{"wide_kernel<4>(float*)"});
  EXPECT_EQ(o.status, "correct");
  EXPECT_DOUBLE_EQ(o.s_i, 0.5);
  EXPECT_NE(
      agent_table_text(a).find("1 kernel(s) defined but never launched: wide_kernel<4>(float*)"),
      std::string::npos)
      << agent_table_text(a);
  const std::string md = render_markdown(Report{ReportContext{}, {a}, {}});
  EXPECT_NE(md.find("never launched"), std::string::npos);
  const Json j = to_json(Report{ReportContext{}, {a}, {}});
  bool found = false;
  for (const auto& op : j["agents"][0]["operators"]) {
    if (op["operator"] == "rms_norm")
      found = op["unlaunched_kernels"] == Json::array({"wide_kernel<4>(float*)"});
  }
  EXPECT_TRUE(found) << j.dump();
}

TEST(GhostKernels, NoFlagWhenEveryKernelRanOrNothingWasTraced) {
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  AgentScore traced = score_agent(*suite, "a", {ok_record("0", std::vector<std::string>{})});
  EXPECT_TRUE(rms_norm(traced).unlaunched_kernels.empty());
  AgentScore untraced = score_agent(*suite, "a", {ok_record("0", std::nullopt)});
  EXPECT_TRUE(rms_norm(untraced).unlaunched_kernels.empty());
  EXPECT_EQ(agent_table_text(untraced).find("never launched"), std::string::npos);
}

}  // namespace
}  // namespace atrex::scoring
