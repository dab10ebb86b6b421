// The evaluation sandbox and the result channel against attacking candidates (issue 14 items
// 1-4; docs/evaluation.md "Threat model"), on the cpu backend through the real children and
// bwrap. Each attack reports what it could do in its error message (kernels/faults/*.cpp); where
// it is safe, the same attack runs with `sandbox: none` too and is seen to work, so that each
// test would catch the defense going away. rms_norm_sandbox_honest.cpp is the honest twin.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/common/redis/connection.h"
#include "atrex/runner/evaluator.h"
#include "atrex/testing/redis_server.h"
#include "protocol/response_channel.h"
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

class SandboxTest : public ::testing::Test {
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
                          ("atrex_sandbox_cache_" + std::to_string(::getpid())));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*cache_);
    delete suite_;
    delete hardware_;
    delete cache_;
  }
  void SetUp() override {
    auto ready = sandbox_ready(SandboxMode::kBwrap, ATREX_TEST_BIN_DIR);
    // deploy/install-deps.sh installs bubblewrap and CI has user namespaces: fail, never skip.
    ASSERT_TRUE(ready) << ready.error().message;
  }

  struct Run {
    SandboxMode sandbox = SandboxMode::kBwrap;
    std::vector<std::string> shapes = {"15"};
    std::map<std::string, std::string> defines;  // "#define NAME old" -> new value
    uint64_t cpu_memory_bytes = 0;
    fs::path work_dir;
  };

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
    t.task_id = "sandbox-" + file;
    t.operator_name = "rms_norm";
    t.shape_ids = run.shapes;
    t.candidate.source = source;
    t.candidate.sha256 = sha256_hex(source);
    t.candidate.backend = Backend::kCpu;
    t.candidate.agent = "test";
    t.candidate.file_name = file;
    t.settings.seeds = 2;
    t.settings.min_iterations = 3;
    t.settings.max_iterations = 5;
    t.settings.min_time_s = 0;
    t.settings.shape_timeout_s = 120;
    t.settings.unseen_shapes = 0;
    EvaluatorOptions o;
    o.suite = suite_;
    o.hardware = *hardware_;
    o.cache_dir = *cache_;
    o.include_dir = ATREX_TEST_INCLUDE_DIR;
    o.child_dir = ATREX_TEST_BIN_DIR;
    o.seed = 99;
    o.sandbox = run.sandbox;
    o.cpu_memory_bytes = run.cpu_memory_bytes;
    o.work_dir = run.work_dir;
    Evaluator ev(o);
    auto r = ev.evaluate(t);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : std::vector<EvalRecord>{};
  }

  static problems::Suite* suite_;
  static problems::HardwareProfile* hardware_;
  static fs::path* cache_;
};

problems::Suite* SandboxTest::suite_ = nullptr;
problems::HardwareProfile* SandboxTest::hardware_ = nullptr;
fs::path* SandboxTest::cache_ = nullptr;

std::string unique_marker(const char* what) {
  return fmt::format("atrex-{}-{}-{}", what, ::getpid(), ::time(nullptr));
}

TEST_F(SandboxTest, HonestTwinPassesInTheSandboxAndWithout) {
  for (SandboxMode mode : {SandboxMode::kBwrap, SandboxMode::kNone}) {
    auto recs = evaluate("rms_norm_sandbox_honest.cpp", {.sandbox = mode, .shapes = {"15", "5"}});
    ASSERT_EQ(recs.size(), 2u);
    for (const auto& r : recs) {
      EXPECT_EQ(r.status, EvalStatus::kOk) << sandbox_mode_name(mode) << ": " << r.error;
      EXPECT_EQ(r.sandbox, mode) << "every record says how its child ran";
      EXPECT_TRUE(r.timing && r.timing->n >= 3);
    }
  }
}

// (a) Forked copies of the child append "ok" lines: with the sandbox the forks fail and the
// candidate's own forged lines are tampering; without it the copies' lines are.
TEST_F(SandboxTest, ForgedRecordsRejectTheWholeTaskAsTampering) {
  for (SandboxMode mode : {SandboxMode::kBwrap, SandboxMode::kNone}) {
    auto recs = evaluate("rms_norm_forges_records.cpp", {.sandbox = mode, .shapes = {"15", "5"}});
    ASSERT_EQ(recs.size(), 2u);
    for (const auto& r : recs) {
      EXPECT_EQ(r.status, EvalStatus::kRejected) << sandbox_mode_name(mode) << ": " << r.error;
      EXPECT_EQ(r.error.rfind("tampering: ", 0), 0u) << r.error;
      EXPECT_FALSE(r.timing) << "no verdict of a tampered channel survives";
    }
  }
}

