// GPU gates (label `gpu`, run on the lent H200 by deploy/gpu/run-gpu-checks.sh): a correct
// CUDA candidate passes and is timed by CUDA-graph replay (eager events on request, slower on
// tiny shapes); an illegal-address kernel kills only its child; an all-zero kernel, work left
// on an unjoined stream and work launched later from a host thread are rejected; a kernel
// computing in __half fails the range probe; a kernel that never runs is flagged.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/evaluator.h"
#include "atrex/testing/test_paths.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

fs::path data(const std::string& f) {
  return testing::source_path(ATREX_TEST_DATA_DIR, "kernels/faults") / f;
}

class GpuGatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!probe_environment().has_gpu())
      GTEST_SKIP() << "no GPU: " << probe_environment().gpu_probe_error;
    auto suite = problems::Suite::load(problems::default_suite_dir());
    ASSERT_TRUE(suite) << suite.error().message;
    suite_ = std::make_unique<problems::Suite>(std::move(*suite));
    auto profiles = problems::load_default_hardware_profiles(suite_->dir());
    ASSERT_TRUE(profiles) << profiles.error().message;
    hardware_ = *problems::find_hardware_profile(*profiles, "measured-H200");
  }

  std::vector<EvalRecord> evaluate(const std::string& file, std::vector<std::string> shapes,
                                   const std::string& timing_mode = "auto",
                                   const std::function<void(EvalSettings&)>& adjust = nullptr) {
    EvalTask t;
    t.task_id = "gpu-" + file;
    t.operator_name = "rms_norm";
    t.shape_ids = std::move(shapes);
    t.candidate.source = *read_text_file(data(file));
    for (const auto& [name, value] : defines_) {
      const std::string key = "#define " + name + " ";
      const auto at = t.candidate.source.find(key);
      EXPECT_NE(at, std::string::npos) << name;
      if (at == std::string::npos) continue;
      t.candidate.source.replace(at, t.candidate.source.find('\n', at) - at, key + value);
    }
    t.candidate.sha256 = sha256_hex(t.candidate.source);
    t.candidate.backend = Backend::kCuda;
    t.candidate.agent = "test";
    t.candidate.file_name = file;
    t.settings.shape_timeout_s = 120;
    t.settings.timing_mode = *parse_timing_mode(timing_mode);
    t.task_id += "-" + timing_mode;
    if (adjust) adjust(t.settings);
    EvaluatorOptions o;
    o.suite = suite_.get();
    o.hardware = hardware_;
    o.cache_dir = fs::temp_directory_path() / "atrex_gpu_test_cache";
    // In the sandbox like every evaluation, unless the GPU host cannot make one
    // (deploy/gpu/run-gpu-checks.sh sets ATREX_NO_SANDBOX=1 then and says so).
    const char* no_sandbox = std::getenv("ATREX_NO_SANDBOX");
    o.sandbox =
        no_sandbox && std::string(no_sandbox) == "1" ? SandboxMode::kNone : SandboxMode::kBwrap;
    Evaluator ev(o);
    auto r = ev.evaluate(t);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : std::vector<EvalRecord>{};
  }

  std::unique_ptr<problems::Suite> suite_;
  problems::HardwareProfile hardware_;
  std::map<std::string, std::string> defines_;  // "#define NAME old" -> new value
};

TEST_F(GpuGatesTest, CorrectCudaCandidatePassesAndIsTimedByGraphReplay) {
  auto recs = evaluate("rms_norm_correct.cu", {"0", "15", "27"}, "graph");
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.shape_id << ": " << r.error;
    ASSERT_TRUE(r.timing);
    EXPECT_EQ(r.timing->method, "cuda_graph_l2_flush") << r.timing->graph_fallback;
    EXPECT_TRUE(r.clocks.contains("before")) << r.clocks.dump();
    EXPECT_GT(r.timing->time_us_median, 0);
    ASSERT_TRUE(r.s_j);
    EXPECT_FALSE(r.above_roofline) << r.shape_id << " measured faster than the roofline";
    EXPECT_NE(r.device.find("H"), std::string::npos);
    std::printf("rms_norm shape %s: %.2f us (IQR %.2f, n=%d), T_roofline %.2f us, S_j %.3f\n",
                r.shape_id.c_str(), r.timing->time_us_median, r.timing->time_us_iqr, r.timing->n,
                r.t_roofline_us, *r.s_j);
  }
}

