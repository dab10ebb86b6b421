// The third attack round on the cpu backend (branch attack-round-3): attacks written by a fresh
// attacker against the evaluator, each with its honest twin (kernels/faults/*.cpp). The ones the
// evaluator defends are plain tests; the ones that succeeded are DISABLED_, each saying what it
// got, so that enabling it is the check of a fix. Numbers below: the loaded 2-core development
// VM, RelWithDebInfo build, hardware profile H20, `atrex eval` defaults unless said.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/evaluator.h"
#include "sandbox/eval_sandbox.h"

namespace atrex::runner {
namespace {

// A shape whose calls lie well past the cpu judge's latency allowance for checked brackets
// (20 ms, timing_check.h), so that a bent or forged timing is refuted by the judge's clock:
// rms_norm shape 40 (20538 x 2048 bf16), ~36 ms a call of the fault candidates' scalar kernel on
// the 2-core VM. Shape 3 (~14 ms) used to clear it only with the harness's digest of the outputs
// inside the bracket, which the judge's own read at the done has replaced.
constexpr const char* kLongCallShape = "40";
namespace fs = std::filesystem;

class AttackRound3 : public ::testing::Test {
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
                          ("atrex_attack3_cache_" + std::to_string(::getpid())));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*cache_);
    delete suite_;
    delete hardware_;
    delete cache_;
  }
  void SetUp() override {
    auto ready = sandbox_ready(SandboxMode::kBwrap, ATREX_TEST_BIN_DIR);
    ASSERT_TRUE(ready) << ready.error().message;
  }

  struct Run {
    std::vector<std::string> shapes = {"15"};
    std::map<std::string, std::string> defines;  // "#define NAME old" -> new value
    int min_iterations = 3;
    int max_iterations = 5;
    int unseen_shapes = 0;
    SandboxMode sandbox = SandboxMode::kBwrap;
    double shape_timeout_s = 120;
    int seeds = 2;
  };

  std::vector<EvalRecord> evaluate_unseen(const std::string& file, Run run) {
    run.unseen_shapes = 2;
    return evaluate(file, run);
  }

  std::vector<EvalRecord> evaluate(const std::string& file, const Run& run) {
    std::string source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / file);
    for (const auto& [name, value] : run.defines) {
      const std::string key = "#define " + name + " ";
      const auto at = source.find(key);
      EXPECT_NE(at, std::string::npos) << name;
      if (at == std::string::npos) continue;
      const auto eol = source.find('\n', at);
      source.replace(at, eol - at, key + value);
    }
    EvalTask t;
    t.task_id = "attack3-" + file;
    t.operator_name = "rms_norm";
    t.shape_ids = run.shapes;
    t.candidate.source = source;
    t.candidate.sha256 = sha256_hex(source);
    t.candidate.backend = Backend::kCpu;
    t.candidate.agent = "test";
    t.candidate.file_name = file;
    t.settings.seeds = run.seeds;
    t.settings.min_iterations = run.min_iterations;
    t.settings.max_iterations = run.max_iterations;
    t.settings.min_time_s = 0;
    t.settings.shape_timeout_s = run.shape_timeout_s;
    t.settings.unseen_shapes = run.unseen_shapes;
    EvaluatorOptions o;
    o.suite = suite_;
    o.hardware = *hardware_;
    o.cache_dir = *cache_;
    o.include_dir = ATREX_TEST_INCLUDE_DIR;
    o.child_dir = ATREX_TEST_BIN_DIR;
    o.seed = 1234;
    o.sandbox = run.sandbox;
    Evaluator ev(o);
    auto r = ev.evaluate(t);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : std::vector<EvalRecord>{};
  }

  // The record in one line, control characters shown as \xNN (the terminal attack's error
  // would act on the terminal of whoever reads the test's output).
  static std::string describe(const EvalRecord& r) {
    std::string error;
    for (char c : r.error) {
      const auto u = static_cast<unsigned char>(c);
      error += u < 0x20 || u == 0x7f ? fmt::format("\\x{:02x}", u) : std::string(1, c);
    }
    return fmt::format("{} {} (median {} us, n {}, S_j {})", r.shape_id, eval_status_name(r.status),
                       r.timing ? r.timing->time_us_median : -1.0, r.timing ? r.timing->n : 0,
                       r.s_j ? *r.s_j : -1.0) +
           (error.empty() ? "" : ": " + error);
  }

  static problems::Suite* suite_;
  static problems::HardwareProfile* hardware_;
  static fs::path* cache_;
};

