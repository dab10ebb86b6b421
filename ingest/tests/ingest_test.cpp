// End to end over hand-made traces: the join, the families, phases, weights and the suite.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "atrex/ingest/ingest.h"
#include "atrex/problems/suite.h"
#include "trace_util.h"

namespace atrex::ingest {
namespace {

namespace fs = std::filesystem;
using testing::TraceBuilder;

const Json kNormTypes = Json::parse(R"(["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar"])");
const Json kEps = Json::parse(R"(["","","","1e-06"])");

Json norm_dims(int64_t tokens, int64_t hidden) {
  return Json::array({{tokens, hidden}, {tokens, hidden}, {hidden}, Json::array()});
}

// One vLLM rms_norm call on `pid`, its launch and its kernel (`dur` µs on `device`).
void rms_norm_call(TraceBuilder& b, int pid, int device, double ts, int64_t corr, int64_t ext,
                   int64_t tokens, double dur, bool with_ext = true) {
  b.op("_C::rms_norm", pid, ts, 10, ext, norm_dims(tokens, 1024), kNormTypes, kEps)
      .runtime("cudaLaunchKernel", pid, ts + 2, corr, with_ext ? ext : -1)
      .kernel("void vllm::rms_norm_kernel<c10::BFloat16>", device, ts + 20, dur, corr);
}

void silu_call(TraceBuilder& b, int pid, int device, double ts, int64_t corr, int64_t ext,
               int64_t tokens, double dur) {
  b.op("_C::silu_and_mul", pid, ts, 10, ext,
       Json::array({{tokens, 2048}, {tokens, 4096}}), Json::parse(R"(["c10::BFloat16","c10::BFloat16"])"))
      .runtime("cudaLaunchKernel", pid, ts + 2, corr, ext)
      .kernel("void vllm::act_and_mul_kernel<c10::BFloat16>", device, ts + 20, dur, corr);
}

using testing::run;
using testing::write;

TEST(Ingest, KernelsJoinTheirOpByCorrelationAndTheSuiteLoadsWithWeightsSummingToOne) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  b.annotation("prefill", 1, 0, 1000);
  for (int i = 0; i < 3; ++i) rms_norm_call(b, 1, 0, 10 + 100 * i, 10 + i, 100 + i, 2048, 30);
  silu_call(b, 1, 0, 400, 20, 200, 2048, 50);
  auto r = run({write(dir, "a.json", b)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->kernels, 4);
  EXPECT_DOUBLE_EQ(r->mapped_us, 140);
  const FamilyStats& norm = r->families.at("rms_norm");
  EXPECT_DOUBLE_EQ(norm.gpu_us, 90);
  EXPECT_DOUBLE_EQ(norm.phase_us[kPrefill], 90);
  ASSERT_EQ(norm.shapes.size(), 1u);
  const ShapeTime& s = norm.shapes.begin()->second;
  EXPECT_EQ(s.input_kwargs, Json::parse(R"({"token_count": 2048, "hidden_size": 1024})"));
  EXPECT_DOUBLE_EQ(s.init_kwargs["eps"].get<double>(), 1e-6);
  EXPECT_EQ(r->families.at("silu_and_mul").shapes.begin()->second.input_kwargs["shape"],
            Json::parse("[2048, 4096]"));
  ASSERT_TRUE(write_suite(*r, dir / "suite"));
  EXPECT_TRUE(fs::exists(dir / "suite" / "configs" / "hardware"));
  auto suite = problems::Suite::load(dir / "suite");
  ASSERT_TRUE(suite) << suite.error().message;
  ASSERT_EQ(suite->operators().size(), 2u);
  double total = 0;
  for (const auto& op : suite->operators()) total += op.weight;
  EXPECT_NEAR(total, 1, 1e-12);
  EXPECT_NEAR(suite->find("rms_norm")->weight, 90.0 / 140, 1e-9);
  EXPECT_EQ(suite->find("rms_norm")->phase, "prefill");
  auto roof = suite->roofline("rms_norm", "0");
  ASSERT_TRUE(roof);
  EXPECT_GT(roof->q_read_bytes, 2048.0 * 1024 * 2 - 1);
}

TEST(Ingest, WithoutExternalIdsTheLaunchingOpIsFoundByTimeNesting) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  rms_norm_call(b, 1, 0, 10, 10, 100, 512, 30, /*with_ext=*/false);
  auto r = run({write(dir, "a.json", b)});
  ASSERT_TRUE(r) << r.error().message;
  const auto& shapes = r->families.at("rms_norm").shapes;
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes.begin()->second.input_kwargs["token_count"], 512);
}