// (b) The queue's Redis on the host's loopback: FLUSHALL from inside the sandbox never arrives.
TEST_F(SandboxTest, RedisOnTheHostLoopbackIsOutOfReach) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  auto conn = RedisConnection::connect(redis.options());
  ASSERT_TRUE(conn) << conn.error().message;
  const std::string port = std::to_string(redis.options().port);
  for (SandboxMode mode : {SandboxMode::kBwrap, SandboxMode::kNone}) {
    ASSERT_TRUE((*conn)->command({"SET", "atrex:queue-key", "v"}));
    auto recs = evaluate("rms_norm_network.cpp",
                         {.sandbox = mode, .defines = {{"ATREX_ATTACK_PORT", port}}});
    ASSERT_EQ(recs.size(), 1u);
    const std::string& report = recs[0].error;
    auto key = (*conn)->command({"EXISTS", "atrex:queue-key"});
    ASSERT_TRUE(key);
    if (mode == SandboxMode::kBwrap) {
      EXPECT_EQ(key->integer, 1) << "FLUSHALL reached Redis from the sandbox: " << report;
      EXPECT_NE(report.find("socket=EACCES"), std::string::npos) << report;
      EXPECT_NE(report.find("listener_in_proc_net_tcp=no"), std::string::npos) << report;
    } else {
      // Without the sandbox the attack works: the test can tell.
      EXPECT_EQ(key->integer, 0) << report;
      EXPECT_NE(report.find("connect=ok"), std::string::npos) << report;
    }
  }
}

// (c) Temp folder, the parent of the working folder, the suite's hidden files, the cache.
TEST_F(SandboxTest, FilesOutsideTheScratchFolderAreOutOfReach) {
  const std::string marker = unique_marker("fs");
  const fs::path work = fs::temp_directory_path() / (marker + "-work");
  const std::map<std::string, std::string> defines = {
      {"ATREX_ATTACK_MARKER", "\"" + marker + "\""},
      {"ATREX_ATTACK_SUITE", "\"" + fs::absolute(ATREX_TEST_SUITE_DIR).string() + "\""}};
  auto recs = evaluate("rms_norm_file_system.cpp", {.defines = defines, .work_dir = work});
  ASSERT_EQ(recs.size(), 1u);
  const std::string& report = recs[0].error;
  EXPECT_NE(report.find("cwd=/tmp "), std::string::npos) << report;
  EXPECT_NE(report.find("parent_create=EROFS"), std::string::npos) << report;
  EXPECT_NE(report.find("found=[ ]"), std::string::npos) << report;
  EXPECT_NE(report.find("suite_roofline_open=ENOENT"), std::string::npos) << report;
  EXPECT_NE(report.find("cache_neighbours=0"), std::string::npos) << report;
  // What it created inside landed in the sandbox's own tmpfs, gone with it.
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / (marker + ".tmp")));
  EXPECT_FALSE(fs::exists(work / (marker + ".parent")));
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / (marker + ".parent")));
  // Without the sandbox it finds the suite (the attack is real) and writes next to its folder.
  auto open = evaluate("rms_norm_file_system.cpp",
                       {.sandbox = SandboxMode::kNone, .defines = defines, .work_dir = work});
  ASSERT_EQ(open.size(), 1u);
  EXPECT_NE(open[0].error.find("suite_roofline_open=ok"), std::string::npos) << open[0].error;
  EXPECT_TRUE(fs::exists(work / (marker + ".parent")));
  std::error_code ec;
  fs::remove(fs::temp_directory_path() / (marker + ".tmp"), ec);
  fs::remove_all(work, ec);
}

// (d) A fork bomb: not one fork, and no process outlives the child.
TEST_F(SandboxTest, ForkBombCannotFork) {
  auto recs = evaluate("rms_norm_fork_bomb.cpp", {});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << recs[0].error;
  EXPECT_NE(recs[0].error.find("forks=0 last=EPERM"), std::string::npos) << recs[0].error;
}

