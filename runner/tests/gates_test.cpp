// The three gates end to end on the cpu backend, through the real evaluation child processes:
// a correct candidate passes and is timed; each kind of wrong, crashing or hanging candidate
// becomes the right record status and the evaluation goes on.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/evaluator.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

class GatesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(suite) << suite.error().message;
    suite_ = new problems::Suite(std::move(*suite));
    auto profiles =
        problems::load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware"});
    ASSERT_TRUE(profiles);
    hardware_ = new problems::HardwareProfile(*problems::find_hardware_profile(*profiles, "H20"));
    cache_ = new fs::path(fs::temp_directory_path() /
                          ("atrex_gates_cache_" + std::to_string(::getpid())));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*cache_);
    delete suite_;
    delete hardware_;
    delete cache_;
  }

  EvaluatorOptions options() {
    EvaluatorOptions o;
    o.suite = suite_;
    o.hardware = hardware_override_ ? *hardware_override_ : *hardware_;
    o.cache_dir = *cache_;
    o.include_dir = ATREX_TEST_INCLUDE_DIR;
    o.child_dir = ATREX_TEST_BIN_DIR;
    o.seed = 1234;
    o.sandbox = sandbox_;
    return o;
  }

  std::vector<EvalRecord> evaluate(const std::string& file,
                                   std::vector<std::string> shapes = {"15", "5"},
                                   double shape_timeout_s = 60,
                                   const std::function<void(EvalSettings&)>& adjust = nullptr) {
    auto r = try_evaluate(file, std::move(shapes), shape_timeout_s, adjust);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : std::vector<EvalRecord>{};
  }

  // As evaluate(), the evaluator's own failure returned; `emitted` gets every record written.
  Result<std::vector<EvalRecord>> try_evaluate(
      const std::string& file, std::vector<std::string> shapes = {"15", "5"},
      double shape_timeout_s = 60, const std::function<void(EvalSettings&)>& adjust = nullptr,
      std::vector<EvalRecord>* emitted = nullptr) {
    EvalTask t;
    t.task_id = "test-" + file;
    t.operator_name = "rms_norm";
    t.shape_ids = std::move(shapes);
    t.candidate.source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / file);
    t.candidate.sha256 = sha256_hex(t.candidate.source);
    t.candidate.backend = Backend::kCpu;
    t.candidate.agent = "test";
    t.candidate.file_name = file;
    t.settings.min_iterations = 3;
    t.settings.max_iterations = 5;
    t.settings.min_time_s = 0;
    t.settings.shape_timeout_s = shape_timeout_s;
    if (adjust) adjust(t.settings);
    Evaluator ev(options());
    return ev.evaluate(t, [&](const EvalRecord& r) {
      if (emitted) emitted->push_back(r);
    });
  }

  SandboxMode sandbox_ = SandboxMode::kBwrap;
  std::optional<problems::HardwareProfile> hardware_override_;
  static problems::Suite* suite_;
  static problems::HardwareProfile* hardware_;
  static fs::path* cache_;
};

problems::Suite* GatesTest::suite_ = nullptr;
problems::HardwareProfile* GatesTest::hardware_ = nullptr;
fs::path* GatesTest::cache_ = nullptr;

TEST_F(GatesTest, CorrectCandidatePassesAllSeedsAndIsScored) {
  auto recs = evaluate("rms_norm_correct.cpp");
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.shape_id << ": " << r.error;
    EXPECT_EQ(r.seeds_passed, 5);
    ASSERT_TRUE(r.timing);
    EXPECT_GE(r.timing->n, 3);
    EXPECT_EQ(r.timing->samples_us.size(), static_cast<size_t>(r.timing->n));
    EXPECT_GT(r.timing->time_us_median, 0);
    EXPECT_GT(r.t_roofline_us, 0);
    ASSERT_TRUE(r.s_j);
    EXPECT_GT(*r.s_j, 0);
    EXPECT_LE(*r.s_j, 1);
    EXPECT_LT(r.max_rel_error, 2e-2) << "more than ~2 bf16 ulps from the reference";
    for (const char* phase : {"setup", "inputs", "candidate", "check", "timing"}) {
      EXPECT_TRUE(r.phases_s.contains(phase)) << phase << " missing from " << r.phases_s.dump();
    }
    EXPECT_LE(r.phases_s.value("timing", 0.0), r.wall_s);
  }
}