// Two ranks merged into one trace, each numbering its correlation ids from 1: every kernel
// must be joined to the op of its own process (different shapes per rank tell them apart).
void colliding_ranks(bool some_unique_ids) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  for (int i = 0; i < 4; ++i) {
    rms_norm_call(b, 100, 0, 10 + 100 * i, 1 + i, 1 + i, 1111, 10);   // rank 0 on device 0
    rms_norm_call(b, 200, 1, 60 + 100 * i, 1 + i, 1 + i, 2222, 20);   // rank 1 on device 1
  }
  if (some_unique_ids) rms_norm_call(b, 200, 1, 900, 99, 99, 2222, 20);
  auto r = run({write(dir, "ranks.json", b)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->traces[0].ambiguous_joins, 8);
  const auto& shapes = r->families.at("rms_norm").shapes;
  ASSERT_EQ(shapes.size(), 2u);
  for (const auto& [key, s] : shapes) {
    const int64_t tokens = s.input_kwargs["token_count"];
    // Each rank's kernels (10 µs on device 0, 20 µs on device 1) under its own shape only.
    if (tokens == 1111) EXPECT_DOUBLE_EQ(s.gpu_us, 40);
    else EXPECT_DOUBLE_EQ(s.gpu_us, some_unique_ids ? 100 : 80);
  }
}

TEST(Ingest, TwoRanksWithCollidingCorrelationIdsJoinWithinTheirProcessAndDevice) {
  colliding_ranks(true);
}

TEST(Ingest, WhenEveryCorrelationIdCollidesTheLaunchLagPairsProcessesWithDevices) {
  colliding_ranks(false);
}

TEST(Ingest, GraphReplayedKernelsAreAttributedToTheGraphLaunchAndItsStepMarker) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  b.annotation("decode", 1, 0, 500).op("CUDAGraph::replay", 1, 10, 50, 7);
  b.runtime("cudaGraphLaunch", 1, 20, 42, 7);
  b.kernel("void vllm::rms_norm_kernel<c10::BFloat16>", 0, 100, 5, 42)
      .kernel("void vllm::act_and_mul_kernel<c10::BFloat16>", 0, 106, 6, 42)
      .kernel("void vllm::rms_norm_kernel<c10::BFloat16>", 0, 113, 5, 42);
  auto r = run({write(dir, "graph.json", b)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->traces[0].graph_kernels, 3);
  const FamilyStats& norm = r->families.at("rms_norm");
  EXPECT_DOUBLE_EQ(norm.gpu_us, 10);
  EXPECT_DOUBLE_EQ(norm.phase_us[kDecode], 10);
  // The capture-time op is gone: the family is known, the shape is not, and that is reported.
  EXPECT_DOUBLE_EQ(norm.no_shape_us, 10);
  EXPECT_NE(norm.no_shape_reason.find("CUDAGraph::replay"), std::string::npos) << norm.no_shape_reason;
  EXPECT_DOUBLE_EQ(r->families.at("silu_and_mul").phase_us[kDecode], 6);
  EXPECT_TRUE(r->suite.empty());
  EXPECT_FALSE(write_suite(*r, dir / "suite"));  // nothing with a shape: no suite, a report
  EXPECT_TRUE(fs::exists(dir / "suite" / "coverage.md"));
}

