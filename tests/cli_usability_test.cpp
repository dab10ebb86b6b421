// The atrex command line as a new user meets it (issue 17 item 6): unknown words named with the
// nearest known one, an example in every --help, numeric options range-checked, `atrex eval`
// stopped by SIGINT/SIGTERM after the shape in progress with what finished printed and written,
// --out naming a folder, the note column's cause first, `atrex sweep plan`, and `atrex hardware
// measure` refusing to replace the cached host profile with figures outside its spread.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

struct CliRun {
  int rc;
  std::string output;
};

class CliUse : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_cliuse_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string bin() { return std::string(ATREX_TEST_BIN_DIR) + "/atrex"; }
  static std::string candidate(const std::string& name) {
    return std::string(ATREX_TEST_CANDIDATES_DIR) + "/" + name;
  }

  CliRun atrex(std::vector<std::string> args, std::map<std::string, std::string> env = {},
               int timeout_s = 120) {
    SubprocessOptions o;
    o.argv = {bin()};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = std::chrono::seconds(timeout_s);
    o.working_dir = dir_;
    o.output_tail_bytes = 1 << 20;
    o.extra_env = std::move(env);
    o.extra_env["ATREX_CACHE_DIR"] = (dir_ / "cache").string();
    auto r = run_subprocess(o);
    EXPECT_TRUE(r) << r.error().message;
    if (!r) return {-1, ""};
    return CliRun{r->timed_out ? -1 : r->exit_code, r->output_tail};
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static int lines_in(const fs::path& p) {
    std::ifstream in(p);
    int n = 0;
    for (std::string l; std::getline(in, l);) n += l.empty() ? 0 : 1;
    return n;
  }
  std::vector<std::string> commands() {
    auto r = atrex({"--list-commands"});
    EXPECT_EQ(r.rc, 0) << r.output;
    std::vector<std::string> out;
    std::istringstream in(r.output);
    for (std::string l; std::getline(in, l);)
      if (l.rfind("atrex", 0) == 0) out.push_back(l);
    return out;
  }
  static std::vector<std::string> words(const std::string& command) {
    std::vector<std::string> w;
    std::istringstream in(command);
    for (std::string x; in >> x;) w.push_back(x);
    w.erase(w.begin());  // "atrex"
    return w;
  }

  fs::path dir_;
};

TEST_F(CliUse, UnknownSubcommandsAndOptionsAreNamedWithTheNearestOne) {
  auto top = atrex({"swep", "run"});
  EXPECT_EQ(top.rc, 2) << top.output;
  EXPECT_NE(top.output.find("unknown subcommand `swep` of `atrex` (did you mean `sweep`?)"),
            std::string::npos)
      << top.output;
  auto sub = atrex({"sweep", "rnu", "x.yaml"});
  EXPECT_EQ(sub.rc, 2);
  EXPECT_NE(sub.output.find("unknown subcommand `rnu` of `atrex sweep` (did you mean `run`?)"),
            std::string::npos)
      << sub.output;
  auto opt = atrex({"eval", "x.cpp", "--operater", "rms_norm"});
  EXPECT_EQ(opt.rc, 2);
  EXPECT_NE(opt.output.find("unknown option --operater of `atrex eval` (did you mean "
                            "--operator?)"),
            std::string::npos)
      << opt.output;
  auto none = atrex({"hardware"});
  EXPECT_EQ(none.rc, 2);
  EXPECT_NE(none.output.find("`atrex hardware` needs a subcommand: list, measure"),
            std::string::npos)
      << none.output;
  EXPECT_EQ(none.output.find("A subcommand is required"), std::string::npos);
  // Far from every name: no guess, the list.
  auto far = atrex({"zzzzzzzz"});
  EXPECT_EQ(far.rc, 2);
  EXPECT_EQ(far.output.find("did you mean"), std::string::npos) << far.output;
  EXPECT_NE(far.output.find("its subcommands: "), std::string::npos) << far.output;
}

TEST_F(CliUse, EveryHelpHasAnExample) {
  const auto cmds = commands();
  ASSERT_GT(cmds.size(), 30u);
  for (const auto& c : cmds) {
    auto args = words(c);
    args.push_back("--help");
    auto r = atrex(args);
    EXPECT_EQ(r.rc, 0) << c << ": " << r.output;
    EXPECT_NE(r.output.find("Example:\n  atrex"), std::string::npos) << c << " --help:\n"
                                                                      << r.output;
  }
}