// (d) Memory: the cpu child's address-space limit stops the hog; the runner carries on.
TEST_F(SandboxTest, MemoryHogStopsAtTheLimit) {
  auto recs = evaluate("rms_norm_memory_hog.cpp", {.cpu_memory_bytes = 2ull << 30});
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_NE(recs[0].status, EvalStatus::kOk);
  const auto at = recs[0].error.find("allocated_mib=");
  if (recs[0].status == EvalStatus::kWrongResult) {
    ASSERT_NE(at, std::string::npos) << recs[0].error;
    EXPECT_LT(std::stoll(recs[0].error.substr(at + 14)), 2048) << recs[0].error;
  } else {
    EXPECT_EQ(recs[0].status, EvalStatus::kCrashed) << recs[0].error;  // the child ran out itself
  }
  auto honest = evaluate("rms_norm_sandbox_honest.cpp", {.cpu_memory_bytes = 2ull << 30});
  ASSERT_EQ(honest.size(), 1u);
  EXPECT_EQ(honest[0].status, EvalStatus::kOk) << "the limit leaves room: " << honest[0].error;
}

// (d) Disk: a 4 GiB file is cut at the file-size limit (SIGXFSZ), nothing stays behind.
TEST_F(SandboxTest, HugeFileIsKilledAtTheSizeLimit) {
  const fs::path work = fs::temp_directory_path() / unique_marker("file-work");
  for (SandboxMode mode : {SandboxMode::kBwrap, SandboxMode::kNone}) {
    auto recs = evaluate("rms_norm_huge_file.cpp", {.sandbox = mode, .work_dir = work});
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].status, EvalStatus::kCrashed) << recs[0].error;
    EXPECT_NE(recs[0].error.find("SIGXFSZ"), std::string::npos) << recs[0].error;
    // The per-child scratch folder (without the sandbox) is removed with the child.
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(work, ec)) {
      EXPECT_NE(e.path().filename(), "huge.bin") << e.path();
    }
  }
  std::error_code ec;
  fs::remove_all(work, ec);
}