TEST(Ingest, UnmappedKernelsAreReportedWithTheirShareNeverDropped) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  rms_norm_call(b, 1, 0, 10, 1, 1, 64, 25);
  b.op("mystery::op", 1, 200, 10, 2).runtime("cudaLaunchKernel", 1, 202, 2, 2)
      .kernel("my_custom_kernel_v3", 0, 220, 75, 2);
  auto r = run({write(dir, "a.json", b)});
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->unmapped_us, 75);
  ASSERT_EQ(r->unmapped.size(), 1u);
  EXPECT_EQ(r->unmapped[0].name, "my_custom_kernel_v3");
  EXPECT_EQ(r->unmapped[0].example_op, "mystery::op");
  const Json cov = coverage_json(*r);
  EXPECT_DOUBLE_EQ(cov["unmapped_share"].get<double>(), 0.75);
  EXPECT_EQ(cov["unmapped_top"][0]["kernel"], "my_custom_kernel_v3");
  EXPECT_NE(coverage_markdown(*r).find("my_custom_kernel_v3"), std::string::npos);
}

TEST(Ingest, OpsWithoutRecordShapesCountTheirTimeAsMissingShapes) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  b.op("_C::rms_norm", 1, 10, 10, 1).runtime("cudaLaunchKernel", 1, 12, 1, 1)
      .kernel("void vllm::rms_norm_kernel<c10::BFloat16>", 0, 30, 8, 1);
  rms_norm_call(b, 1, 0, 100, 2, 2, 64, 2);
  auto r = run({write(dir, "a.json", b)});
  ASSERT_TRUE(r);
  const FamilyStats& f = r->families.at("rms_norm");
  EXPECT_DOUBLE_EQ(f.gpu_us, 10);
  EXPECT_DOUBLE_EQ(f.no_shape_us, 8);
  EXPECT_NE(f.no_shape_reason.find("no record_shapes data"), std::string::npos) << f.no_shape_reason;
  ASSERT_EQ(r->suite.size(), 1u);
  EXPECT_NEAR(r->suite[0].covered_share, 0.2, 1e-12);  // 2 of the family's 10 µs have a shape
}

TEST(Ingest, ATraceWithoutGpuEventsGivesZeroKernelsNotACrash) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  b.op("aten::add", 1, 0, 10, 1).op("aten::mul", 1, 20, 10, 2);
  auto r = run({write(dir, "cpu_only.json", b)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->kernels, 0);
  EXPECT_DOUBLE_EQ(r->gpu_us, 0);
  auto w = write_suite(*r, dir / "suite");
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(w.error().message.find("0 GPU kernels"), std::string::npos) << w.error().message;
}

TEST(Ingest, PhasesComeFromStepMarkersElseFromTokensPerStep) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  // Step 1: no marker, input_ids [4, 512] -> prefill. Step 2: [4, 1] -> decode.
  b.annotation("ProfilerStep#1", 1, 0, 400);
  b.op("aten::embedding", 1, 5, 5, 1, Json::parse("[[32000, 1024], [4, 512]]"));
  rms_norm_call(b, 1, 0, 20, 10, 10, 2048, 30);
  b.annotation("ProfilerStep#2", 1, 500, 400);
  b.op("aten::embedding", 1, 505, 5, 2, Json::parse("[[32000, 1024], [4, 1]]"));
  rms_norm_call(b, 1, 0, 520, 11, 11, 4, 3);
  // A kernel outside any step.
  rms_norm_call(b, 1, 0, 1000, 12, 12, 8, 1);
  auto r = run({write(dir, "steps.json", b)});
  ASSERT_TRUE(r) << r.error().message;
  const FamilyStats& f = r->families.at("rms_norm");
  EXPECT_DOUBLE_EQ(f.phase_us[kPrefill], 30);
  EXPECT_DOUBLE_EQ(f.phase_us[kDecode], 3);
  EXPECT_DOUBLE_EQ(f.phase_us[kUnknownPhase], 1);
}

fs::path apps_file(const fs::path& dir, const std::string& text) {
  testing::write_file(dir / "apps.yaml", text);
  return dir / "apps.yaml";
}