// Every option whose help says INT, UINT or FLOAT refuses a value far below and far above any
// sensible one, naming itself (exit code 2) - before any required argument is looked at. Each
// run is limited to 10 s: an unchecked option would otherwise run its command.
TEST_F(CliUse, NumericOptionsAreRangeChecked) {
  const std::regex numeric(R"(^\s+((?:-\w, )?(--[a-z0-9-]+))\s+(INT|UINT|FLOAT)\b)");
  int checked = 0;
  for (const auto& c : commands()) {
    auto args = words(c);
    auto help_args = args;
    help_args.push_back("--help");
    std::istringstream help(atrex(help_args).output);
    for (std::string line; std::getline(help, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, numeric)) continue;
      const std::string name = m[2];
      for (const char* value : {"-1000000000", "1e15"}) {
        auto bad = args;
        bad.push_back(name);
        bad.push_back(value);
        auto r = atrex(bad, {}, 10);
        EXPECT_EQ(r.rc, 2) << c << " " << name << " " << value << ": " << r.output;
        EXPECT_NE(r.output.find(name), std::string::npos)
            << c << " " << name << " " << value << " is not refused by name: " << r.output;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

TEST_F(CliUse, EvalOutNamingAFolderIsExitCode2BeforeAnythingRuns) {
  fs::create_directories(dir_ / "outdir");
  auto r = atrex({"eval", candidate("rms_norm_correct.cpp"), "--operator", "rms_norm",
                  "--out", (dir_ / "outdir").string()});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("is a folder; expected the path of a file"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("rename failed"), std::string::npos);
  EXPECT_EQ(r.output.find("evaluating"), std::string::npos) << "it ran: " << r.output;
  std::ofstream(dir_ / "afile") << "x";
  auto under_file = atrex({"eval", candidate("rms_norm_correct.cpp"), "--operator", "rms_norm",
                           "--out", (dir_ / "afile" / "r.jsonl").string()});
  EXPECT_EQ(under_file.rc, 2) << under_file.output;
  EXPECT_NE(under_file.output.find("is a file, not a folder"), std::string::npos)
      << under_file.output;
}

class EvalSignal : public CliUse, public ::testing::WithParamInterface<int> {};

// A correct candidate slowed to 0.3 s a call, on the 8 smallest shapes with one seed and no
// timing (about 3 s in all once compiled): the signal comes 1.5 s after the compile cache holds
// its library, so some shapes have finished and some have not. About 5 s with the compile.
TEST_P(EvalSignal, StopsAfterTheCurrentShapePrintsAndWritesWhatIsDone) {
  const int sig = GetParam();
  std::string src = slurp(candidate("rms_norm_correct.cpp"));
  src.insert(0, "#include <unistd.h>\n");
  const std::string entry = "atrex_candidate_run(const AtrexLaunch* launch) {";
  src.insert(src.find(entry) + entry.size(), "\n  ::usleep(300000);");
  std::ofstream(dir_ / "slow.cpp") << src;
  const fs::path out = dir_ / "records.jsonl", log = dir_ / "log.txt";
  // Everything the child needs is made before fork (only async-signal-safe calls after it).
  const std::vector<std::string> argv_s = {
      "atrex", "eval", (dir_ / "slow.cpp").string(), "--operator", "rms_norm", "--shapes",
      "smallest:8", "--seeds", "1", "--no-perf", "--unseen-shapes", "0", "--no-range-probe",
      "--no-edge-cases", "--out", out.string()};
  std::vector<std::string> env_s = {"ATREX_CACHE_DIR=" + (dir_ / "cache").string()};
  for (char** e = environ; *e; ++e) {
    if (std::string_view(*e).rfind("ATREX_CACHE_DIR=", 0) != 0) env_s.emplace_back(*e);
  }
  std::vector<char*> argv_p, env_p;
  for (auto& a : argv_s) argv_p.push_back(const_cast<char*>(a.c_str()));
  for (auto& e : env_s) env_p.push_back(const_cast<char*>(e.c_str()));
  argv_p.push_back(nullptr);
  env_p.push_back(nullptr);
  const std::string program = bin();
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(program.c_str(), argv_p.data(), env_p.data());
    ::_exit(127);
  }
  ::close(fd);
  // The library in the compile cache: the shapes are running.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto compiled = [&] {
    std::error_code ec;
    if (!fs::exists(dir_ / "cache", ec)) return false;
    for (auto it = fs::recursive_directory_iterator(dir_ / "cache", ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) return false;
      if (it->path().extension() == ".so") return true;
    }
    return false;
  };
  while (!compiled() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(::kill(pid, sig), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string text = slurp(log);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << text;
  const int done = lines_in(out);
  EXPECT_GE(done, 1) << text;
  EXPECT_LT(done, 8) << text;
  EXPECT_NE(text.find(fmt::format("interrupted by {}: {} of 8 shape(s) evaluated",
                                  sig == SIGINT ? "SIGINT" : "SIGTERM", done)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("S_i(rms_norm) ="), std::string::npos) << text;
  // Each record written is a whole atrex.eval/1 record of a finished shape.
  std::ifstream in(out);
  for (std::string l; std::getline(in, l);) {
    auto j = Json::parse(l);
    EXPECT_EQ(j.value("status", ""), "ok") << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Signals, EvalSignal, ::testing::Values(SIGINT, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(p.param == SIGINT ? "SIGINT" : "SIGTERM");
                         });

TEST_F(CliUse, TheNoteColumnShowsTheCauseFirst) {
  auto segv = atrex({"eval", candidate("rms_norm_segfault.cpp"), "--operator", "rms_norm",
                     "--shapes", "15", "--no-perf", "--unseen-shapes", "0"});
  EXPECT_EQ(segv.rc, 1) << segv.output;
  EXPECT_TRUE(std::regex_search(segv.output, std::regex(R"(\n\s+15\s+crashed\s.*  SIGSEGV)")))
      << segv.output;
  auto syntax = atrex({"eval", candidate("rms_norm_syntax_error.cpp"), "--operator", "rms_norm",
                       "--shapes", "15", "--no-perf", "--unseen-shapes", "0"});
  EXPECT_EQ(syntax.rc, 1) << syntax.output;
  EXPECT_TRUE(std::regex_search(syntax.output,
                                std::regex(R"(\n\s+15\s+compile_error\s.*  [^ ]*:\d+:\d+: error: )")))
      << syntax.output;
  auto mutates = atrex({"eval", candidate("rms_norm_mutates_input.cpp"), "--operator",
                        "rms_norm", "--shapes", "15", "--no-perf", "--unseen-shapes", "0"});
  EXPECT_EQ(mutates.rc, 1) << mutates.output;
  EXPECT_TRUE(std::regex_search(mutates.output,
                                std::regex(R"(\n\s+15\s+wrong_result\s.*  modified its input)")))
      << mutates.output;
}

TEST_F(CliUse, SweepPlanPrintsTheResolvedPlanWithoutRunning) {
  const std::string sweep = std::string(ATREX_TEST_SWEEPS_DIR) + "/local-default.yaml";
  auto r = atrex({"sweep", "plan", sweep, "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  // stderr is in the output too (a fresh cache measures this host first: a log line).
  const Json plan = Json::parse(r.output.substr(r.output.find("{\n")));
  EXPECT_EQ(plan["schema"], "atrex.sweep-plan/1");
  int64_t candidates = 0, shape_evals = 0, finals = 0, quick = 0;
  for (const auto& op : plan["operators"]) {
    finals += static_cast<int64_t>(op["shapes"].size());
    quick += static_cast<int64_t>(op["quick_shapes"].size());
    EXPECT_FALSE(op["shapes"].empty()) << op.dump();
  }
  const auto n_ops = static_cast<int64_t>(plan["operators"].size());
  for (const auto& a : plan["agents"]) {
    candidates += (a["iterations"].get<int64_t>() + 1) * n_ops;
    shape_evals += a["iterations"].get<int64_t>() * quick + finals;
  }
  EXPECT_GT(n_ops, 0);
  EXPECT_EQ(plan["estimate"]["candidates"], candidates);
  EXPECT_EQ(plan["estimate"]["shape_evaluations"], shape_evals);
  EXPECT_GT(plan["estimate"]["seconds"].get<double>(), 0);
  EXPECT_FALSE(fs::exists(dir_ / "results")) << "plan wrote results";
  auto text = atrex({"sweep", "plan", sweep});
  EXPECT_EQ(text.rc, 0) << text.output;
  EXPECT_NE(text.output.find("estimate: " + std::to_string(candidates) + " candidate(s)"),
            std::string::npos)
      << text.output;
  // What `sweep run` refuses, plan refuses the same way: an empty operator list, duplicate ids.
  std::ofstream(dir_ / "empty.yaml") << "name: e\nagents: [{name: s, provider: search}]\n"
                                        "operators: []\n";
  auto empty = atrex({"sweep", "plan", (dir_ / "empty.yaml").string()});
  EXPECT_EQ(empty.rc, 2) << empty.output;
  std::ofstream(dir_ / "dup.yaml")
      << "name: d\nagents: [{name: s, provider: search}]\noperators: [rms_norm]\n"
         "shapes: {cpu: {ids: {rms_norm: [3, 5, 3]}}}\n";
  auto dup = atrex({"sweep", "plan", (dir_ / "dup.yaml").string(), "--backend", "cpu"});
  EXPECT_EQ(dup.rc, 2) << dup.output;
  EXPECT_NE(dup.output.find("duplicate shape id 3"), std::string::npos) << dup.output;
}

// The measurement takes about 2 s on 2 cores (a 256 MiB copy 5 times, 20M FMAs per thread 3
// times); each test measures twice.
TEST_F(CliUse, HardwareMeasureReportsItsSpreadAndKeepsACachedProfileItDisagreesWith) {
  const std::map<std::string, std::string> calm = {{"ATREX_LOADAVG", "0"}};
  auto first = atrex({"hardware", "measure", "--backend", "cpu", "--json"}, calm);
  ASSERT_EQ(first.rc, 0) << first.output;
  const Json m = Json::parse(first.output.substr(first.output.find('{')));
  EXPECT_TRUE(m["cached"].get<bool>());
  EXPECT_GE(m["copy_spread"].get<double>(), 0);
  EXPECT_GE(m["fp32_spread"].get<double>(), 0);
  const fs::path cached = dir_ / "cache" / "hardware" / "host-cpu.yaml";
  ASSERT_TRUE(fs::exists(cached));
  // The cached figures made 3x higher than this host reaches: a new measurement differs by far
  // more than its spread, and is refused.
  std::string yaml = slurp(cached);
  const std::regex bw(R"(hbm: ([0-9.e+]+))");
  std::smatch bm;
  ASSERT_TRUE(std::regex_search(yaml, bm, bw)) << yaml;
  const double v = std::stod(bm[1]);
  yaml = std::regex_replace(yaml, bw, fmt::format("hbm: {:.0f}", 3 * v));
  std::ofstream(cached) << yaml;
  auto refused = atrex({"hardware", "measure", "--backend", "cpu"}, calm);
  EXPECT_EQ(refused.rc, 1) << refused.output;
  EXPECT_NE(refused.output.find("was kept"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("more than the measurement's spread"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("spread"), std::string::npos);
  EXPECT_EQ(slurp(cached), yaml) << "the cached profile was replaced";
}

TEST_F(CliUse, HardwareMeasureOnALoadedHostKeepsTheCacheUnlessForced) {
  auto first = atrex({"hardware", "measure", "--backend", "cpu"}, {{"ATREX_LOADAVG", "0"}});
  ASSERT_EQ(first.rc, 0) << first.output;
  const fs::path cached = dir_ / "cache" / "hardware" / "host-cpu.yaml";
  const std::string before = slurp(cached);
  // Two runs queued per hardware thread: loaded.
  auto loaded = atrex({"hardware", "measure", "--backend", "cpu"}, {{"ATREX_LOADAVG", "64"}});
  EXPECT_EQ(loaded.rc, 1) << loaded.output;
  EXPECT_NE(loaded.output.find("the host is loaded"), std::string::npos) << loaded.output;
  EXPECT_EQ(slurp(cached), before);
  auto forced =
      atrex({"hardware", "measure", "--backend", "cpu", "--force"}, {{"ATREX_LOADAVG", "64"}});
  EXPECT_EQ(forced.rc, 0) << forced.output;
  EXPECT_NE(forced.output.find("(--force: the host is loaded"), std::string::npos)
      << forced.output;
  EXPECT_NE(slurp(cached), before) << "--force did not replace it";
}

// docs/hardware.md: "pass `--hardware path/to/file.yaml`".
TEST_F(CliUse, HardwareOptionTakesAProfileFile) {
  std::string yaml = slurp(std::string(ATREX_TEST_SWEEPS_DIR) +
                           "/../problems/atrex-bench/configs/hardware/H20.yaml");
  ASSERT_FALSE(yaml.empty());
  yaml = std::regex_replace(yaml, std::regex(R"(name: *H20)"), "name: my-h20", 
                            std::regex_constants::format_first_only);
  std::ofstream(dir_ / "my.yaml") << yaml;
  auto r = atrex({"roofline", "--hardware", (dir_ / "my.yaml").string(), "--operator", "rms_norm"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("hardware my-h20:"), std::string::npos) << r.output;
  auto missing = atrex({"roofline", "--hardware", (dir_ / "none.yaml").string()});
  EXPECT_EQ(missing.rc, 2) << missing.output;
  EXPECT_NE(missing.output.find("none.yaml"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace atrex