// (e) and item 2's /proc/<parent>/cmdline: the runner's processes and memory are out of reach.
TEST_F(SandboxTest, ParentProcessAndItsSecretsAreOutOfReach) {
  const std::string secret = unique_marker("redis-password");
  // A process on the host with the secret on its command line, as a runner's --redis URL is: a
  // shell blocked in its `read` builtin (no child of its own that would outlive it holding
  // ctest's output pipe).
  int block[2];
  ASSERT_EQ(::pipe(block), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::dup2(block[0], 0);
    ::close(block[1]);
    ::execl("/bin/sh", "sh", "-c", "read -r x", secret.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(block[0]);
  ::setenv("ATREX_REDIS_PASSWORD", secret.c_str(), 1);
  const std::string quoted = "\"" + secret + "\"";
  auto boxed =
      evaluate("rms_norm_reads_parent.cpp", {.defines = {{"ATREX_ATTACK_SECRET", quoted}}});
  auto open = evaluate("rms_norm_reads_parent.cpp",
                       {.sandbox = SandboxMode::kNone,
                        .defines = {{"ATREX_ATTACK_SECRET", quoted}, {"ATREX_ATTACK_TRACE", "0"}}});
  ::unsetenv("ATREX_REDIS_PASSWORD");
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ::close(block[1]);
  ASSERT_EQ(boxed.size(), 1u);
  const std::string& report = boxed[0].error;
  EXPECT_NE(report.find("ptrace=EPERM"), std::string::npos) << report;
  EXPECT_NE(report.find("vm_readv=EPERM"), std::string::npos) << report;
  EXPECT_NE(report.find("secret_in_cmdline=no"), std::string::npos) << report;
  EXPECT_NE(report.find("secret_in_env=no"), std::string::npos) << report;
  // bwrap's init and the child: nothing of the host.
  EXPECT_NE(report.find("pids_visible=2 "), std::string::npos) << report;
  ASSERT_EQ(open.size(), 1u);
  EXPECT_NE(open[0].error.find("secret_in_cmdline=yes"), std::string::npos) << open[0].error;
  // The environment is cleaned with or without the sandbox.
  EXPECT_NE(open[0].error.find("secret_in_env=no"), std::string::npos) << open[0].error;
}

// Issue 14 item 3 ("the answer in reach"): the reference outputs live only in the judge. A
// candidate that computes one row and scans its process's memory for the rest of the answer
// finds nothing, with the sandbox and without (the judge is another process either way); its
// twin that plants the answer in its own memory first is found by the same scan and passes, so
// the scanner works and what it misses is the reference.
TEST_F(SandboxTest, ReferenceOutputsAreOutOfTheCandidatesProcess) {
  for (SandboxMode mode : {SandboxMode::kBwrap, SandboxMode::kNone}) {
    auto recs = evaluate("rms_norm_scans_for_answer.cpp", {.sandbox = mode, .shapes = {"15", "5"}});
    ASSERT_EQ(recs.size(), 2u);
    for (const auto& r : recs) {
      EXPECT_EQ(r.status, EvalStatus::kWrongResult) << sandbox_mode_name(mode) << ": " << r.error;
      EXPECT_NE(r.error.find("no answer in "), std::string::npos) << r.error;
    }
    auto planted = evaluate("rms_norm_scans_for_answer.cpp",
                            {.sandbox = mode, .shapes = {"15", "5"}, .defines = {{"ATTACK_PLANT", "1"}}});
    ASSERT_EQ(planted.size(), 2u);
    for (const auto& r : planted)
      EXPECT_EQ(r.status, EvalStatus::kOk) << sandbox_mode_name(mode) << ": " << r.error;
  }
}

// The attack round's relay (attacks/ on branch attack-round): the candidate moves fd 4 behind a
// pipe of its own and rewrites the child's verdict lines, nonce included. Computing nothing, it
// turned wrong_result into ok; the judge's verdict (on a pipe the candidate never holds) says
// wrong_result, and the whole task is tampering.
TEST_F(SandboxTest, RelayThatRewritesVerdictsMeetsTheJudge) {
  for (SandboxMode mode : {SandboxMode::kBwrap, SandboxMode::kNone}) {
    auto recs =
        evaluate("rms_norm_relay_rewrites_verdict.cpp", {.sandbox = mode, .shapes = {"15", "5"}});
    ASSERT_EQ(recs.size(), 2u);
    for (const auto& r : recs) {
      EXPECT_EQ(r.status, EvalStatus::kRejected) << sandbox_mode_name(mode) << ": " << r.error;
      EXPECT_EQ(r.error.rfind("tampering: ", 0), 0u) << r.error;
      EXPECT_NE(r.error.find("the judge"), std::string::npos) << r.error;
      EXPECT_FALSE(r.s_j);
    }
  }
}

// The relay with honest outputs and forged timing (S_i 0.95 for a slow kernel in the attack
// round): 50 forged samples against the judge's brackets of the real timed calls is tampering;
// forging only the values, keeping the count, is refuted by the judge's clock on a shape whose
// calls take tens of milliseconds (rms_norm shape 3 on this cpu: past the 5 ms allowance). The honest twin passes on both shapes.
TEST_F(SandboxTest, ForgedTimingIsRefutedByTheJudgesClock) {
  auto forged = evaluate("rms_norm_relay_forges_timing.cpp", {.shapes = {"15", "0"}});
  ASSERT_EQ(forged.size(), 2u);
  for (const auto& r : forged) {
    EXPECT_EQ(r.status, EvalStatus::kRejected) << r.error;
    EXPECT_NE(r.error.find("tampering: the child reports 50 timed samples"), std::string::npos)
        << r.error;
  }
  auto values = evaluate("rms_norm_relay_forges_timing.cpp",
                         {.shapes = {kLongCallShape}, .defines = {{"ATTACK_KEEP_COUNT", "1"}}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].status, EvalStatus::kRejected) << values[0].error;
  EXPECT_EQ(values[0].error.rfind("timing refuted by the judge's clock", 0), 0u) << values[0].error;
  EXPECT_FALSE(values[0].s_j);
  auto honest = evaluate("rms_norm_correct.cpp", {.shapes = {"15", "0"}});
  ASSERT_EQ(honest.size(), 2u);
  for (const auto& r : honest) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.error;
    EXPECT_TRUE(r.s_j) << "honest timing is scored";
  }
}

// Attack 6 ("the timer in reach"): the candidate patches clock_gettime in the child's GOT to run
// 100x slow. The child's steady_clock times its (slow, honest) calls at 1/100; the judge's clock
// is in another process: `rejected`, no S_j. The twin with the same patch at the true rate, and
// a tiny launch-bound shape (15) where the bound cannot tell, pass.
TEST_F(SandboxTest, SlowedClockIsRefutedByTheJudgesClock) {
  for (SandboxMode mode : {SandboxMode::kBwrap, SandboxMode::kNone}) {
    auto recs = evaluate("rms_norm_slows_clock.cpp", {.sandbox = mode, .shapes = {kLongCallShape}});
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].status, EvalStatus::kRejected)
        << sandbox_mode_name(mode) << ": " << recs[0].error << " (median "
        << (recs[0].timing ? recs[0].timing->time_us_median : -1) << " us, n "
        << (recs[0].timing ? recs[0].timing->n : 0) << ")";
    EXPECT_EQ(recs[0].error.rfind("timing refuted by the judge's clock", 0), 0u) << recs[0].error;
    EXPECT_FALSE(recs[0].s_j);
  }
  auto twin = evaluate("rms_norm_slows_clock.cpp",
                       {.shapes = {"0", "15"}, .defines = {{"ATTACK_SLOWDOWN", "1"}}});
  ASSERT_EQ(twin.size(), 2u);
  for (const auto& r : twin) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.error;
    EXPECT_TRUE(r.timing && r.timing->n >= 3);
  }
}

