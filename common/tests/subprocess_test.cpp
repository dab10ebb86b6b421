#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/common/process/subprocess.h"

namespace atrex {
namespace {

using namespace std::chrono_literals;

SubprocessResult run(std::vector<std::string> argv, std::chrono::milliseconds timeout = 10s) {
  SubprocessOptions opt;
  opt.argv = std::move(argv);
  opt.timeout = timeout;
  auto r = run_subprocess(opt);
  EXPECT_TRUE(r) << r.error().message;
  return *r;
}

TEST(Subprocess, ExitCodeAndOutputTail) {
  auto r = run({"sh", "-c", "echo hello; echo oops >&2; exit 3"});
  EXPECT_TRUE(r.started);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.output_tail.find("hello"), std::string::npos);
  EXPECT_NE(r.output_tail.find("oops"), std::string::npos);
  EXPECT_EQ(r.describe(), "exit code 3");
}

TEST(Subprocess, DeathBySignalIsReported) {
  auto r = run({"sh", "-c", "kill -SEGV $$"});
  EXPECT_EQ(r.term_signal, SIGSEGV);
  EXPECT_EQ(r.describe(), "killed by signal 11 (SIGSEGV)");
}

TEST(Subprocess, TimeoutKillsTheWholeProcessGroup) {
  const auto t0 = std::chrono::steady_clock::now();
  // The grandchild would keep the output file open for 30 s if it survived.
  auto r = run({"sh", "-c", "sleep 30 & sleep 30"}, 300ms);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(elapsed, 10.0);
  EXPECT_NE(r.describe().find("timed out"), std::string::npos);
}

TEST(Subprocess, MissingProgramIsNotStarted) {
  auto r = run({"/nonexistent/atrex-child"});
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.output_tail.find("No such file"), std::string::npos) << r.output_tail;
}

TEST(Subprocess, ExtraEnvironmentReachesTheChild) {
  SubprocessOptions opt;
  opt.argv = {"sh", "-c", "echo $ATREX_PROBE_VAR"};
  opt.extra_env = {{"ATREX_PROBE_VAR", "42abc"}};
  auto r = run_subprocess(opt);
  ASSERT_TRUE(r);
  EXPECT_NE(r->output_tail.find("42abc"), std::string::npos);
}