// The judge's device arena (docs/evaluation.md "The judge's device arena"): by default the judge
// compares the candidate's buffers where the candidate wrote them, through the memfd copies with
// ATREX_DEVICE_ARENA=0 where the runner runs. Same verdicts either way: an honest kernel passes,
// a wrong result the judge finds fails, an out-of-bounds write into the arena's guard is caught.
TEST_F(GpuGatesTest, TheJudgeComparesInItsDeviceArenaOrThroughTheMemfdWithTheSameVerdicts) {
  for (const bool arena : {true, false}) {
    ::setenv("ATREX_DEVICE_ARENA", arena ? "1" : "0", 1);
    const JudgeReads reads_as = arena ? JudgeReads::kDeviceArena : JudgeReads::kMemfd;
    const std::string reads = judge_reads_name(reads_as);
    auto ok = evaluate("rms_norm_correct.cu", {"0", "27"});
    ASSERT_EQ(ok.size(), 2u);
    for (const auto& r : ok) {
      EXPECT_EQ(r.status, EvalStatus::kOk) << reads << " shape " << r.shape_id << ": " << r.error;
      EXPECT_EQ(r.judge_reads, reads_as);
      std::printf("judge reads %s: shape %s ok, checks %.3f s\n", reads.c_str(),
                  r.shape_id.c_str(), r.phases_s.value("check", 0.0));
    }
    // A wrong result the judge finds (its range probe; a side-stream candidate is caught by
    // the child's own CUPTI check before any verdict of the judge).
    auto wrong = evaluate("rms_norm_fp16_accumulate.cu", {"0"}, "auto",
                          [](EvalSettings& s) { s.performance = false; });
    ASSERT_EQ(wrong.size(), 1u);
    EXPECT_EQ(wrong[0].status, EvalStatus::kWrongResult) << reads << ": " << wrong[0].error;
    EXPECT_NE(wrong[0].error.find("range probe"), std::string::npos) << wrong[0].error;
    EXPECT_EQ(wrong[0].judge_reads, reads_as);
    auto over = evaluate("rms_norm_guard_writes_out_of_bounds.cu", {"0"});
    ASSERT_EQ(over.size(), 1u);
    EXPECT_EQ(over[0].status, EvalStatus::kRejected) << reads << ": " << over[0].error;
    EXPECT_NE(over[0].error.find("past the end"), std::string::npos) << over[0].error;
  }
  ::unsetenv("ATREX_DEVICE_ARENA");
}

TEST_F(GpuGatesTest, IllegalAddressKillsOnlyItsChild) {
  // Without unseen shapes, whose crash would decide the task before its own shapes run.
  auto recs = evaluate("rms_norm_illegal_address.cu", {"15", "0"}, "auto",
                       [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kCrashed) << r.error;
    EXPECT_NE(r.error.find("illegal"), std::string::npos) << r.error;
  }
  // The runner (this process) is unharmed: a correct candidate still passes afterwards.
  auto ok = evaluate("rms_norm_correct.cu", {"15"});
  EXPECT_EQ(ok[0].status, EvalStatus::kOk) << ok[0].error;
}