problems::Suite* AttackRound3::suite_ = nullptr;
problems::HardwareProfile* AttackRound3::hardware_ = nullptr;
fs::path* AttackRound3::cache_ = nullptr;

// SUCCEEDED in attack round 3, FIXED since (a done claiming other than 1 call, or on GPU the graph
// replay's batch, is tampering: judge.cpp call_end); what the attack got before: every bracket's done said how many samples it holds, the judge took
// 1..100000 on cpu, and the runner only checks that the child's sample count is the brackets'
// sum. Relays on fd 6 (every call_end claims 1000 calls) and fd 4 (each sample / 100, repeated
// 1000 times) divide each checked bracket's bound by 1000 (and subtract 1000 digest lower bounds:
// 0). Got on shape 3 (`atrex eval`, 5 seeds, defaults): `ok`, median 158.3 us, S_j 0.1048;
// the same relays claiming 1 call per bracket (the control below): `rejected: timing refuted by
// the judge's clock`; the twin: `ok`, 14827 us, S_j 0.0011. Bent 850x instead, just above the
// H20 roofline: shape 0 `ok`, 2.72 us, S_j 0.94 (twin 0.0011). Fix: timing_check / judge.cpp:
// on cpu (no graph replay) a bracket holds exactly one call (refuse calls != 1 as tampering);
// where graph replays batch, the judge knows the batch size from its own request
// (clamp(min_iterations, 1, 50)) and should take that, not the child's number; and the runner
// should recompute the timing summary from samples_us instead of taking the child's median/p75.
TEST_F(AttackRound3, InflatedBracketCallsHideABentClock) {
  auto recs = evaluate("rms_norm_inflates_bracket_calls.cpp", {.shapes = {kLongCallShape}});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_NE(recs[0].status, EvalStatus::kOk) << describe(recs[0]);
  EXPECT_FALSE(recs[0].s_j) << describe(recs[0]);
  // The control: the same bent samples, one call per bracket, is refuted today.
  auto control = evaluate("rms_norm_inflates_bracket_calls.cpp",
                          {.shapes = {kLongCallShape}, .defines = {{"ATTACK_CALLS", "1"}}});
  ASSERT_EQ(control.size(), 1u);
  EXPECT_EQ(control[0].status, EvalStatus::kRejected) << describe(control[0]);
  EXPECT_EQ(control[0].error.rfind("timing refuted by the judge's clock", 0), 0u)
      << describe(control[0]);
  auto twin = evaluate("rms_norm_inflates_bracket_calls.cpp",
                       {.shapes = {kLongCallShape},
                        .defines = {{"ATTACK_CALLS", "1"}, {"ATTACK_SLOWDOWN", "1"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
}

// SUCCEEDED against the re-check cap (the window-splice attack of 2026-12-06), FIXED since: the
// judge re-checked at most 8 timed calls on cpu, and the candidate counts them (a hook on the
// child's read sees every reply): after the 8th, every timed call but the predictable last one
// skipped its work, shape 0 `ok` at 112 us (twin 2334 us, S_j 20x). Now the judge keeps
// re-checking at 1/16 per call after the first 8, with no cap: the skipped calls are compared.
TEST_F(AttackRound3, TimedCallsCannotSkipTheirWorkAfterTheLastRecheck) {
  auto recs = evaluate("rms_norm_skips_after_recheck_cap.cpp",
                       {.shapes = {"0"}, .min_iterations = 10, .max_iterations = 200});
  auto twin = evaluate("rms_norm_skips_after_recheck_cap.cpp",
                       {.shapes = {"0"},
                        .defines = {{"ATTACK", "0"}},
                        .min_iterations = 10,
                        .max_iterations = 200});
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_EQ(twin.size(), 1u);
  ASSERT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
  ASSERT_TRUE(twin[0].timing);
  const bool refused = recs[0].status != EvalStatus::kOk;
  const bool no_faster = recs[0].timing &&
                         recs[0].timing->time_us_median > 0.6 * twin[0].timing->time_us_median;
  EXPECT_TRUE(refused || no_faster) << "attack: " << describe(recs[0])
                                    << "; twin: " << describe(twin[0]);
}

// SUCCEEDED ONCE in attack round 3, FIXED since (timing_check.h kStartLatencyFactor): the
// judge's latency allowance was max(20 ms, twice the median of 15 ping round trips measured at
// timing_begin), on a host the candidate shares, at a moment the candidate sees coming. The same
// relay on fd 6 (one call per bracket) sets N busy threads spinning before it hands on
// timing_begin and parks them at the first call_begin. Once (256 threads, while the lead's build
// also loaded the VM) the judge measured 152 ms, the bound on shape 3 fell to 0 and samples bent
// 100x passed: `ok`, median 163.3 us, S_j 0.1016 (twin 0.0011); in five later tries it measured
// 34 us - 18 ms, under the 20 ms floor. Now the probe at timing_begin counts only up to 4x the
// one the judge takes at its start, before the runner spawns the candidate's child (the runner
// waits for those pings): spinning on cue no longer widens the allowance, whatever the host's
// scheduler does with the spinners.
TEST_F(AttackRound3, LoadDuringTheJudgesCalibrationWidensItsAllowance) {
  // With 256 spinners the attack's evaluation is slow (on kLongCallShape 150-400 s two tests
  // at a time, past its 120 s limit). Shape 3 with each call computed three times over (~40 ms
  // a call) keeps the call past the allowance at 40% of the bytes; the whole test still took
  // 370 s two at a time (145 s on average before, one pass on shape 3), so the attack's
  // evaluation gets 600 s (ctest's limit is 900 s a test).
  auto recs = evaluate(
      "rms_norm_inflates_bracket_calls.cpp",
      {.shapes = {"3"},
       .defines = {{"ATTACK_CALLS", "1"}, {"ATTACK_SPINNERS", "256"}, {"ATTACK_PASSES", "3"}},
       .shape_timeout_s = 600});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kRejected) << describe(recs[0]);
  EXPECT_EQ(recs[0].error.rfind("timing refuted by the judge's clock", 0), 0u) << describe(recs[0]);
  auto twin = evaluate(
      "rms_norm_inflates_bracket_calls.cpp",
      {.shapes = {"3"},
       .defines = {{"ATTACK_CALLS", "1"}, {"ATTACK_SLOWDOWN", "1"}, {"ATTACK_PASSES", "3"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
}

// SUCCEEDED in attack round 3, FIXED since (the compiler runs in a sandbox of its own with limits:
// runner/src/sandbox/compile_sandbox.h); what the attack got before: Gate 1 ran the compiler outside the sandbox, with the runner's
// user, environment and file system and no limits (runner/src/compile.cpp). `.incbin` puts the
// suite's roofline.json and metadata.json into the shared object; the candidate reads them in
// the sandbox and hands them out through its error: shape 3 `wrong_result`, "hidden
// roofline.json bytes=14655 shape=3 sol_ms_H20=0.016589312 metadata.json bytes=16740
// description=(vLLM), RMSNorm, tokens=16200 hidden=1024"; as root (as here) any file of the
// host is as near. ATTACK_FILL_MIB 80: an 84 MB object in the compile cache (past the 64 MiB
// RLIMIT_FSIZE of every evaluation child; nothing bounds the compiler's disk, memory or CPU but
// the compile timeout). Fix: compile in a sandbox of its own (bwrap: /usr and the include
// folder read-only, the source alone, a scratch tmpfs for the output copied back; no /proc/self/cwd
// of the runner), a cleaned environment (clean_child_environment), ResourceLimits
// (RLIMIT_FSIZE, RLIMIT_AS, RLIMIT_CPU) and the children's cgroup.
TEST_F(AttackRound3, TheCompilerCannotReadTheHostsFiles) {
  const std::string suite = "\"" + fs::absolute(ATREX_TEST_SUITE_DIR).string() + "\"";
  auto recs = evaluate("rms_norm_compile_time_reads_host.cpp",
                       {.shapes = {"3"}, .defines = {{"ATREX_ATTACK_SUITE", suite}}});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kCompileError) << describe(recs[0]);
  EXPECT_EQ(recs[0].error.find("sol_ms_H20=0.0"), std::string::npos) << describe(recs[0]);
  auto fill = evaluate("rms_norm_compile_time_reads_host.cpp",
                       {.shapes = {"15"},
                        .defines = {{"ATTACK_READ", "0"}, {"ATTACK_FILL_MIB", "80"}}});
  ASSERT_EQ(fill.size(), 1u);
  EXPECT_EQ(fill[0].status, EvalStatus::kCompileError)
      << "an 80 MiB object was written by the compiler: " << describe(fill[0]);
  auto twin = evaluate("rms_norm_compile_time_reads_host.cpp",
                       {.shapes = {"3"}, .defines = {{"ATTACK_READ", "0"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
}

// SUCCEEDS (attack round 3; the "precompute and patch" open row, made concrete): the candidate
// redirects memcpy and memset in the child executable's GOT, learns each rotation set's pristine
// source from the harness's copy, replaces the poisoning before each timed call with the cached
// answer of that set (outside the timed window and the judge's bracket) and, in the call, patches
// the <= 2 rows and <= 64 weight columns the go's splice moved. Every check passes. Got
// (`atrex eval`, 5 seeds, H20): shape 3 `ok` 1281 us, S_j 0.0129 (twin 15725 us, 0.0011); shape 0
// `ok` 174 us (twin 2390 us). With the measured host-cpu profile the unpadded patch is under the
// host's DRAM roofline and is `rejected: impossible speed`; padded (ATTACK_PAD 1.3): shape 3 `ok`
// S_j 0.67, shape 0 `ok` S_j 1.0 (twin 0.139, 0.145). Fix: nothing the harness does in the
// candidate's process after the candidate is loaded can be trusted (its libc calls are the
// candidate's); the work a timed call must do has to be fixed inside the bracket by data the
// candidate cannot anticipate: e.g. the go names the rotation set and the splice, the set is
// copied and spliced after the go by code the candidate cannot hook (a static, non-PLT copy in
// the harness, or the inputs written into the shared memfd by the judge and mapped read-only),
// and the splice touches every row (a per-row permutation or a fresh draw), so that a patch costs
// a full pass; the poisoning before each call likewise without libc (or checked by the judge:
// the digest of the poisoned outputs sent with the call_begin).
TEST_F(AttackRound3, HarnessHooksCannotPatchAPrecomputedAnswer) {
  auto recs = evaluate("rms_norm_patches_precomputed.cpp", {.shapes = {"3"}});
  auto twin = evaluate("rms_norm_patches_precomputed.cpp",
                       {.shapes = {"3"}, .defines = {{"ATTACK_PATCH", "0"}}});
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_EQ(twin.size(), 1u);
  ASSERT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
  ASSERT_TRUE(twin[0].timing);
  const bool refused = recs[0].status != EvalStatus::kOk;
  const bool no_faster = recs[0].timing && twin[0].timing &&
                         recs[0].timing->time_us_median > 0.5 * twin[0].timing->time_us_median;
  EXPECT_TRUE(refused || no_faster) << "attack: " << describe(recs[0])
                                    << "; twin: " << describe(twin[0]);
}

// SUCCEEDED in attack round 3, FIXED since (every record's error goes through printable_text,
// common/text.h; newlines and tabs stay); what the attack got before: `atrex eval` printed the first line of a record's error as the
// shape's note as it is: a candidate's error message with "\r", ESC[2K and a row of its own
// ("ok", S_j 1.0000) overwrites its `wrong_result` row on a terminal, and ESC[8m conceals the
// S_i line after it. The record says `wrong_result`, its error holds the raw control
// characters: "the candidate returned 1: \r\x1b[2K   15  ok   3.104 ... 1.0000\x1b[8m". Fix: replace
// control characters (C0 but \t, DEL, C1; at least ESC and \r) where the candidate's message
// enters the record (ShapeRun::returned_error, and the runner when it takes the child's error),
// and in cmd_eval.cpp note_of / every terminal printer of record text.
TEST_F(AttackRound3, ControlCharactersOfTheCandidateNeverReachTheRecord) {
  auto recs = evaluate("rms_norm_terminal_escape_in_error.cpp", {.shapes = {"15", "28"}});
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kWrongResult) << describe(r);
    // Line breaks and tabs stay (compiler logs are multi-line; `atrex eval` prints one line).
    for (char c : r.error) {
      const auto u = static_cast<unsigned char>(c);
      const bool control = (u < 0x20 && c != '\n' && c != '\t') || u == 0x7f;
      EXPECT_FALSE(control) << "control character " << static_cast<int>(u)
                            << " in the record's error: " << describe(r);
      if (control) break;
    }
  }
  auto twin = evaluate("rms_norm_terminal_escape_in_error.cpp",
                       {.shapes = {"15", "28"}, .defines = {{"ATTACK_ESCAPE", "0"}}});
  ASSERT_EQ(twin.size(), 2u);
  for (const auto& r : twin) EXPECT_EQ(r.status, EvalStatus::kOk) << describe(r);
}

// SUCCEEDED in attack round 3, FIXED since (UnseenCheck::absorb counts a rejection as a failure);
// what the attack got before: a `rejected` on an unseen shape decided nothing
// (unseen_check.cpp absorb counts only wrong_result, crashed and timeout), and a candidate
// earns `rejected` at will with an out-of-bounds write into the guard after its output. The
// hot-shapes-only cheat (no normalisation at row counts the suite does not hold) writes one
// element past its output there: both unseen shapes `rejected`, the task's shapes 15 and 5 `ok`
// (S_j 0.0001, 0.0010); the control without the write: every shape `wrong_result` ("fails on an
// unseen shape"); the twin: `ok`. Fix: in UnseenCheck::absorb a rejection of the candidate's
// own making (an out-of-bounds write, a missing entry point, anything but the runner's
// "backend unavailable") fails the task like a wrong_result; only verdicts that say nothing about
// the candidate (this runner cannot run the backend) stay neutral.
TEST_F(AttackRound3, ARejectedUnseenShapeFailsTheTask) {
  Run run{.shapes = {"15", "5"}};
  auto recs = evaluate_unseen("rms_norm_hot_shapes_dodges_unseen.cpp", run);
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_NE(r.status, EvalStatus::kOk) << describe(r);
    EXPECT_FALSE(r.s_j) << describe(r);
  }
  run.defines = {{"ATTACK_DODGE", "0"}};
  auto control = evaluate_unseen("rms_norm_hot_shapes_dodges_unseen.cpp", run);
  ASSERT_EQ(control.size(), 2u);
  for (const auto& r : control) {
    EXPECT_EQ(r.status, EvalStatus::kWrongResult) << describe(r);
    EXPECT_NE(r.error.find("fails on an unseen shape"), std::string::npos) << describe(r);
  }
  run.defines = {{"ATTACK_DODGE", "0"}, {"ATTACK_HOT_ONLY", "0"}};
  auto twin = evaluate_unseen("rms_norm_hot_shapes_dodges_unseen.cpp", run);
  ASSERT_EQ(twin.size(), 2u);
  for (const auto& r : twin) EXPECT_EQ(r.status, EvalStatus::kOk) << describe(r);
}

// DEFENDED: work moved out of the timed sample past the call's return. The candidate hooks
// write in the child's GOT (to see call_begin and the done); a timed call returns at once and
// the hook computes its outputs before the done goes out. The judge's read at the done, the
// re-checks and the last timed call's check all pass, the sample is ~2 us; but the judge's
// bracket holds the hook's work, so the claim is refuted on kLongCallShape. Below
// the cpu allowance (~25 ms) it is the documented open row: with ATTACK_MIN_US 3 it passed shape
// 0 at S_j 0.54 (twin 0.001) in attack round 3 (then through the digest, since removed). The twin
// (ATTACK_DEFER 0, the same hook) passes.
TEST_F(AttackRound3, WorkMovedPastTheReturnIsRefutedByTheJudgesClock) {
  auto recs = evaluate("rms_norm_works_before_the_done.cpp", {.shapes = {kLongCallShape}});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kRejected) << describe(recs[0]);
  EXPECT_EQ(recs[0].error.rfind("timing refuted by the judge's clock", 0), 0u) << describe(recs[0]);
  EXPECT_FALSE(recs[0].s_j);
  auto twin =
      evaluate("rms_norm_works_before_the_done.cpp",
               {.shapes = {kLongCallShape}, .defines = {{"ATTACK_DEFER", "0"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
  EXPECT_TRUE(twin[0].s_j);
}

// DEFENDED (attack round 7, 2026-12-07): a correct kernel that writes its result back into its
// input x on the calls the judge was not expected to look at. When only a shape's first check and
// the first after its timed calls carried the inputs, both modes passed: 1 (every checked call
// but the first, before timing) and 2 (every timed call; the attacker's version spared the
// predictable last one). Now the judge asks for the inputs after a check with probability 1/4
// and takes them with every re-checked timed call: mode 1 meets 30 such draws over these six
// shapes (5 seeds: 4 later seeds and the range probe each), so it passes on all six with
// probability (3/4)^30 = 2e-4 (on one shape with (3/4)^5: the operator is then not correct);
// mode 2 is caught on every shape (re-checks, and the first check after timing). The twin
// (mode 0) passes.
TEST_F(AttackRound3, AKernelThatWritesItsInputsIsCaughtOnTheChecksTheJudgeDraws) {
  const std::vector<std::string> shapes = {"15", "41", "46", "47", "28", "32"};
  for (const char* mode : {"1", "2"}) {
    auto recs = evaluate("rms_norm_writes_its_inputs.cpp",
                         {.shapes = shapes, .defines = {{"ATTACK_MODE", mode}}, .seeds = 5});
    ASSERT_EQ(recs.size(), shapes.size()) << "ATTACK_MODE " << mode;
    // Mode 2 writes in the last timed call too: every shape fails at the first check after
    // timing. Mode 1 meets 5 draws a shape: a shape passes with probability (3/4)^5, all six 2e-4.
    int caught = 0;
    for (const auto& r : recs) {
      if (std::string(mode) == "2") {
        EXPECT_NE(r.status, EvalStatus::kOk) << "ATTACK_MODE 2: " << describe(r);
      }
      caught += r.status == EvalStatus::kWrongResult &&
                r.error.find("modified its input x") != std::string::npos;
    }
    EXPECT_GE(caught, 1) << "ATTACK_MODE " << mode;
  }
  auto twin = evaluate("rms_norm_writes_its_inputs.cpp",
                       {.shapes = shapes, .defines = {{"ATTACK_MODE", "0"}}, .seeds = 5});
  ASSERT_EQ(twin.size(), shapes.size());
  for (const auto& r : twin) EXPECT_EQ(r.status, EvalStatus::kOk) << describe(r);
}

// CONTAINED: a correct candidate whose process parks itself at exit (a static destructor that
// never returns) once its last record is written. The runner used to wait out the whole shape
// limit for it; now the child is killed kChildExitGrace (10 s) after its last record and the
// record stands. The limit is 300 s here: a runner that waits for it fails the bound. The twin
// (ATTACK_HANG 0) passes the same way.
TEST_F(AttackRound3, AChildParkedAtExitKeepsItsRecordAndFreesTheSlot) {
  for (const char* hang : {"1", "0"}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto recs = evaluate("rms_norm_hangs_at_exit.cpp", {.shapes = {"15"},
                                                        .defines = {{"ATTACK_HANG", hang}},
                                                        .shape_timeout_s = 300});
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(recs.size(), 1u) << "ATTACK_HANG " << hang;
    EXPECT_EQ(recs[0].status, EvalStatus::kOk) << "ATTACK_HANG " << hang << ": " << describe(recs[0]);
    EXPECT_TRUE(recs[0].s_j) << "ATTACK_HANG " << hang;
    EXPECT_LT(wall_s, 150) << "ATTACK_HANG " << hang << ": the runner waited for the shape limit";
  }
}

// DEFENDED (attack round 6, 2026-12-07): the round-5 race against the judge's own read of the
// outputs at the done. A timed call returns after 20% of its rows; two spinning threads finish
// the rest while the done travels and the judge reads 4096 lines it draws then. The attacker's
// runs: `wrong_result` on both shapes every time (2917-3273 of the lines differed); the twin
// (ATTACK_FRAC 1.0, the same threads) passes. Which check names the failure depends on the
// threads' speed: finished by the re-check, the outputs differ from the judge's read at the done;
// starved (CI's 2 loaded cores, stop 29), they are still unfinished when the re-check compares
// them with the reference. Both are the race failing. The read at the done is pinned on its own,
// deterministically, by JudgeBracket.*FinishedAfterTheDoneFailTheCheck*.
TEST_F(AttackRound3, ARaceWithTheJudgesReadAtTheDoneFails) {
  auto recs = evaluate("rms_norm_races_the_done_read.cpp", {.shapes = {"0"}});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << describe(recs[0]);
  const std::string& e = recs[0].error;
  EXPECT_TRUE(e.find("not the ones the timed call had when its done reached the judge") !=
                  std::string::npos ||
              e.find("re-check of timed call") != std::string::npos ||
              e.find("last timed call") != std::string::npos)
      << describe(recs[0]);
  auto twin = evaluate("rms_norm_races_the_done_read.cpp",
                       {.shapes = {"0"}, .defines = {{"ATTACK_FRAC", "1.0"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
}

// DEFENDED: the sandbox seen from inside, looking for a way out: no descriptor beyond 0-2 and
// the protocol's 4-8, nothing under /proc (outside the per-process folders and /proc/sys) that
// opens for writing but the PSI trigger files, nothing under /sys/devices/system/cpu, bwrap's
// init holding only /dev/null, the child's log and an eventfd, no capabilities, no_new_privs,
// seccomp in filter mode. Without the sandbox, where the test itself may (root, /proc/irq
// writable), /proc/irq and /proc/bus open for writing (so the test sees the sandbox go). The honest twin passes.
TEST_F(AttackRound3, SandboxHasNoWayOut) {
  auto recs = evaluate("rms_norm_sandbox_inventory.cpp", {});
  ASSERT_EQ(recs.size(), 1u);
  const std::string& report = recs[0].error;
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << describe(recs[0]);
  EXPECT_NE(report.find("fds=[ ]"), std::string::npos) << report;
  EXPECT_NE(report.find("sys_writable=[ ]"), std::string::npos) << report;
  EXPECT_NE(report.find("caps=0000000000000000 nnp=1 seccomp=2"), std::string::npos) << report;
  auto list = [&](const std::string& name) {
    const auto at = report.find(name + "=[");
    const auto end = report.find(" ]", at);  // items may hold brackets (anon_inode:[eventfd])
    std::vector<std::string> items;
    if (at == std::string::npos || end == std::string::npos) return items;
    std::istringstream words(report.substr(at + name.size() + 2, end - (at + name.size() + 2)));
    for (std::string w; words >> w;) items.push_back(w);
    return items;
  };
  for (const auto& p : list("proc_writable"))
    EXPECT_EQ(p.rfind("/proc/pressure/", 0), 0u) << p << " opens for writing: " << report;
  for (const auto& f : list("init_fds"))
    EXPECT_TRUE(f == "/dev/null" || f == "LOG" || f == "anon_inode:[eventfd]")
        << "bwrap's init holds " << f << ": " << report;
  // Where this process (root, /proc/irq writable) could, the candidate without the sandbox can.
  const int probe = ::open("/proc/irq/default_smp_affinity", O_WRONLY | O_CLOEXEC);
  if (probe >= 0) {
    ::close(probe);
    auto open = evaluate("rms_norm_sandbox_inventory.cpp", {.sandbox = SandboxMode::kNone});
    ASSERT_EQ(open.size(), 1u);
    EXPECT_NE(open[0].error.find("/proc/irq/"), std::string::npos) << describe(open[0]);
  }
  auto twin = evaluate("rms_norm_sandbox_honest.cpp", {});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << describe(twin[0]);
}

// SUCCEEDED against the judge of stop 27 (a fresh attacker's, 2026-12-06), FIXED since (the
// judge's choices come from getrandom(2), JudgeRandom in judge.cpp): every go's splice, every
// re-check decision and the first re-check's call came from one std::mt19937_64, linear over
// GF(2), and each go hands the child 40 low bits of one output. A GOT hook on the child's read
// follows the draws; after ~1000 goes (the tiny shapes first) the candidate solves the generator's
// state in 0.5 s and knows each later splice and re-check before the go: a memset hook then
// writes the right answer in place of the poisoning, outside the bracket. With ATTACK_REPORT the
// candidate says so instead once 32 splices in a row came true: against the old judge, shapes 32,
// 5, 48, 0 and 3 failed with "predicted the judge's draws: 32 goes' splices right, 0 wrong"
// (the solve reaches full rank in about 3 runs of 4). Now the solve never finds a consistent
// state, every call computes, and the candidate and its twin (ATTACK 0) pass.
TEST_F(AttackRound3, TheJudgesDrawsCannotBePredicted) {
  const std::vector<std::string> shapes = {"15", "41", "46", "47", "28", "32", "5", "48", "0", "3"};
  auto recs = evaluate("rms_norm_predicts_judge_draws.cpp",
                       {.shapes = shapes, .defines = {{"ATTACK_REPORT", "1"}}});
  ASSERT_EQ(recs.size(), shapes.size());
  for (const auto& r : recs) {
    EXPECT_EQ(r.error.find("predicted the judge's draws"), std::string::npos) << describe(r);
    EXPECT_EQ(r.status, EvalStatus::kOk) << describe(r);
  }
  auto twin = evaluate("rms_norm_predicts_judge_draws.cpp",
                       {.shapes = {"15", "0"}, .defines = {{"ATTACK", "0"}}});
  ASSERT_EQ(twin.size(), 2u);
  for (const auto& r : twin) EXPECT_EQ(r.status, EvalStatus::kOk) << describe(r);
}

}  // namespace
// SUCCEEDED in attack round 9 (2026-12-07, a fresh attacker against the typed protocol), FIXED
// since: JSON nested 400000 deep (kernels/faults/rms_norm_deep_json.cpp). Written in place of the
// child's result line (nonce copied by a `write` hook), it killed the runner's own process
// (SIGSEGV in nlohmann's recursive dump() of the value an error message quoted): every record of
// the task was lost, and in a runner daemon the daemon with it. Written to the judge's pipe, it
// killed the judge (`crashed` instead of `rejected: tampering`). Now the runner and the judge
// refuse such a line at the parse (parse_untrusted_json): tampering. Before the fix this test
// binary died of SIGSEGV in mode 1.
TEST_F(AttackRound3, DeeplyNestedJsonIsTamperingNotACrash) {
  for (const char* mode : {"1", "2"}) {
    auto recs = evaluate("rms_norm_deep_json.cpp",
                         {.shapes = {"3", "15"}, .defines = {{"ATTACK_DEEP", mode}}});
    ASSERT_EQ(recs.size(), 2u) << "ATTACK_DEEP " << mode;
    for (const auto& r : recs) {
      EXPECT_EQ(r.status, EvalStatus::kRejected) << "ATTACK_DEEP " << mode << ": " << describe(r);
      EXPECT_EQ(r.error.rfind("tampering: ", 0), 0u) << "ATTACK_DEEP " << mode << ": " << r.error;
      EXPECT_NE(r.error.find("nested deeper than 32 levels"), std::string::npos)
          << "ATTACK_DEEP " << mode << ": " << r.error;
    }
  }
  auto twin = evaluate("rms_norm_deep_json.cpp",
                       {.shapes = {"3", "15"}, .defines = {{"ATTACK_DEEP", "0"}}});
  ASSERT_EQ(twin.size(), 2u);
  for (const auto& r : twin) EXPECT_EQ(r.status, EvalStatus::kOk) << describe(r);
}

}  // namespace atrex::runner
