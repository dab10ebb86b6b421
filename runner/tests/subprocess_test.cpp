#include <signal.h>

#include <gtest/gtest.h>

#include "atrex/runner/subprocess.h"

namespace atrex::runner {
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
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

}  // namespace
}  // namespace atrex::runner