// CUPTI kernel spans (timing_mode auto) time the kernel itself: on a tiny shape they must come out
// below both event-based methods, whose windows include the event and graph-node overhead.
TEST_F(GpuGatesTest, CuptiSpansTimeTheKernelWithoutHarnessOverhead) {
  auto cupti = evaluate("rms_norm_correct.cu", {"28"});
  auto graph = evaluate("rms_norm_correct.cu", {"28"}, "graph");
  auto eager = evaluate("rms_norm_correct.cu", {"28"}, "eager");
  for (const auto* r : {&cupti, &graph, &eager})
    ASSERT_EQ((*r)[0].status, EvalStatus::kOk) << (*r)[0].error;
  const auto& t = *cupti[0].timing;
  EXPECT_EQ(t.method, "cupti_kernel_span_l2_flush") << t.cupti_unavailable << t.cupti_fallback;
  EXPECT_EQ(eager[0].timing->method, "cuda_events_l2_flush");
  std::printf(
      "rms_norm shape 28: cupti %.3f us (events on the same calls %.3f us), graph %.3f us, eager "
      "%.3f us; kernels %s; "
      "records %s; %s\n",
      t.time_us_median, t.event_time_us_median.value_or(-1), graph[0].timing->time_us_median,
      eager[0].timing->time_us_median, to_json(t)["kernels"].dump().c_str(),
      t.cupti_records.dump().c_str(), t.cupti_fallback.c_str());
  EXPECT_LT(t.time_us_median, graph[0].timing->time_us_median);
  EXPECT_LT(t.time_us_median, eager[0].timing->time_us_median);
  // Its one kernel is its own: target-DSL share 1.
  ASSERT_TRUE(cupti[0].dsl_share.has_value());
  EXPECT_DOUBLE_EQ(*cupti[0].dsl_share, 1.0);
  ASSERT_EQ(t.kernels.size(), 1u);
  EXPECT_TRUE(t.kernels[0].own);
}

// A candidate replaying a cached answer when the first 256 bytes of its input repeat: the timed
// calls' spliced inputs make its answers stale (a re-check of a timed call, or the check of the
// last one), and the set of kernels its timed calls launch changes (CUPTI timing): either rejects.
TEST_F(GpuGatesTest, ReplayedCacheIsRejectedByTheKernelSetCheck) {
  auto cheat = evaluate("rms_norm_replays_cache.cu", {"0", "15"});
  for (const auto& r : cheat) {
    std::printf("replayed cache, shape %s: %s: %s\n", r.shape_id.c_str(),
                eval_status_name(r.status), r.error.c_str());
    EXPECT_EQ(r.status, EvalStatus::kWrongResult);
    EXPECT_TRUE(r.error.find("kernels launched differ") != std::string::npos ||
                r.error.find("re-check of timed call") != std::string::npos ||
                r.error.find("last timed call") != std::string::npos)
        << r.error;
  }
}

// Target-DSL attribution: a correct candidate whose GPU time is mostly a cuBLAS GEMM is reported
// with a small own-kernel share (the paper's fallback), not rejected.
TEST_F(GpuGatesTest, VendorLibraryKernelsAreAttributedAsFallback) {
  auto recs = evaluate("rms_norm_cublas_fallback.cu", {"15"});
  ASSERT_EQ(recs[0].status, EvalStatus::kOk) << recs[0].error;
  ASSERT_TRUE(recs[0].dsl_share.has_value()) << recs[0].timing->cupti_unavailable;
  std::printf("cuBLAS fallback: own-kernel share %.3f; kernels %s\n", *recs[0].dsl_share,
              to_json(*recs[0].timing)["kernels"].dump().c_str());
  EXPECT_LT(*recs[0].dsl_share, 0.5);
  bool vendor = false;
  for (const auto& k : recs[0].timing->kernels) vendor = vendor || !k.own;
  EXPECT_TRUE(vendor);
}

TEST_F(GpuGatesTest, WorkOnAnUnjoinedStreamIsRejected) {
  auto recs = evaluate("rms_norm_unjoined_stream.cu", {"0", "15"});
  for (const auto& r : recs) {
    EXPECT_NE(r.status, EvalStatus::kOk)
        << r.shape_id << " timed "
        << (r.timing ? r.timing->method + " " + std::to_string(r.timing->time_us_median) : "");
    std::printf("unjoined stream, shape %s: %s: %s\n", r.shape_id.c_str(),
                eval_status_name(r.status), r.error.c_str());
  }
}

TEST_F(GpuGatesTest, WorkLaunchedLaterFromAHostThreadIsRejected) {
  auto recs = evaluate("rms_norm_host_thread.cu", {"15"});
  EXPECT_NE(recs[0].status, EvalStatus::kOk);
  std::printf("host thread: %s: %s\n", eval_status_name(recs[0].status), recs[0].error.c_str());
}

