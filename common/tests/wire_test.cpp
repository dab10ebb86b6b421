#include <gtest/gtest.h>

#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/keys.h"
#include "atrex/common/wire/manifest.h"

namespace atrex {
namespace {

TEST(Wire, EvalRecordRoundTripsThroughJson) {
  EvalRecord r;
  r.task_id = "t";
  r.operator_name = "rms_norm";
  r.shape_id = "3";
  r.candidate.sha256 = "abc";
  r.candidate.backend = Backend::kCuda;
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

TEST(Wire, TheRecordSaysWhereTheJudgeReadTheBuffersAndRefusesAnythingElse) {
  EvalRecord r;
  r.judge_reads = JudgeReads::kDeviceArena;
  Json j = to_json(r);
  EXPECT_EQ(j["judge_reads"], "device_arena");
  auto back = eval_record_from_json(j, "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->judge_reads, JudgeReads::kDeviceArena);
  // A record from before the arena has no field: read as "".
  j.erase("judge_reads");
  back = eval_record_from_json(j, "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_FALSE(back->judge_reads.has_value());
  j["judge_reads"] = "shared";
  back = eval_record_from_json(j, "mem");
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().message.find("judge_reads: \"shared\""), std::string::npos)
      << back.error().message;
}

TEST(Wire, EvalTaskCarriesSourceAndSettings) {
  EvalTask t;
  t.task_id = "t1";
  t.operator_name = "silu_and_mul";
  t.shape_ids = {"0", "1"};
  t.candidate.sha256 = "x";
  t.candidate.backend = Backend::kCpu;
  t.candidate.agent = "manual";
  t.candidate.source = "int main(){}";
  t.settings.seeds = 2;
  auto back = eval_task_from_json(to_json(t), "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->candidate.source, "int main(){}");
  EXPECT_EQ(back->candidate.backend, Backend::kCpu);
  EXPECT_EQ(back->settings.seeds, 2);
  EXPECT_EQ(back->shape_ids.size(), 2u);
}

TEST(Wire, UnknownSettingIsRejectedByName) {
  Json j = Json::parse(R"({"seeds": 5, "atoll": 0.1})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("evaluation.atoll"), std::string::npos) << s.error().message;
}

TEST(Wire, SettingOutOfRangeIsRejected) {
  Json j = Json::parse(R"({"seeds": 0})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("evaluation.seeds"), std::string::npos);
}

TEST(Wire, TimingModeAndTargetRseRoundTripAndAreValidated) {
  Json j = Json::parse(R"({"timing_mode": "eager", "target_rse": 0.01})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->timing_mode, TimingMode::kEager);
  EXPECT_DOUBLE_EQ(s->target_rse, 0.01);
  auto back = eval_settings_from_json(JsonField(to_json(*s), "task", "settings"));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->timing_mode, TimingMode::kEager);
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

TEST(Wire, DefenseFieldsRoundTripAndUnlaunchedKernelsStayAbsentWhenNotTraced) {
  EvalRecord r;
  r.operator_name = "rms_norm";
  r.shape_id = "3";
  r.status = EvalStatus::kOk;
  r.range_probe = "x scaled by 2^11";
  r.unseen_shapes = {UnseenShapeResult{"token_count = 2311 (hot shape 4 has 2500)", "4",
                                       Json{{"token_count", 2311}}, EvalStatus::kOk, ""}};
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

TEST(Wire, EdgeCaseFieldRoundTripsAndIsRequired) {
  EvalRecord r;
  r.status = EvalStatus::kOk;
  r.edge_case = "logits: logits rounded to multiples of 0.25";
  auto back = eval_record_from_json(to_json(r), "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->edge_case, r.edge_case);
  Json missing = to_json(r);
  missing.erase("edge_case");
  auto e = eval_record_from_json(missing, "result k");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("edge_case"), std::string::npos) << e.error().message;
  // The setting: on by default, read from a sweep file, kept through a task.
  EXPECT_TRUE(EvalSettings{}.edge_cases);
  Json j = Json::parse(R"({"edge_cases": false})");
  auto s = eval_settings_from_json(JsonField(j, "sweep.yaml", "evaluation"));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_FALSE(s->edge_cases);
  auto task = eval_settings_from_json(JsonField(to_json(*s), "task", "settings"), {},
                                      Completeness::kComplete);
  ASSERT_TRUE(task) << task.error().message;
  EXPECT_FALSE(task->edge_cases);
}

TEST(Wire, UnseenShapesAndRangeProbeSettingsAreReadAndBounded) {
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

namespace atrex {
namespace {

// A renamed or dropped field must fail the read naming itself, never become a default.
TEST(Wire, EvalTaskMissingFieldNamesItself) {
  EvalTask t;
  t.task_id = "t1";
  t.operator_name = "rms_norm";
  t.shape_ids = {"0"};
  Json j = to_json(t);
  j["settings"].erase("rtol");
  auto back = eval_task_from_json(j, "eval task 1-0");
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().code, ErrorCode::kInvalidInput);
  EXPECT_EQ(back.error().message, "eval task 1-0: field \"settings.rtol\" is missing");
  j = to_json(t);
  j["candidate"].erase("source");
  back = eval_task_from_json(j, "eval task 1-0");
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().message.find("\"candidate.source\" is missing"), std::string::npos)
      << back.error().message;
}

TEST(Wire, UnknownFieldNamesItselfAndTheKnownOnes) {
  EvalRecord r;
  r.operator_name = "rms_norm";
  r.shape_id = "0";
  Json j = to_json(r);
  j["statuz"] = "ok";
  auto back = eval_record_from_json(j, "result t/0");
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().message.find("result t/0: field \"statuz\" is not a known field here"),
            std::string::npos)
      << back.error().message;
  EXPECT_NE(back.error().message.find("status"), std::string::npos);
  j = to_json(r);
  j["candidate"]["backend"] = "gpu";
  back = eval_record_from_json(j, "result t/0");
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().message.find("\"candidate.backend\": expected cpu, cuda or hip"),
            std::string::npos)
      << back.error().message;
}

TEST(Wire, WrongSchemaIsRefused) {
  EvalRecord r;
  Json j = to_json(r);
  j["schema"] = "atrex.eval/2";
  auto back = eval_record_from_json(j, "result t/0");
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().message.find("\"schema\": expected \"atrex.eval/1\""), std::string::npos)
      << back.error().message;
}

// How the evaluation child ran is in every record, read strictly: absent or unknown fails.
TEST(Wire, EvalRecordSandboxIsRequiredAndChecked) {
  EvalRecord r;
  r.sandbox = SandboxMode::kNone;
  Json j = to_json(r);
  EXPECT_EQ(j["sandbox"], "none");
  auto back = eval_record_from_json(j, "result t/0");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->sandbox, SandboxMode::kNone);
  j["sandbox"] = "chroot";
  auto bad = eval_record_from_json(j, "result t/0");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("expected bwrap or none"), std::string::npos)
      << bad.error().message;
  j.erase("sandbox");
  auto missing = eval_record_from_json(j, "result t/0");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("sandbox"), std::string::npos) << missing.error().message;
}

TEST(Wire, AgentTaskRoundTripsWithProviderOptionsAndBest) {
  AgentTask t;
  t.sweep_id = "abc";
  t.agent.name = "search";
  t.agent.options = Json{{"templates", "/tmp/t"}};
  t.op = "rms_norm";
  t.backend = Backend::kHip;
  t.seed = 0xfedcba9876543210ull;  // above INT64_MAX: read as unsigned
  t.best.source = "src";
  t.best.score = 0.5;
  t.quick_settings.seeds = 2;
  auto back = agent_task_from_json(to_json(t), "agent task 1-0");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->seed, 0xfedcba9876543210ull);
  EXPECT_EQ(back->backend, Backend::kHip);
  EXPECT_EQ(back->agent.options["templates"], "/tmp/t");
  EXPECT_TRUE(back->best.valid());
  EXPECT_EQ(back->quick_settings.seeds, 2);
  Json j = to_json(t);
  j["agent"].erase("patience");
  auto bad = agent_task_from_json(j, "agent task 1-0");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("\"agent.patience\" is missing"), std::string::npos);
}

TEST(Wire, FinalMarkerRoundTripsAndAnEvaluatedOneNeedsItsTask) {
  FinalMarker m;
  m.agent = "search";
  m.op = "rms_norm";
  m.status = FinalStatus::kEvaluated;
  m.task_id = "rms_norm-full-1";
  m.shapes = {"0", "3"};
  m.quick_score = 0.3;
  auto back = final_marker_from_json(to_json(m), final_key("search", "rms_norm"));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->status, FinalStatus::kEvaluated);
  EXPECT_EQ(back->shapes.size(), 2u);
  m.task_id.clear();
  EXPECT_FALSE(final_marker_from_json(to_json(m), "final"));
}

TEST(Wire, ModelUsageRoundTripsAndIsOptionalInTasksAndFinalMarkers) {
  AgentTask t;
  t.usage = TokenUsage{1200, 340, 0.0021, 3};
  auto back = agent_task_from_json(to_json(t), "agent task 1-0");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->usage.prompt_tokens, 1200);
  EXPECT_EQ(back->usage.completion_tokens, 340);
  EXPECT_DOUBLE_EQ(back->usage.cost_usd, 0.0021);
  EXPECT_EQ(back->usage.requests, 3);
  Json older = to_json(t);
  older.erase("usage");  // written before model usage existed
  auto old_task = agent_task_from_json(older, "agent task 1-1");
  ASSERT_TRUE(old_task) << old_task.error().message;
  EXPECT_EQ(old_task->usage.requests, 0);
  Json bad = to_json(t);
  bad["usage"].erase("cost_usd");
  auto refused = agent_task_from_json(bad, "agent task 1-2");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("usage.cost_usd"), std::string::npos)
      << refused.error().message;
  FinalMarker m;
  m.agent = "llm";
  m.op = "rms_norm";
  m.status = FinalStatus::kNoCorrectCandidate;
  m.usage = t.usage;
  auto fin = final_marker_from_json(to_json(m), "final");
  ASSERT_TRUE(fin) << fin.error().message;
  EXPECT_EQ(fin->usage.completion_tokens, 340);
  Json old_final = to_json(m);
  old_final.erase("usage");
  EXPECT_TRUE(final_marker_from_json(old_final, "final"));
}