// The device arena (on by default, ATREX_DEVICE_ARENA unset) on a backend that shares no device
// memory (cpu): the socket pair is made and passed, the judge offers no arena, and both sides
// keep the memfd (a judge that waited for an answer that never comes, or a child that waited for
// an offer, would hang into the timeout).
TEST_F(GatesTest, TheDeviceArenaAskedForOnCpuIsDeclinedAndTheMemfdServes) {
  ::unsetenv("ATREX_DEVICE_ARENA");
  auto recs = evaluate("rms_norm_correct.cpp");
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.shape_id << ": " << r.error;
    EXPECT_EQ(r.judge_reads, JudgeReads::kMemfd);
    EXPECT_LT(r.wall_s, 60) << "the child or the judge waited on the arena's socket";
  }
}

// A judge that fails on its own (here its allocations, as on a card other evaluations filled:
// the H100 sweep of 2026-12-07) is the runner's failure: evaluate() fails with kUnavailable, the
// runner loop gives the task back, and no shape is recorded `crashed` against the candidate.
// (The first shape the judge enters is the task's first unseen shape.) The honest twin, with the
// judge whole, passes.
TEST_F(GatesTest, AJudgeThatFailsOnItsOwnGivesTheTaskBackAndChargesTheCandidateNothing) {
  ::setenv("ATREX_TEST_JUDGE_FAIL", "alloc", 1);
  std::vector<EvalRecord> emitted;
  auto failed = try_evaluate("rms_norm_correct.cpp", {"15", "5"}, 60, nullptr, &emitted);
  ::unsetenv("ATREX_TEST_JUDGE_FAIL");
  ASSERT_FALSE(failed) << "the judge's own failure became records";
  EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable) << failed.error().message;
  EXPECT_NE(failed.error().message.find("the judge failed on its own at shape unseen-0"),
            std::string::npos)
      << failed.error().message;
  EXPECT_NE(failed.error().message.find("not the candidate's"), std::string::npos);
  EXPECT_NE(failed.error().message.find("ATREX_TEST_JUDGE_FAIL=alloc"), std::string::npos)
      << failed.error().message;
  EXPECT_TRUE(emitted.empty()) << emitted.size() << " records, the first "
                               << eval_status_name(emitted.front().status);
  auto twin = evaluate("rms_norm_correct.cpp");
  ASSERT_EQ(twin.size(), 2u);
  for (const auto& r : twin) EXPECT_EQ(r.status, EvalStatus::kOk) << r.shape_id << ": " << r.error;
}

// Adaptive repetition: timing stops at min_iterations once the relative standard error is under
// target_rse, and runs on to max_iterations while it is not.
TEST_F(GatesTest, TimingRepeatsUntilTheRelativeStandardErrorTarget) {
  auto loose = evaluate("rms_norm_correct.cpp", {"15"}, 60, [](EvalSettings& s) {
    s.min_iterations = 4;
    s.max_iterations = 60;
    s.target_rse = 1.0;
  });
  ASSERT_EQ(loose[0].status, EvalStatus::kOk) << loose[0].error;
  EXPECT_EQ(loose[0].timing->n, 4);
  EXPECT_GT(loose[0].timing->relative_standard_error, 0);
  auto strict = evaluate("rms_norm_correct.cpp", {"15"}, 60, [](EvalSettings& s) {
    s.min_iterations = 4;
    s.max_iterations = 60;
    s.max_timing_s = 600;
    s.target_rse = 0;  // never reached with noisy samples
  });
  ASSERT_EQ(strict[0].status, EvalStatus::kOk) << strict[0].error;
  EXPECT_EQ(strict[0].timing->n, 60);
  EXPECT_EQ(strict[0].timing->method, "steady_clock_llc_flush");
  EXPECT_EQ(strict[0].timing->graph_fallback, "")
      << "the cpu backend has no graphs to fall back from";
}