TEST(Ingest, WeightsAreCardHourWeightedPhaseAwareGpuTimeShares) {
  auto dir = testing::temp_dir("t");
  TraceBuilder a;  // app A: 100 µs rms_norm in prefill
  a.annotation("prefill", 1, 0, 1000);
  rms_norm_call(a, 1, 0, 10, 1, 1, 128, 100);
  TraceBuilder bb;  // app B: 100 µs silu_and_mul + 100 µs unmapped, in decode
  bb.annotation("decode", 1, 0, 1000);
  silu_call(bb, 1, 0, 10, 1, 1, 16, 100);
  bb.op("x::y", 1, 300, 5, 2).runtime("cudaLaunchKernel", 1, 301, 2, 2).kernel("unknown_k", 0, 320, 100, 2);
  auto ta = write(dir, "chat-a.json", a);
  auto tb = write(dir, "code-b.json", bb);
  // w_rms ∝ 1 h · 100/100 = 1, w_silu ∝ 3 h · 100/200 = 1.5  ->  0.4 / 0.6
  auto r = run({ta, tb}, apps_file(dir, R"(version: atrex.ingest-apps/1
apps:
  - {name: chat, card_hours: 1, traces: ["chat-*"]}
  - {name: code, card_hours: 3, traces: ["code-*"]}
)"));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->suite.size(), 2u);
  EXPECT_EQ(r->suite[0].name, "silu_and_mul");
  EXPECT_NEAR(r->suite[0].weight, 0.6, 1e-12);
  EXPECT_NEAR(r->suite[1].weight, 0.4, 1e-12);
  // With code's card-hours split 50/50 over phases and no prefill in its traces, only half of
  // its hours weigh: w_silu ∝ 3 · 0.5 · 100/200 = 0.75 (and a warning says so).
  auto r2 = run({ta, tb}, apps_file(dir, R"(version: atrex.ingest-apps/1
apps:
  - {name: chat, card_hours: 1, traces: ["chat-*"]}
  - {name: code, card_hours: 3, traces: ["code-*"], phases: {prefill: 0.5, decode: 0.5}}
)"));
  ASSERT_TRUE(r2) << r2.error().message;
  EXPECT_NEAR(r2->suite[0].weight, 1 / 1.75, 1e-12);
  ASSERT_FALSE(r2->warnings.empty());
  EXPECT_NE(r2->warnings[0].find("no prefill GPU time"), std::string::npos) << r2->warnings[0];
}

TEST(Ingest, AnAppsFileThatLeavesATraceOutOrIsMalformedIsInvalidInput) {
  auto dir = testing::temp_dir("t");
  TraceBuilder a;
  rms_norm_call(a, 1, 0, 10, 1, 1, 128, 100);
  auto t = write(dir, "x.json", a);
  const char* bad[] = {
      "version: atrex.ingest-apps/1\napps:\n  - {name: a, card_hours: 1, traces: [\"y*\"]}\n",
      "version: atrex.ingest-apps/1\napps:\n  - {name: a, card_hours: -1, traces: [\"x*\"]}\n",
      "version: atrex.ingest-apps/1\napps:\n  - {name: a, card_hours: 1, traces: [\"x*\"], "
      "phases: {prefill: 0.7, decode: 0.7}}\n",
      "version: atrex.ingest-apps/1\napps:\n  - {name: a, card_hours: 1, trace: [\"x*\"]}\n",
  };
  for (const char* text : bad) {
    auto r = run({t}, apps_file(dir, text));
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput) << text;
    EXPECT_NE(r.error().message.find("apps.yaml"), std::string::npos) << r.error().message;
  }
}

TEST(Ingest, HotShapesCoverTheChosenShareOfTheFamilysTime) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  rms_norm_call(b, 1, 0, 10, 1, 1, 100, 60);
  rms_norm_call(b, 1, 0, 200, 2, 2, 200, 30);
  rms_norm_call(b, 1, 0, 400, 3, 3, 300, 10);
  auto r = run({write(dir, "a.json", b)}, std::nullopt, 0.85);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->suite.size(), 1u);
  ASSERT_EQ(r->suite[0].shapes.size(), 2u);
  EXPECT_EQ(r->suite[0].shapes[0].shape.input_kwargs["token_count"], 100);
  EXPECT_EQ(r->suite[0].shapes[1].shape.input_kwargs["token_count"], 200);
  EXPECT_NEAR(r->suite[0].covered_share, 0.9, 1e-12);
}

}  // namespace
}  // namespace atrex::ingest