// Real work outside the timed span (kernels/faults/arena_attacks/cupti_escape_side_stream.cu):
// a pacer kernel on the given stream is all a timed call's CUPTI span and event window hold,
// while the real kernel runs on a non-blocking stream, launched with the CUPTI id taken off the
// thread (ATTACK 1) or by a worker thread (ATTACK 2). The stray records are rejected; in eager
// timing (no CUPTI) the device-wide drain after each call sees the work a slow kernel left
// running. The honest twin (ATTACK 0) passes in both modes.
TEST_F(GpuGatesTest, WorkOutsideTheTimedSpanIsRejected) {
  struct Case {
    std::string attack, slow_us, mode, expect;
  };
  const std::vector<Case> cases = {
      {"1", "0", "auto", "device work outside the timed calls"},
      {"2", "0", "auto", "launched by a thread other than"},
      {"2", "2000", "eager", "device work outside the timed windows"},
      {"0", "0", "auto", ""},
      {"0", "2000", "eager", ""},
  };
  for (const auto& c : cases) {
    defines_ = {{"ATTACK", c.attack}, {"SLOW_US", c.slow_us}};
    auto recs = evaluate("arena_attacks/cupti_escape_side_stream.cu", {"0"}, c.mode);
    ASSERT_EQ(recs.size(), 1u);
    const auto& r = recs[0];
    std::printf(
        "side-stream attack %s slow %s %s: %s (%s) %s\n", c.attack.c_str(), c.slow_us.c_str(),
        c.mode.c_str(), eval_status_name(r.status),
        r.timing ? fmt::format("{} {:.1f} us", r.timing->method, r.timing->time_us_median).c_str()
                 : "-",
        r.error.c_str());
    if (c.expect.empty()) {
      EXPECT_EQ(r.status, EvalStatus::kOk) << r.error;
    } else {
      EXPECT_EQ(r.status, EvalStatus::kRejected) << r.error;
      EXPECT_NE(r.error.find(c.expect), std::string::npos) << r.error;
    }
  }
  defines_.clear();
}

TEST_F(GpuGatesTest, AllZeroOutputFails) {
  auto recs = evaluate("rms_norm_side_stream_wrong.cu", {"0"});
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << recs[0].error;
}

// The range probe on the GPU: a candidate computing in __half passes the usual seeds (fp16 has
// more mantissa than bf16) and fails once the probe's inputs push its row sums past 65504.
TEST_F(GpuGatesTest, HalfPrecisionCandidateFailsTheRangeProbe) {
  auto unprobed = evaluate("rms_norm_fp16_accumulate.cu", {"15", "0"}, "auto", [](EvalSettings& s) {
    s.range_probe = false;
    s.performance = false;
  });
  for (const auto& r : unprobed)
    EXPECT_EQ(r.status, EvalStatus::kOk) << "must pass the usual seeds: " << r.error;
  auto probed = evaluate("rms_norm_fp16_accumulate.cu", {"15", "0"}, "auto",
                         [](EvalSettings& s) { s.performance = false; });
  for (const auto& r : probed) {
    std::printf("fp16 candidate, shape %s: %s: %s\n", r.shape_id.c_str(),
                eval_status_name(r.status), r.error.c_str());
    EXPECT_EQ(r.status, EvalStatus::kWrongResult);
    EXPECT_NE(r.error.find("range probe (x scaled by 2^11"), std::string::npos) << r.error;
  }
  auto honest = evaluate("rms_norm_correct.cu", {"15"}, "auto",
                         [](EvalSettings& s) { s.performance = false; });
  EXPECT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
  EXPECT_EQ(honest[0].range_probe, "x scaled by 2^11");
}

// Ghost kernels: a kernel the candidate defines but no timed call launched is flagged in the
// record (unlaunched_kernels), and the candidate still passes; a candidate whose kernels all ran
// has the list, empty.
TEST_F(GpuGatesTest, KernelThatNeverRunsIsFlaggedNotRejected) {
  auto recs = evaluate("rms_norm_dead_kernel.cu", {"15", "0"});
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    ASSERT_EQ(r.status, EvalStatus::kOk) << r.error;
    ASSERT_TRUE(r.unlaunched_kernels)
        << "CUPTI did not trace: " << (r.timing ? r.timing->cupti_unavailable : "");
    ASSERT_EQ(r.unlaunched_kernels->size(), 1u);
    EXPECT_NE(r.unlaunched_kernels->front().find("rms_norm_wide_kernel<4>"), std::string::npos)
        << r.unlaunched_kernels->front();
    std::printf("ghost kernel, shape %s: %s\n", r.shape_id.c_str(),
                r.unlaunched_kernels->front().c_str());
  }
  auto honest = evaluate("rms_norm_correct.cu", {"15"});
  ASSERT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
  ASSERT_TRUE(honest[0].unlaunched_kernels);
  EXPECT_TRUE(honest[0].unlaunched_kernels->empty());
}