// A stopping runner gives its task back between shapes instead of finishing it: the records of
// the shapes done stay, evaluate() returns kUnavailable. The stop comes while the first shape is
// evaluated (the honest twin prints a line on its first call; the child's log shows it), and
// reaches the child in the sandbox through its stop pipe (a signal would end bwrap).
TEST_F(GatesTest, StopFlagEndsTheTaskBetweenShapes) {
  std::atomic<bool> stop{false};
  EvaluatorOptions o = options();
  o.stop = &stop;
  o.work_dir = fs::temp_directory_path() / fmt::format("atrex-stop-test-{}", ::getpid());
  fs::remove_all(o.work_dir);
  Evaluator ev(o);
  EvalTask t;
  t.task_id = "test-stop";
  t.operator_name = "rms_norm";
  t.shape_ids = {"15", "5", "0"};
  t.candidate.source =
      *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / "rms_norm_sandbox_honest.cpp");
  t.candidate.sha256 = sha256_hex(t.candidate.source);
  t.candidate.backend = Backend::kCpu;
  t.settings.performance = false;
  t.settings.unseen_shapes = 0;
  std::atomic<bool> done_watching{false};
  std::thread watcher([&] {
    while (!done_watching && !stop) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(o.work_dir, ec)) {
        if (e.path().extension() != ".log") continue;
        auto text = read_text_file(e.path());
        if (text && text->find("honest candidate") != std::string::npos) stop = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::string> done;
  auto r = ev.evaluate(t, [&](const EvalRecord& rec) { done.push_back(rec.shape_id); });
  done_watching = true;
  watcher.join();
  fs::remove_all(o.work_dir);
  // The child finishes the shape in hand (the second, at most) and exits.
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  ASSERT_GE(done.size(), 1u);
  ASSERT_LE(done.size(), 2u);
  EXPECT_EQ(done[0], "15");
  EXPECT_NE(r.error().message.find(fmt::format("{} of 3 shapes", done.size())), std::string::npos)
      << r.error().message;
}

// Outputs are reset (poisoned) before every timed call: a candidate that skips its work when the
// output already holds the previous answer is timed doing the work. (With the reset removed this
// test fails: the cheat's skipped calls leave stale outputs that the checks after timing reject.)
TEST_F(GatesTest, KernelThatReusesItsPreviousOutputIsTimedDoingTheWork) {
  auto honest = evaluate("rms_norm_correct.cpp", {"30"});
  auto cheat = evaluate("rms_norm_reuses_output.cpp", {"30"});
  ASSERT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
  ASSERT_EQ(cheat[0].status, EvalStatus::kOk) << cheat[0].error;
  const double h = honest[0].timing->time_us_median, c = cheat[0].timing->time_us_median;
  std::printf("shape 30: honest %.1f us, output-reusing cheat %.1f us\n", h, c);
  EXPECT_GT(c, 0.3 * h) << "the cheat's timed calls skipped their work";
}

// Timed calls rotate over up to 8 input sets in the same buffers (spliced per call; the judge
// re-checks calls of its choosing), then two sets get a checked call: a candidate memoising its
// output by input address is caught with a stale answer.
TEST_F(GatesTest, KernelThatMemoisesByInputAddressIsRejected) {
  // One task per shape: within one child a memo kept from the previous shape would already fail
  // the first correctness seed, and this test is about the rotation during timing.
  // The range probe and the unseen shapes (more input sets in the same buffers) would catch it
  // before timing: off here.
  std::vector<EvalRecord> cheat;
  for (const char* shape : {"15", "5"}) {
    cheat.push_back(evaluate("rms_norm_memoises_by_address.cpp", {shape}, 60, [](EvalSettings& s) {
      s.range_probe = false;
      s.unseen_shapes = 0;
    })[0]);
  }
  for (const auto& r : cheat) {
    EXPECT_EQ(r.status, EvalStatus::kWrongResult)
        << r.shape_id << " passed with "
        << (r.timing ? std::to_string(r.timing->time_us_median) : "-") << " us";
    EXPECT_TRUE(r.error.find("last timed call") != std::string::npos ||
                r.error.find("re-check of timed call") != std::string::npos ||
                r.error.find("new inputs in the same buffers") != std::string::npos)
        << r.error;
  }
  auto honest = evaluate("rms_norm_correct.cpp", {"15"});
  EXPECT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
}

TEST_F(GatesTest, GraphTimingOnTheCpuBackendIsRejected) {
  auto recs = evaluate("rms_norm_correct.cpp", {"15"}, 60,
                       [](EvalSettings& s) { s.timing_mode = TimingMode::kGraph; });
  EXPECT_EQ(recs[0].status, EvalStatus::kRejected);
  EXPECT_NE(recs[0].error.find("no graph replay"), std::string::npos) << recs[0].error;
}

TEST_F(GatesTest, WrongKernelIsRejectedWithTheFirstBadElement) {
  auto recs = evaluate("rms_norm_wrong.cpp", {"15"});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult);
  EXPECT_NE(recs[0].error.find("out["), std::string::npos) << recs[0].error;
  EXPECT_FALSE(recs[0].s_j);
}