// A runner killed with SIGKILL must not leave its evaluation child running (on a GPU it would
// keep the device busy and skew the next runner's timings).
TEST(Subprocess, ChildDiesWithAKilledParent) {
  const auto pid_file =
      std::filesystem::temp_directory_path() / ("atrex_pdeath_" + std::to_string(::getpid()));
  std::filesystem::remove(pid_file);
  const pid_t runner = ::fork();
  ASSERT_GE(runner, 0);
  if (runner == 0) {
    SubprocessOptions o;
    o.argv = {"sh", "-c",
              "echo $$ > " + pid_file.string() + ".tmp && mv " + pid_file.string() + ".tmp " +
                  pid_file.string() + " && exec sleep 60"};
    o.timeout = std::chrono::seconds(120);
    (void)run_subprocess(o);
    _exit(0);
  }
  pid_t child = 0;
  for (int i = 0; i < 500 && child == 0; ++i) {
    std::ifstream in(pid_file);
    if (!(in >> child)) child = 0;
    if (child == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(child, 0);
  ::kill(runner, SIGKILL);
  int status = 0;
  ::waitpid(runner, &status, 0);
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    // Gone, or a zombie waiting for its new parent (init, or a container's PID 1) to reap it.
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid_s, comm, state;
    gone = ::kill(child, 0) != 0 || !(stat >> pid_s >> comm >> state) || state == "Z";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!gone) ::kill(child, SIGKILL);
  std::filesystem::remove(pid_file);
  EXPECT_TRUE(gone) << "the evaluation child outlived its killed parent";
}

// The pre-exec policy seam: a limit set by a policy holds in the child (and cannot be raised
// there), and its honest twin without the policy is unaffected.
TEST(Subprocess, ResourceLimitsPolicyHoldsInTheChildOnly) {
  const std::string cmd =
      "ulimit -f; ulimit -Hn; (ulimit -n 4096 2>/dev/null && echo raised) || echo fixed";
  ResourceLimits limits({.file_size_bytes = 512 * 1024, .open_files = 64});
  SubprocessOptions opt;
  opt.argv = {"sh", "-c", cmd};
  opt.policies = {&limits};
  auto limited = run_subprocess(opt);
  ASSERT_TRUE(limited) << limited.error().message;
  EXPECT_TRUE(limited->ok()) << limited->describe() << ": " << limited->output_tail;
  // sh's `ulimit -f` counts 512-byte blocks.
  EXPECT_NE(limited->output_tail.find("1024\n64\nfixed"), std::string::npos)
      << limited->output_tail;
  opt.policies.clear();
  auto free = run_subprocess(opt);
  ASSERT_TRUE(free);
  EXPECT_EQ(free->output_tail.find("1024\n64\n"), std::string::npos) << free->output_tail;
}

// A policy that fails in the child stops the spawn: the program never runs and the result says
// which policy failed and why.
TEST(Subprocess, FailingPolicyIsReportedAndTheProgramDoesNotRun) {
  struct Refuse final : ChildPolicy {
    const char* name() const override { return "refusing test"; }
    int apply_in_child() const noexcept override { return EPERM; }
  } refuse;
  const auto marker =
      std::filesystem::temp_directory_path() / ("atrex_policy_" + std::to_string(::getpid()));
  SubprocessOptions opt;
  opt.argv = {"sh", "-c", "touch " + marker.string()};
  opt.policies = {&refuse};
  auto r = run_subprocess(opt);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->started);
  EXPECT_NE(r->output_tail.find("refusing test policy failed"), std::string::npos)
      << r->output_tail;
  EXPECT_FALSE(std::filesystem::exists(marker));
}

// prepare() runs in the parent; its error fails the call before anything is forked.
TEST(Subprocess, PolicyThatCannotBePreparedFailsTheCall) {
  struct Unprepared final : ChildPolicy {
    const char* name() const override { return "unprepared"; }
    Result<void> prepare() const override { return io_error("no sandbox root"); }
    int apply_in_child() const noexcept override { return 0; }
  } unprepared;
  SubprocessOptions opt;
  opt.argv = {"true"};
  opt.policies = {&unprepared};
  auto r = run_subprocess(opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "unprepared: no sandbox root");
}

}  // namespace
}  // namespace atrex

namespace atrex {
namespace {

// The evaluation children's channels: fds handed over at fixed numbers (not close-on-exec
// there), this process's copies closed, so a pipe's reader sees EOF when the child is done.
TEST(Subprocess, InheritedFdsReachTheChildAtTheirNumbers) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  SubprocessOptions opt;
  opt.argv = {"sh", "-c", "echo through-fd-4 >&4; ls /proc/self/fd | wc -l"};
  opt.inherit_fds = {{p[1], 4}};
  auto r = run_subprocess(opt);
  ASSERT_TRUE(r && r->ok()) << (r ? r->describe() + r->output_tail : r.error().message);
  char buf[64] = {};
  const ssize_t n = ::read(p[0], buf, sizeof buf - 1);  // EOF after the line: our copy is closed
  ::close(p[0]);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "through-fd-4\n");
  EXPECT_EQ(::fcntl(p[1], F_GETFD), -1) << "the parent's copy of an inherited fd is closed";
}

// A descriptor the parent opened without close-on-exec (hiredis opens its sockets that way) does
// not reach the child: the attack round of 2026-12-01 drove the runner's authenticated Redis
// connection from a sandboxed candidate through such an inherited fd.
TEST(Subprocess, OnlyTheNamedFdsCrossExec) {
  int leaky[2];
  ASSERT_EQ(::pipe(leaky), 0);  // no O_CLOEXEC, as hiredis' socket
  ASSERT_GT(leaky[1], 2);
  SubprocessOptions opt;
  opt.argv = {"sh", "-c", "test -e /proc/self/fd/" + std::to_string(leaky[1]) +
                              " && echo leaked || echo closed"};
  auto r = run_subprocess(opt);
  ::close(leaky[0]);
  ::close(leaky[1]);
  ASSERT_TRUE(r && r->ok()) << (r ? r->describe() : r.error().message);
  EXPECT_NE(r->output_tail.find("closed"), std::string::npos) << r->output_tail;
}