// Whether this host gives evaluation children a cgroup (common/process/cgroup.h), and if not why.
std::string cgroup_unavailable() {
  auto probe = ChildCgroup::create(fmt::format("atrex-probe-{}", ::getpid()), {1ull << 30, 1024});
  return probe->active() ? std::string() : probe->describe();
}

// Sets ATREX_CGROUP=off for one scope: the same attack without the cgroup, to show it works then.
struct CgroupOff {
  CgroupOff() { ::setenv("ATREX_CGROUP", "off", 1); }
  ~CgroupOff() { ::unsetenv("ATREX_CGROUP"); }
};

// (d) Memory RLIMIT_AS does not count (attack round of the second session): 3 GiB of memfd and
// SysV shm pages were held under a 2 GiB RLIMIT_AS. The child's cgroup memory limit (the same
// figure as RLIMIT_AS) counts them: the kernel kills the child, or a page is refused, under the
// limit; the honest twin passes under the same limits. Without the cgroup (ATREX_CGROUP=off) the
// attack holds all it asked for. Skipped, saying why, on a host that gives no cgroup (docs/evaluation.md "rlimits").
TEST_F(SandboxTest, MemoryPastTheAddressSpaceLimitStopsAtTheCgroupLimit) {
  if (const std::string why = cgroup_unavailable(); !why.empty()) GTEST_SKIP() << why;
  // 1 GiB limits and 1.5 GiB asked for (the attack's default is 3 GiB): filling pages is the
  // test's time, ~10 s a GiB on the loaded development VM.
  const Run attack{.defines = {{"ATTACK_TARGET_MIB", "1536"}}, .cpu_memory_bytes = 1ull << 30};
  auto recs = evaluate("rms_norm_unaccounted_memory.cpp", attack);
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_NE(recs[0].status, EvalStatus::kOk);
  if (recs[0].status == EvalStatus::kCrashed) {
    EXPECT_NE(recs[0].error.find("cgroup memory limit"), std::string::npos) << recs[0].error;
  } else {
    EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << recs[0].error;
    const auto at = recs[0].error.find("held_mib=");
    ASSERT_NE(at, std::string::npos) << recs[0].error;
    EXPECT_LT(std::stoll(recs[0].error.substr(at + 9)), 1024) << recs[0].error;
  }
  auto honest = evaluate("rms_norm_sandbox_honest.cpp", {.cpu_memory_bytes = 1ull << 30});
  ASSERT_EQ(honest.size(), 1u);
  EXPECT_EQ(honest[0].status, EvalStatus::kOk) << "the limit leaves room: " << honest[0].error;
  CgroupOff off;
  auto open = evaluate("rms_norm_unaccounted_memory.cpp", attack);
  ASSERT_EQ(open.size(), 1u);
  const auto at = open[0].error.find("held_mib=");
  ASSERT_NE(at, std::string::npos) << open[0].error;
  EXPECT_GE(std::stoll(open[0].error.substr(at + 9)), 1536)
      << "without the cgroup RLIMIT_AS alone does not stop it: " << open[0].error;
}