TEST_F(GatesTest, NanKernelIsRejected) {
  auto recs = evaluate("rms_norm_nan.cpp", {"15"});
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult);
  EXPECT_NE(recs[0].error.find("non-finite"), std::string::npos) << recs[0].error;
}

TEST_F(GatesTest, InputMutatingKernelIsRejected) {
  auto recs = evaluate("rms_norm_mutates_input.cpp", {"15"});
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult);
  EXPECT_NE(recs[0].error.find("modified its input x"), std::string::npos) << recs[0].error;
}

TEST_F(GatesTest, KernelThatNeverWritesItsOutputIsRejected) {
  auto recs = evaluate("rms_norm_no_write.cpp", {"15"});
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult);
  EXPECT_NE(recs[0].error.find("non-finite"), std::string::npos) << recs[0].error;
}

// S_j far above 1 cannot be a measurement (issue 14: a candidate that slowed the child's clock
// 100x got S_i = 1 from capped S_j). Seen from the evaluator, a bent clock and a profile whose
// ceilings are far too low look the same: an honest kernel measured far under T_roofline. It is
// `rejected` with no S_j (never capped into S_i); against a sane profile the same kernel is ok.
TEST_F(GatesTest, TimeFarUnderTheRooflineIsRejectedAsImpossibleNotCapped) {
  problems::HardwareProfile slow = *hardware_;
  slow.name = "slow-test-profile";
  slow.hbm_bytes_per_s = 1e6;  // 1 MB/s: T_roofline of shape 15 is seconds
  for (auto& [path, flops] : slow.p_peak_flops_per_s) flops = 1e6;
  hardware_override_ = slow;
  auto recs = evaluate("rms_norm_correct.cpp", {"15"});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kRejected) << recs[0].error;
  EXPECT_NE(recs[0].error.find("impossible speed"), std::string::npos) << recs[0].error;
  EXPECT_FALSE(recs[0].s_j.has_value());
  hardware_override_.reset();
  auto honest = evaluate("rms_norm_correct.cpp", {"15"});
  ASSERT_EQ(honest.size(), 1u);
  EXPECT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
  EXPECT_TRUE(honest[0].s_j.has_value());
}

TEST_F(GatesTest, KernelThatStopsWorkingWhenTimedIsRejected) {
  // It counts its calls: without the range probe's and the unseen shapes' calls, its last
  // honest call is the last correctness seed's.
  auto recs = evaluate("rms_norm_timing_cheat.cpp", {"15"}, 60, [](EvalSettings& s) {
    s.range_probe = false;
    s.unseen_shapes = 0;
  });
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult);
  // Caught on a timed call the judge re-checks, or on the outputs of the last timed call
  // (before the checks after timing).
  EXPECT_TRUE(recs[0].error.find("re-check of timed call") != std::string::npos ||
              recs[0].error.find("last timed call") != std::string::npos)
      << recs[0].error;
}

