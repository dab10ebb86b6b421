// Progress of long commands on stderr: under a pseudo-terminal (util-linux `script`, which runs
// the command on a pty) one line rewritten in place with rate and ETA; without a terminal plain
// lines, one per ATREX_PROGRESS_EVERY_S. `atrex reduce` and `atrex regress` on a synthetic
// results folder (`atrex bench reduce --dir`), `atrex sweep run` on a two-operator CPU sweep.
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "atrex/common/process/subprocess.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

struct CmdResult {
  int rc;
  std::string output;
};

class Progress : public ::testing::Test {
 protected:
  static fs::path root() {
    return fs::temp_directory_path() / ("atrex_progress_" + std::to_string(::getpid()));
  }
  static std::string bin() { return std::string(ATREX_TEST_BIN_DIR) + "/atrex"; }
  static CmdResult run(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
    SubprocessOptions o;
    o.argv = std::move(argv);
    o.timeout = std::chrono::seconds(300);
    o.working_dir = root();
    o.output_tail_bytes = 1 << 20;
    o.extra_env = std::move(env);
    o.extra_env["ATREX_CACHE_DIR"] = (root() / "cache").string();
    auto r = run_subprocess(o);
    EXPECT_TRUE(r) << r.error().message;
    if (!r) return CmdResult{-1, ""};
    return CmdResult{r->timed_out ? -1 : r->exit_code, r->output_tail};
  }
  // `atrex ARGS` on a pseudo-terminal (stdin, stdout and stderr): `script -qec CMD /dev/null`.
  static CmdResult on_pty(const std::string& args) {
    return run({"script", "-qefc", bin() + " " + args, "/dev/null"}, {{"TERM", "xterm"}});
  }
  static void SetUpTestSuite() {
    fs::remove_all(root());
    fs::create_directories(root());
    auto r = run({bin(), "bench", "reduce", "--records", "100000", "--agents", "2", "--dir",
                  (root() / "r").string()});
    ASSERT_EQ(r.rc, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root()); }
  static int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  }
};

TEST_F(Progress, ReduceOnATerminalRewritesOneLineWithRateAndEta) {
  if (run({"sh", "-c", "command -v script"}).rc != 0) GTEST_SKIP() << "no script(1)";
  auto r = on_pty("reduce r --out o1");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_GE(count(r.output, "\rreduce: "), 1) << r.output;
  EXPECT_NE(r.output.find("\x1b[K"), std::string::npos) << "the rest of the line cleared";
  EXPECT_NE(r.output.find(" MB/s"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(reduce: [0-9.]+/[0-9.]+ MB \(100\.0%\))")))
      << r.output;
  // No line of the meter ends with a newline of its own before the last one.
  const auto first = r.output.find("\rreduce: ");
  const auto last = r.output.rfind("\rreduce: ");
  EXPECT_EQ(r.output.substr(first, last - first).find('\n'), std::string::npos);
}

TEST_F(Progress, ReduceWithoutATerminalPrintsPlainPeriodicLines) {
  auto r = run({bin(), "reduce", "r", "--out", "o2"}, {{"ATREX_PROGRESS_EVERY_S", "0.001"}});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos);
  EXPECT_EQ(r.output.find("\x1b["), std::string::npos);
  EXPECT_GE(count(r.output, "\nreduce: ") + (r.output.rfind("reduce: ", 0) == 0), 2) << r.output;
  EXPECT_NE(r.output.find("ETA"), std::string::npos) << r.output;
}

TEST_F(Progress, RegressOnATerminalToo) {
  if (run({"sh", "-c", "command -v script"}).rc != 0) GTEST_SKIP() << "no script(1)";
  auto r = on_pty("regress --baseline r --current r --out reg");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_GE(count(r.output, "\rregress: "), 1) << r.output.substr(0, 2000);
}

TEST_F(Progress, SweepRunOnATerminalCountsOperators) {
  if (run({"sh", "-c", "command -v script"}).rc != 0) GTEST_SKIP() << "no script(1)";
  fs::copy(fs::path(ATREX_TEST_FIXTURES_DIR) / "regress", root() / "fx",
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  auto r = on_pty("sweep run " + (root() / "fx" / "nightly_same.yaml").string() + " --out s");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("\rsweep nightly-same: 2/2 operators (100.0%)"), std::string::npos)
      << r.output.substr(0, 3000);
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\rsweep nightly-same: [01]/2 operators)")))
      << "the line while it runs";
}

}  // namespace
}  // namespace atrex