// (d) Threads (attack round of the second session): threads are allowed, and each takes one of
// the host's pids. The child's cgroup task limit (max(1024, 8 x cores)) stops 3000 parked
// threads with EAGAIN; without the cgroup all 3000 start. The honest twin's threads work.
TEST_F(SandboxTest, ThreadBombStopsAtTheCgroupTaskLimit) {
  if (const std::string why = cgroup_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const uint64_t limit = eval_child_cgroup_limits(Backend::kCpu, {}).tasks;
  if (limit >= 3000) GTEST_SKIP() << "this host's task limit (" << limit << ") is above the attack's 3000";
  auto recs = evaluate("rms_norm_thread_bomb.cpp", {});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << recs[0].error;
  const auto at = recs[0].error.find("threads=");
  ASSERT_NE(at, std::string::npos) << recs[0].error;
  EXPECT_LT(std::stoll(recs[0].error.substr(at + 8)), static_cast<long long>(limit)) << recs[0].error;
  EXPECT_NE(recs[0].error.find("last=EAGAIN"), std::string::npos) << recs[0].error;
  auto honest = evaluate("rms_norm_sandbox_honest.cpp", {});
  ASSERT_EQ(honest.size(), 1u);
  EXPECT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
  CgroupOff off;
  auto open = evaluate("rms_norm_thread_bomb.cpp", {});
  ASSERT_EQ(open.size(), 1u);
  EXPECT_NE(open[0].error.find("threads=3000 last=none"), std::string::npos) << open[0].error;
}

// The host's kernel settings (the attack round of the second session, critical): started as
// root, the sandbox's root is the host's uid 0, and the fresh /proc let a sandboxed process
// rewrite kernel.core_pattern (a pipe there runs any command as host root at the next crash).
// The candidate only opens the files for writing. In the sandbox: read-only; without it, as
// root, the same open succeeds (so the test sees the defense go).
TEST_F(SandboxTest, HostKernelSettingsAreReadOnly) {
  auto recs = evaluate("rms_norm_host_sysctl.cpp", {});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << recs[0].error;
  EXPECT_EQ(recs[0].error.find("core_pattern=ok"), std::string::npos) << recs[0].error;
  EXPECT_EQ(recs[0].error.find("sysrq=ok"), std::string::npos) << recs[0].error;
  EXPECT_NE(recs[0].error.find("core_pattern=EROFS"), std::string::npos) << recs[0].error;
  if (::geteuid() == 0) {
    auto open = evaluate("rms_norm_host_sysctl.cpp", {.sandbox = SandboxMode::kNone});
    ASSERT_EQ(open.size(), 1u);
    EXPECT_NE(open[0].error.find("core_pattern=ok"), std::string::npos) << open[0].error;
  }
}

// Whether this kernel takes system calls through int 0x80 (the 32-bit entry; ia32 emulation can
// be off): a forked child makes one (getpid) and exits 0, or dies of the fault.
bool int80_available() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    long r = 20;  // i386 getpid
    asm volatile("int $0x80" : "+a"(r) : : "memory", "r8", "r9", "r10", "r11");
    ::_exit(r > 0 ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The seccomp filter against the kernel's other system-call ABIs (a defense without a test so
// far): fork through the x32 ABI or the 32-bit int 0x80 entry is not the x86-64 fork the filter
// names; libseccomp's filter kills a process that uses another ABI (SIGSYS). Without the
// sandbox int 0x80's fork makes a child (so the test sees the filter go).
TEST_F(SandboxTest, OtherSystemCallAbisAreKilled) {
  for (const char* int80 : {"0", "1"}) {
    auto recs = evaluate("rms_norm_seccomp_abi.cpp", {.defines = {{"ATTACK_INT80", int80}}});
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].status, EvalStatus::kCrashed) << recs[0].error;
    EXPECT_NE(recs[0].error.find("SIGSYS"), std::string::npos) << recs[0].error;
  }
  // A kernel whose 32-bit entry is off (int 0x80 raises a general protection fault: SIGSEGV;
  // seen on the 6.18 Firecracker kernel of 2026-12-06) has no such fork to show.
  if (!int80_available())
    GTEST_SKIP() << "int 0x80 is off in this kernel: no fork to show without the filter";
  auto open = evaluate("rms_norm_seccomp_abi.cpp",
                       {.sandbox = SandboxMode::kNone, .defines = {{"ATTACK_INT80", "1"}}});
  ASSERT_EQ(open.size(), 1u);
  EXPECT_NE(open[0].error.find("int80_fork="), std::string::npos) << open[0].error;
  EXPECT_EQ(open[0].error.find("int80_fork=-"), std::string::npos) << open[0].error;
}

