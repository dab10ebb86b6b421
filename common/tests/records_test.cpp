#include <gtest/gtest.h>

#include "atrex/common/records.h"

namespace atrex {
namespace {

TEST(Records, EvalRecordRoundTripsThroughJson) {
  EvalRecord r;
  r.task_id = "t";
  r.operator_name = "rms_norm";
  r.shape_id = "3";
  r.candidate.sha256 = "abc";
  r.candidate.backend = "cuda";
  r.candidate.agent = "search";
  r.candidate.source = "secret source";
  r.status = EvalStatus::kWrongResult;
  r.error = "out[12]: got nan, expected 0.5";
  r.timing = TimingSummary{};
  r.timing->time_us_median = 12.5;
  r.timing->samples_us = {12, 12.5, 13};
  r.timing->method = "cuda_graph_l2_flush";
  r.timing->relative_standard_error = 0.004;
  r.timing->graph_fallback = "";
  r.s_j = 0.25;
  r.phases_s = Json{{"inputs", 0.5}, {"timing", 0.25}};
  r.runner = "runner-3";
  Json j = to_json(r);
  EXPECT_EQ(j["schema"], "atrex.eval/1");
  EXPECT_EQ(j["runner"], "runner-3");
  EXPECT_EQ(j["status"], "wrong_result");
  EXPECT_FALSE(j["candidate"].contains("source")) << "records must not carry candidate source";
  auto back = eval_record_from_json(j, "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->status, EvalStatus::kWrongResult);
  EXPECT_EQ(back->timing->samples_us.size(), 3u);
  EXPECT_DOUBLE_EQ(*back->s_j, 0.25);
  EXPECT_EQ(back->timing->method, "cuda_graph_l2_flush");
  EXPECT_DOUBLE_EQ(back->timing->relative_standard_error, 0.004);
  EXPECT_DOUBLE_EQ(back->phases_s.value("inputs", 0.0), 0.5);
  EXPECT_EQ(back->runner, "runner-3");
}

TEST(Records, EvalTaskCarriesSourceAndSettings) {
  EvalTask t;
  t.task_id = "t1";
  t.operator_name = "silu_and_mul";
  t.shape_ids = {"0", "1"};
  t.candidate.sha256 = "x";
  t.candidate.backend = "cpu";
  t.candidate.agent = "manual";
  t.candidate.source = "int main(){}";
  t.settings.seeds = 2;
  auto back = eval_task_from_json(to_json(t), "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->candidate.source, "int main(){}");
  EXPECT_EQ(back->settings.seeds, 2);
  EXPECT_EQ(back->shape_ids.size(), 2u);
}

TEST(Records, UnknownSettingIsRejectedByName) {
  Json j = Json::parse(R"({"seeds": 5, "atoll": 0.1})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("evaluation.atoll"), std::string::npos) << s.error().message;
}

TEST(Records, SettingOutOfRangeIsRejected) {
  Json j = Json::parse(R"({"seeds": 0})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("evaluation.seeds"), std::string::npos);
}

TEST(Records, TimingModeAndTargetRseRoundTripAndAreValidated) {
  Json j = Json::parse(R"({"timing_mode": "eager", "target_rse": 0.01})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->timing_mode, "eager");
  EXPECT_DOUBLE_EQ(s->target_rse, 0.01);
  auto back = eval_settings_from_json(JsonField(to_json(*s), "task", "settings"));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->timing_mode, "eager");
  Json cupti = Json::parse(R"({"timing_mode": "cupti"})");
  ASSERT_TRUE(eval_settings_from_json(JsonField(cupti, "sweep.yaml", "evaluation")));
  Json bad = Json::parse(R"({"timing_mode": "nvbench"})");
  auto b = eval_settings_from_json(JsonField(bad, "sweep.yaml", "evaluation"));
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("evaluation.timing_mode"), std::string::npos)
      << b.error().message;
  EXPECT_NE(b.error().message.find("auto, cupti, graph or eager"), std::string::npos)
      << b.error().message;
}

}  // namespace
}  // namespace atrex

namespace atrex {
namespace {

TEST(Records, DefenseFieldsRoundTripAndUnlaunchedKernelsStayAbsentWhenNotTraced) {
  EvalRecord r;
  r.operator_name = "rms_norm";
  r.shape_id = "3";
  r.status = EvalStatus::kOk;
  r.range_probe = "x scaled by 2^11";
  r.unseen_shapes =
      Json::array({Json{{"shape", "token_count = 2311 (hot shape 4 has 2500)"}, {"status", "ok"}}});
  auto back = eval_record_from_json(to_json(r), "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->range_probe, "x scaled by 2^11");
  EXPECT_EQ(back->unseen_shapes.size(), 1u);
  EXPECT_FALSE(back->unlaunched_kernels) << "no trace: absent, not an empty list";
  r.unlaunched_kernels = std::vector<std::string>{"_Z11dead_kernelPf"};
  back = eval_record_from_json(to_json(r), "mem");
  ASSERT_TRUE(back && back->unlaunched_kernels);
  EXPECT_EQ(*back->unlaunched_kernels, std::vector<std::string>{"_Z11dead_kernelPf"});
}

TEST(Records, UnseenShapesAndRangeProbeSettingsAreReadAndBounded) {
  Json j = Json::parse(R"({"unseen_shapes": 3, "range_probe": false})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->unseen_shapes, 3);
  EXPECT_FALSE(s->range_probe);
  auto back = eval_settings_from_json(JsonField(to_json(*s), "task", "settings"));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->unseen_shapes, 3);
  EXPECT_FALSE(back->range_probe);
  EXPECT_EQ(EvalSettings{}.unseen_shapes, 2);
  Json bad = Json::parse(R"({"unseen_shapes": -1})");
  auto e = eval_settings_from_json(JsonField(bad, "sweep.yaml", "evaluation"));
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("evaluation.unseen_shapes"), std::string::npos)
      << e.error().message;
}

}  // namespace
}  // namespace atrex