TEST_F(GatesTest, SegfaultIsRecordedAsCrashedAndTheNextShapeStillRuns) {
  // Without unseen shapes, whose crash would decide the task before its own shapes run.
  auto recs = evaluate("rms_norm_segfault.cpp", {"15", "5"}, 60,
                       [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kCrashed);
    EXPECT_NE(r.error.find("SIGSEGV"), std::string::npos) << r.error;
  }
}

TEST_F(GatesTest, HangIsRecordedAsTimeout) {
  auto recs =
      evaluate("rms_norm_hang.cpp", {"15"}, 2.0, [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kTimeout);
  EXPECT_LT(recs[0].wall_s, 20.0);
}

// One child evaluates a task's shapes in order; a hang costs only its shape's limit, and a
// fresh child takes the shapes after it.
TEST_F(GatesTest, OneChildPerTaskAndAFreshOneAfterATimeout) {
  const fs::path pid_log = fs::temp_directory_path() / fmt::format("atrex-pids-{}.txt", ::getpid());
  fs::remove(pid_log);
  // The candidate logs its pid into the host's temp folder: without the sandbox (inside, every
  // child is pid 2 of its own namespace and /tmp is its own).
  sandbox_ = SandboxMode::kNone;
  ::setenv("ATREX_TEST_PID_LOG", pid_log.c_str(), 1);
  auto recs = evaluate("rms_norm_hangs_on_one_shape.cpp", {"15", "41", "5", "46"}, 3.0,
                       [](EvalSettings& s) { s.performance = false; });
  ::unsetenv("ATREX_TEST_PID_LOG");
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].status, EvalStatus::kOk) << recs[0].error;
  EXPECT_EQ(recs[1].status, EvalStatus::kOk) << recs[1].error;
  EXPECT_EQ(recs[2].status, EvalStatus::kTimeout) << recs[2].error;
  EXPECT_EQ(recs[3].status, EvalStatus::kOk) << recs[3].error;
  EXPECT_LT(recs[2].wall_s, 10.0);
  std::vector<std::string> pids;
  std::ifstream in(pid_log);
  for (std::string line; std::getline(in, line);) pids.push_back(line);
  fs::remove(pid_log);
  ASSERT_EQ(pids.size(), 2u)
      << "expected one child for shapes 15, 41 and 5 and a fresh one for shape 46";
  EXPECT_NE(pids[0], pids[1]);
}

TEST_F(GatesTest, NonZeroReturnCarriesTheCandidatesMessage) {
  auto recs = evaluate("rms_norm_returns_error.cpp", {"15"});
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult);
  EXPECT_NE(recs[0].error.find("returned 7: unsupported hidden size"), std::string::npos)
      << recs[0].error;
}

TEST_F(GatesTest, MissingEntryPointIsRejected) {
  auto recs = evaluate("rms_norm_missing_entry.cpp", {"15"});
  EXPECT_EQ(recs[0].status, EvalStatus::kRejected);
  EXPECT_NE(recs[0].error.find("atrex_candidate_run"), std::string::npos);
}

TEST_F(GatesTest, CompileErrorIsRecordedForEveryShape) {
  auto recs = evaluate("rms_norm_syntax_error.cpp", {"15", "5"});
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kCompileError);
    EXPECT_NE(r.error.find("rms_norm_syntax_error.cpp"), std::string::npos);
  }
}

TEST_F(GatesTest, CudaCandidateOnARunnerWithoutGpuIsRejectedNotCrashed) {
  if (probe_environment().has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  EvalTask t;
  t.task_id = "cuda-no-gpu";
  t.operator_name = "rms_norm";
  t.shape_ids = {"15"};
  t.candidate.source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / "rms_norm_correct.cu");
  t.candidate.backend = Backend::kCuda;
  t.candidate.agent = "test";
  Evaluator ev(options());
  auto r = ev.evaluate(t);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)[0].status, EvalStatus::kRejected);
}

TEST_F(GatesTest, UnknownShapeIsAnInputError) {
  EvalTask t;
  t.operator_name = "rms_norm";
  t.shape_ids = {"999"};
  t.candidate.backend = Backend::kCpu;
  Evaluator ev(options());
  auto r = ev.evaluate(t);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace atrex::runner