// The children keep the runner's session (one scheduling autogroup with the judge): TIOCSTI and
// TIOCLINUX, which would type into a controlling terminal, are denied by the seccomp filter.
// Without the sandbox (no filter) the same calls reach the kernel (ENOTTY on /dev/null, or a
// terminal's answer), which shows the test would see the rule go.
TEST_F(SandboxTest, TerminalInputIsDenied) {
  auto recs = evaluate("rms_norm_terminal_input.cpp", {});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << recs[0].error;
  EXPECT_NE(recs[0].error.find("tiocsti=EPERM tioclinux=EPERM"), std::string::npos) << recs[0].error;
  auto open = evaluate("rms_norm_terminal_input.cpp", {.sandbox = SandboxMode::kNone});
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].error.find("tiocsti=EPERM"), std::string::npos) << open[0].error;
}

// Timed calls return at once and a thread of the candidate's computes their outputs between
// calls; calls checked right after they return are computed in the call (their call site is
// learnt from the first call). On rms_norm shape 3 it was timed 2.2x faster than its honest twin
// and passed the judge (the brackets held only the call). Now the judge reads every timed call's
// outputs in its arena when the done comes, and holds what it read against the outputs of the
// timed calls it checks (its re-check, the last timed call's outputs): the attack fails, its
// twin (ATTACK_ASYNC 0) passes.
TEST_F(SandboxTest, OutputsFinishedAfterTheCallReturnsAreCaught) {
  auto recs = evaluate("rms_norm_async_output.cpp", {.shapes = {"3"}});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_NE(recs[0].status, EvalStatus::kOk) << recs[0].error;
  auto twin = evaluate("rms_norm_async_output.cpp", {.shapes = {"3"}, .defines = {{"ATTACK_ASYNC", "0"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << twin[0].error;
}

// A relay of the candidate's own between the harness and the judge (fds 6 and 7) answers each
// call_begin with a go of its own (well formed, naming a splice it drew) and sends the judge
// call_begin and call_end back to back after the call: every bracket holds one round trip and no
// call. With the child's clock slowed 10x it claimed 8.0 ms on rms_norm shape 3 (honest twin:
// 75.5 ms), S_j 0.48 against 0.05, and passed. Now the go names the splice of the call's inputs
// (cpu): the judge's checks of timed calls name a splice its go never named, which is tampering.
// The twin (ATTACK_SLOWDOWN 1) is the same relay forwarding everything in order: a relay as such
// is not refused.
TEST_F(SandboxTest, RelayThatEmptiesTheJudgesBracketsIsRefuted) {
  auto recs = evaluate("rms_norm_relay_empties_brackets.cpp", {.shapes = {"3"}});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kRejected) << recs[0].error;
  EXPECT_NE(recs[0].error.find("tampering"), std::string::npos) << recs[0].error;
  auto twin = evaluate("rms_norm_relay_empties_brackets.cpp",
                       {.shapes = {"3"}, .defines = {{"ATTACK_SLOWDOWN", "1"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << twin[0].error;
}

// The relay that beats a go it cannot forge: it hands the harness the judge's real go and sends
// the judge a done of its own at once, swallowing the real one after the call (every bracket
// empty again, the clock slowed 10x). The judge reads the outputs in its arena at that done,
// before the call has run: its check of the last timed call's outputs (and of any timed call it
// re-checks) finds other outputs: `wrong_result`. The twin (ATTACK_SLOWDOWN 1) relays honestly
// and passes.
TEST_F(SandboxTest, RelayThatSendsTheDoneBeforeTheWorkIsCaught) {
  auto recs = evaluate("rms_norm_relay_empties_brackets.cpp",
                       {.shapes = {"3"}, .defines = {{"ATTACK_DONE_FIRST", "1"}}});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kWrongResult) << recs[0].error;
  EXPECT_NE(recs[0].error.find("not the ones the timed call had when its done reached the judge"),
            std::string::npos)
      << recs[0].error;
  auto twin = evaluate(
      "rms_norm_relay_empties_brackets.cpp",
      {.shapes = {"3"}, .defines = {{"ATTACK_DONE_FIRST", "1"}, {"ATTACK_SLOWDOWN", "1"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << twin[0].error;
}

// A line of the candidate's own on the judge's pipe: an op the protocol has not (1), a call_end
// with a member of its own (2, refused by the typed reader of common/wire/judge_messages.h). The
// judge ends with a tampering verdict and the whole task is rejected; the twin writes nothing.
TEST_F(SandboxTest, ForgedMessagesToTheJudgeAreTampering) {
  for (const char* forge : {"1", "2"}) {
    auto recs = evaluate("rms_norm_forges_judge_message.cpp", {.defines = {{"ATTACK_FORGE", forge}}});
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].status, EvalStatus::kRejected) << forge << ": " << recs[0].error;
    EXPECT_EQ(recs[0].error.rfind("tampering: ", 0), 0u) << forge << ": " << recs[0].error;
  }
  auto twin = evaluate("rms_norm_forges_judge_message.cpp", {.defines = {{"ATTACK_FORGE", "0"}}});
  ASSERT_EQ(twin.size(), 1u);
  EXPECT_EQ(twin[0].status, EvalStatus::kOk) << twin[0].error;
}

// `atrex eval`'s evaluator chose its own temp folder: it is gone with the evaluator.
TEST_F(SandboxTest, TemporaryWorkFolderIsRemoved) {
  const fs::path work = fs::temp_directory_path() / fmt::format("atrex-eval-{}", ::getpid());
  fs::remove_all(work);
  auto recs = evaluate("rms_norm_sandbox_honest.cpp", {});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kOk) << recs[0].error;
  EXPECT_FALSE(fs::exists(work)) << work;
}

TEST(SandboxReady, MissingBwrapIsUnavailableAndNamesNoSandbox) {
  ::setenv("ATREX_BWRAP", "/nonexistent/bwrap", 1);
  auto r = sandbox_ready(SandboxMode::kBwrap, ATREX_TEST_BIN_DIR);
  ::unsetenv("ATREX_BWRAP");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("--no-sandbox"), std::string::npos) << r.error().message;
  EXPECT_TRUE(sandbox_ready(SandboxMode::kNone, ATREX_TEST_BIN_DIR));
}

// The runner's checks of the result channel, line by line.
std::string line(const std::string& nonce, const std::string& shape) {
  ChildShapeResponse c;
  c.nonce = nonce;
  c.shape_id = shape;
  c.status = EvalStatus::kOk;
  return to_json(c).dump() + "\n";
}

TEST(ResponseChannel, TakesOneVerdictPerShapeInOrderAcrossReads) {
  ResponseChannel ch("n1", {"15", "5"});
  const std::string both = line("n1", "15") + line("n1", "5");
  auto first = ch.feed(both.substr(0, 10));
  EXPECT_TRUE(first.empty());
  auto rest = ch.feed(both.substr(10));
  ch.finish();
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[1].shape_id, "5");
  EXPECT_FALSE(ch.tampered()) << ch.why();
}

TEST(ResponseChannel, EveryDeviationIsTampering) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {line("forged", "15"), "nonce"},
      {line("n1", "15") + line("n1", "15"), "shape 15 where 5"},
      {line("n1", "5"), "shape 5 where 15"},
      {line("n1", "15") + line("n1", "5") + line("n1", "5"), "for 2 requested"},
      {"not json\n", "not JSON"},
      {R"({"nonce":"n1","schema":"atrex.child-response/1"})"
       "\n",
       "line 1"},
  };
  for (const auto& [text, why] : cases) {
    ResponseChannel ch("n1", {"15", "5"});
    auto got = ch.feed(text);
    ch.finish();
    EXPECT_TRUE(ch.tampered()) << text;
    EXPECT_TRUE(got.empty()) << "a tampered feed returns nothing: " << text;
    EXPECT_NE(ch.why().find(why), std::string::npos) << ch.why();
  }
  ResponseChannel partial("n1", {"15"});
  (void)partial.feed(line("n1", "15").substr(0, 20));
  partial.finish();
  EXPECT_NE(partial.why().find("unfinished"), std::string::npos) << partial.why();
  ResponseChannel flood("n1", {"15"}, 100);
  (void)flood.feed(std::string(101, 'x'));
  EXPECT_TRUE(flood.tampered());
  EXPECT_NE(make_nonce(), make_nonce());
  EXPECT_EQ(make_nonce().size(), 32u);
}

}  // namespace
}  // namespace atrex::runner