TEST(Wire, KeysAreTheSharedNames) {
  EXPECT_EQ(record_key("t", "3"), "t/3");
  EXPECT_EQ(final_key("a", "rms_norm"), "final/a/rms_norm");
  EXPECT_EQ(sweep_prefix("abc"), "atrex:{abc}");
  EXPECT_EQ(manifest_key("abc"), "atrex:{abc}:manifest");
}

TEST(Wire, BackendNamesExtensionsAndChoices) {
  EXPECT_EQ(*parse_backend("hip"), Backend::kHip);
  EXPECT_FALSE(parse_backend("gpu"));
  EXPECT_EQ(backend_for_extension(".cu"), Backend::kCuda);
  EXPECT_EQ(backend_for_extension(".cc"), Backend::kCpu);
  EXPECT_FALSE(backend_for_extension(".py"));
  EXPECT_TRUE(parse_backend_choice("auto", "--backend")->is_auto());
  auto bad = parse_backend_choice("rocm", "--backend");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "--backend: expected auto, cpu, cuda or hip; got \"rocm\"");
}

}  // namespace
}  // namespace atrex

namespace atrex {
namespace {

TEST(Wire, FleetMembersAreOptionalAndWrittenOnlyWhenSet) {
  AgentTask t;
  t.agent.name = "a";
  // Defaults: nothing new on the wire, so sweep ids (a hash of the agents) do not move.
  const Json plain = to_json(t);
  for (const char* k : {"parallel_generations", "wall_time_s", "tokens", "cost_usd"})
    EXPECT_FALSE(plain["agent"].contains(k)) << k;
  EXPECT_FALSE(plain.contains("subagent"));
  t.agent.parallel_generations = 3;
  t.agent.wall_time_s = 90;
  t.agent.tokens = 123456;
  t.agent.cost_usd = 2.5;
  t.subagent = 2;
  auto back = agent_task_from_json(to_json(t), "agent task 9-0");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->agent.parallel_generations, 3);
  EXPECT_DOUBLE_EQ(back->agent.wall_time_s, 90);
  EXPECT_EQ(back->agent.tokens, 123456);
  EXPECT_DOUBLE_EQ(back->agent.cost_usd, 2.5);
  EXPECT_EQ(back->subagent, 2);
  Json out_of_range = to_json(t);
  out_of_range["subagent"] = 3;
  auto refused = agent_task_from_json(out_of_range, "agent task 9-1");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("subagent 3"), std::string::npos);
  Json negative = to_json(t);
  negative["agent"]["tokens"] = -1;
  EXPECT_FALSE(agent_task_from_json(negative, "agent task 9-2"));
}

}  // namespace
}  // namespace atrex