// The judge on the GPU (docs/evaluation.md "The judge"; sandbox_test.cpp has the cpu twins).
// The attack round's relay rewrites the child's verdict lines: its kernel computes nothing, the
// judge's verdict says so, and the task is tampering.
TEST_F(GpuGatesTest, RelayThatRewritesVerdictsMeetsTheJudge) {
  auto recs = evaluate("rms_norm_relay_rewrites_verdict.cu", {"15", "0"}, "auto",
                       [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kRejected) << r.error;
    EXPECT_EQ(r.error.rfind("tampering: ", 0), 0u) << r.error;
  }
}

// Honest outputs, forged timing: 50 forged samples against the judge's brackets (tampering);
// forged values with the child's own count on a slow shape: refuted by the judge's clock.
TEST_F(GpuGatesTest, ForgedTimingIsRejected) {
  auto recs = evaluate("rms_norm_relay_forges_timing.cu", {"15", "0"}, "auto",
                       [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kRejected) << r.error;
    EXPECT_NE(r.error.find("timed samples"), std::string::npos) << r.error;
  }
}

// A clock bent inside the child (cudaEventElapsedTime divided by 100 through the GOT) on a
// deliberately slow kernel (milliseconds a call): the event and graph timings it bends are
// refuted by the judge's clock; the twin with the same patch at the true rate passes, and so
// does it under CUPTI spans (which the patch does not reach).
TEST_F(GpuGatesTest, BentEventClockIsRefutedByTheJudgesClock) {
  for (const char* mode : {"eager", "graph"}) {
    auto recs = evaluate("rms_norm_slows_clock.cu", {"0"}, mode,
                         [](EvalSettings& s) { s.unseen_shapes = 0; });
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].status, EvalStatus::kRejected) << mode << ": " << recs[0].error;
    EXPECT_EQ(recs[0].error.rfind("timing refuted by the judge's clock", 0), 0u) << recs[0].error;
    EXPECT_FALSE(recs[0].s_j);
  }
  defines_ = {{"ATTACK_SLOWDOWN", "1"}};
  for (const char* mode : {"eager", "graph", "auto"}) {
    auto twin = evaluate("rms_norm_slows_clock.cu", {"0", "15"}, mode,
                         [](EvalSettings& s) { s.unseen_shapes = 0; });
    ASSERT_EQ(twin.size(), 2u);
    for (const auto& r : twin) EXPECT_EQ(r.status, EvalStatus::kOk) << mode << ": " << r.error;
  }
  defines_.clear();
  auto cupti = evaluate("rms_norm_slows_clock.cu", {"0"}, "auto",
                        [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(cupti.size(), 1u);
  EXPECT_EQ(cupti[0].status, EvalStatus::kOk) << cupti[0].error;
}

// Honest kernels of every size and kind under the judge's clock: tiny launch-bound shapes and a
// multi-kernel candidate (cuBLAS plus its own kernel), in every timing mode.
TEST_F(GpuGatesTest, HonestKernelsPassTheJudgesClockInEveryTimingMode) {
  for (const char* mode : {"auto", "graph", "eager"}) {
    auto recs = evaluate("rms_norm_correct.cu", {"15", "28", "0", "40"}, mode);
    ASSERT_EQ(recs.size(), 4u);
    for (const auto& r : recs) EXPECT_EQ(r.status, EvalStatus::kOk) << mode << " " << r.shape_id << ": " << r.error;
    auto multi = evaluate("rms_norm_cublas_fallback.cu", {"15", "0"}, mode);
    for (const auto& r : multi) EXPECT_EQ(r.status, EvalStatus::kOk) << mode << " " << r.shape_id << ": " << r.error;
  }
}

}  // namespace
}  // namespace atrex::runner