// Bytes that are not UTF-8 on the child's output become '?': the tail ends up in records and
// messages serialised as JSON, and a raw byte made the runner throw (attack round, 2026-12-01).
TEST(Subprocess, OutputTailIsValidUtf8WhateverTheChildPrints) {
  SubprocessOptions opt;
  opt.argv = {"sh", "-c", "printf 'ok \\303\\251 bad \\377\\376 \\300\\200 end'"};
  auto r = run_subprocess(opt);
  ASSERT_TRUE(r && r->ok()) << (r ? r->describe() : r.error().message);
  EXPECT_EQ(r->output_tail, "ok \xc3\xa9 bad ?? ?? end");
  EXPECT_NO_THROW((void)Json(r->output_tail).dump());
}

// A replaced environment: nothing of this process's reaches the child.
TEST(Subprocess, ReplacedEnvironmentHoldsOnlyWhatIsGiven) {
  ::setenv("ATREX_TEST_SECRET_URL", "redis://:password@host", 1);
  SubprocessOptions opt;
  opt.argv = {"/bin/sh", "-c", "env"};
  opt.env = std::map<std::string, std::string>{{"ONLY", "this"}};
  auto r = run_subprocess(opt);
  ::unsetenv("ATREX_TEST_SECRET_URL");
  ASSERT_TRUE(r && r->ok()) << (r ? r->describe() : r.error().message);
  EXPECT_NE(r->output_tail.find("ONLY=this"), std::string::npos) << r->output_tail;
  EXPECT_EQ(r->output_tail.find("ATREX_TEST_SECRET_URL"), std::string::npos) << r->output_tail;
}

// should_abort kills the whole group at once and says so (not a timeout, not a signal verdict).
TEST(Subprocess, AbortKillsTheGroupAtOnce) {
  SubprocessOptions opt;
  opt.argv = {"sh", "-c", "sleep 30 & sleep 30"};
  opt.timeout = std::chrono::seconds(20);
  const auto t0 = std::chrono::steady_clock::now();
  opt.should_abort = [&] { return std::chrono::steady_clock::now() - t0 > 200ms; };
  auto r = run_subprocess(opt);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->aborted);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->term_signal, 0);
  EXPECT_LT(r->wall_s, 5.0);
}

}  // namespace
}  // namespace atrex

namespace atrex {
namespace {

// The GPU image's /usr/local/cuda is a link through /etc/alternatives, which the sandbox does
// not bind: the child's LD_LIBRARY_PATH must name the resolved folder (H200 run, 2026-12-01:
// "bwrap: Can't mkdir /usr/local/cuda/lib64").
TEST(ChildEnvironment, LibrarySearchPathIsResolvedThroughSymlinks) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("atrex_env_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "real" / "lib64");
  fs::create_directory_symlink(root / "real", root / "link");
  const std::string before = std::getenv("LD_LIBRARY_PATH") ? std::getenv("LD_LIBRARY_PATH") : "";
  const std::string missing = (root / "missing").string();
  ::setenv("LD_LIBRARY_PATH", ((root / "link" / "lib64").string() + ":" + missing).c_str(), 1);
  const auto env = clean_child_environment(root);
  ::setenv("LD_LIBRARY_PATH", before.c_str(), 1);
  fs::remove_all(root);
  ASSERT_TRUE(env.count("LD_LIBRARY_PATH"));
  EXPECT_EQ(env.at("LD_LIBRARY_PATH"),
            fs::weakly_canonical(root / "real" / "lib64").string() + ":" + missing);
}

}  // namespace
}  // namespace atrex
