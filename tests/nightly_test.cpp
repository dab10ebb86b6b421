// The nightly regression benchmark end to end on the CPU backend: sweeps/nightly.yaml (the
// `fixed` provider re-measuring the reference candidates and, with --kernels-from, the best
// kernel per operator of an earlier sweep), run three nights by deploy/nightly/atrex-nightly.sh
// (regress against the previous nights, the oldest night deleted past ATREX_NIGHTLY_KEEP), the
// best kernels a sweep keeps as files (kernels/index.json), and the systemd units checked by
// `systemd-analyze verify`. One operator, one small shape: each night takes seconds.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

struct CmdResult {
  int rc;
  std::string output;
};

class Nightly : public ::testing::Test {
 protected:
  static fs::path root() {
    return fs::temp_directory_path() / ("atrex_nightly_" + std::to_string(::getpid()));
  }
  static fs::path repo() { return fs::path(ATREX_TEST_SOURCE_DIR); }
  static std::string bin() { return std::string(ATREX_TEST_BIN_DIR) + "/atrex"; }
  static CmdResult run(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
                 int timeout_s = 300) {
    SubprocessOptions o;
    o.argv = std::move(argv);
    o.timeout = std::chrono::seconds(timeout_s);
    o.working_dir = root();
    o.output_tail_bytes = 1 << 20;
    o.extra_env = std::move(env);
    o.extra_env["ATREX_CACHE_DIR"] = (root() / "cache").string();
    auto r = run_subprocess(o);
    EXPECT_TRUE(r) << r.error().message;
    if (!r) return CmdResult{-1, ""};
    return CmdResult{r->timed_out ? -1 : r->exit_code, r->output_tail};
  }
  static CmdResult atrex(std::vector<std::string> args) {
    args.insert(args.begin(), bin());
    return run(std::move(args));
  }
  // The settings of one night: rms_norm only, its one smallest shape, the CPU backend.
  static std::map<std::string, std::string> night_env(const std::string& night) {
    return {{"ATREX_NIGHTLY_ROOT", (root() / "nights").string()},
            {"ATREX_BIN", bin()},
            {"ATREX_NIGHTLY_SWEEP", (repo() / "sweeps" / "nightly.yaml").string()},
            {"ATREX_NIGHTLY_KERNELS_FROM", (root() / "src").string()},
            {"ATREX_NIGHTLY_KEEP", "2"},
            {"ATREX_NIGHTLY_BASELINES", "3"},
            // Timings of the same kernel move by tens of percent on a loaded 2-core machine
            // (report_cli_test.cpp): only a 2x change would be a regression here.
            {"ATREX_NIGHTLY_REGRESS_ARGS", "--min-effect 1.0"},
            {"ATREX_SWEEP_NIGHT", night},
            {"ATREX_SWEEP_BACKEND", "cpu"},
            {"ATREX_SWEEP_HARDWARE", "H20"},
            {"ATREX_SWEEP_OPERATORS", "[rms_norm]"},
            {"ATREX_SWEEP_CPU_MAX_ELEMENTS", "1"},  // none fit: the smallest shape (at_least 1)
            {"ATREX_SWEEP_CPU_SHAPES", "1"}};
  }
  static CmdResult night(const std::string& name) {
    return run({"bash", (repo() / "deploy" / "nightly" / "atrex-nightly.sh").string()},
               night_env(name), 600);
  }
  // An agent sweep whose best kernels the nights re-measure (the regress fixture's templates:
  // rms_norm and l2_norm, one template each).
  static void SetUpTestSuite() {
    fs::remove_all(root());
    fs::create_directories(root());
    fs::copy(fs::path(ATREX_TEST_FIXTURES_DIR) / "regress", root() / "fx",
             fs::copy_options::recursive);
    auto r = atrex({"sweep", "run", (root() / "fx" / "nightly_same.yaml").string(), "--out", "src"});
    ASSERT_EQ(r.rc, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root()); }
  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  static const Json* agent(const Json& report, const std::string& name) {
    for (const auto& a : report["agents"])
      if (a["agent"] == name) return &a;
    return nullptr;
  }
  static const Json* op(const Json& agent, const std::string& name) {
    for (const auto& o : agent["operators"])
      if (o["operator"] == name) return &o;
    return nullptr;
  }
};

TEST_F(Nightly, ASweepKeepsItsBestKernelsAsFilesWithAnIndex) {
  auto index = read_json_file(root() / "src" / "kernels" / "index.json");
  ASSERT_TRUE(index) << index.error().message;
  EXPECT_EQ((*index)["schema"], "atrex.kernels/1");
  EXPECT_EQ((*index)["backend"], "cpu");
  auto report = read_json_file(root() / "src" / "report.json");
  ASSERT_TRUE(report);
  ASSERT_EQ((*index)["kernels"].size(), 2u) << index->dump(1);
  for (const auto& k : (*index)["kernels"]) {
    const std::string source = read(root() / "src" / k["file"].get<std::string>());
    ASSERT_FALSE(source.empty()) << k.dump();
    EXPECT_EQ(sha256_hex(source), k["sha256"]) << "the file is the measured candidate";
    const Json* o = op(*agent(*report, "reference"), k["operator"]);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ((*o)["candidate_sha256"], k["sha256"]);
    EXPECT_DOUBLE_EQ((*o)["s_i"].get<double>(), k["s_i"].get<double>());
  }
}

TEST_F(Nightly, ReportWritesTheBestKernelsWhereItsOutGoes) {
  fs::permissions(root() / "src", fs::perms::owner_write, fs::perm_options::remove);
  auto r = atrex({"report", "src", "--out", "src-report"});
  fs::permissions(root() / "src", fs::perms::owner_write, fs::perm_options::add);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(read(root() / "src-report" / "kernels" / "index.json"),
            read(root() / "src" / "kernels" / "index.json"));
}

TEST_F(Nightly, ThreeNightsRegressAgainstThePreviousOnesAndKeepTheNewestTwo) {
  auto n1 = night("2026-01-01");
  ASSERT_EQ(n1.rc, 0) << n1.output;
  EXPECT_NE(n1.output.find("is the first baseline"), std::string::npos) << n1.output;
  auto report = read_json_file(root() / "nights" / "2026-01-01" / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE((*report)["partial"].get<bool>());
  // Both fixed agents measured rms_norm: the reference candidate and the source sweep's best.
  auto index = read_json_file(root() / "src" / "kernels" / "index.json");
  ASSERT_TRUE(index);
  std::string best_sha;
  for (const auto& k : (*index)["kernels"])
    if (k["operator"] == "rms_norm") best_sha = k["sha256"];
  const Json* best = agent(*report, "best");
  const Json* ref = agent(*report, "reference");
  ASSERT_TRUE(best && ref) << report->dump(1).substr(0, 2000);
  EXPECT_EQ((*op(*best, "rms_norm"))["candidate_sha256"], best_sha);
  EXPECT_EQ((*op(*ref, "rms_norm"))["status"], "correct") << (*op(*ref, "rms_norm")).dump();
  EXPECT_GT((*op(*best, "rms_norm"))["s_i"].get<double>(), 0);
  EXPECT_FALSE((*op(*ref, "l2_norm"))["attempted"].get<bool>()) << "only ATREX_SWEEP_OPERATORS";

  auto n2 = night("2026-01-02");
  ASSERT_EQ(n2.rc, 0) << n2.output;
  auto reg = read_json_file(root() / "nights" / "2026-01-02" / "regress" / "regress.json");
  ASSERT_TRUE(reg) << reg.error().message << "\n" << n2.output;
  EXPECT_EQ((*reg)["schema"], "atrex.regress/1");
  EXPECT_EQ((*reg)["baselines"].size(), 1u);
  EXPECT_EQ((*reg)["changes"].size(), 2u) << "two agents x one shape: " << reg->dump(1);
  for (const auto& c : (*reg)["changes"]) EXPECT_NE(c["verdict"], "missing") << c.dump();

  auto n3 = night("2026-01-03");
  ASSERT_EQ(n3.rc, 0) << n3.output;
  reg = read_json_file(root() / "nights" / "2026-01-03" / "regress" / "regress.json");
  ASSERT_TRUE(reg);
  EXPECT_EQ((*reg)["baselines"].size(), 2u) << "both earlier nights";
  EXPECT_FALSE(fs::exists(root() / "nights" / "2026-01-01")) << "KEEP=2 removes the oldest";
  EXPECT_TRUE(fs::exists(root() / "nights" / "2026-01-02" / "report.json"));
  EXPECT_TRUE(fs::exists(root() / "nights" / "2026-01-03" / "report.json"));
}

TEST_F(Nightly, AMissingKernelOfOneNightIsARegressionExitCode1) {
  // Night x measured rms_norm; night y (same file, other night) finds no best kernel for it:
  // the wrapper's exit code is regress's 1, and the change says `missing` or `broken`.
  fs::remove_all(root() / "nights-missing");
  auto env = night_env("2026-02-01");
  env["ATREX_NIGHTLY_ROOT"] = (root() / "nights-missing").string();
  auto script = (repo() / "deploy" / "nightly" / "atrex-nightly.sh").string();
  auto a = run({"bash", script}, env, 600);
  ASSERT_EQ(a.rc, 0) << a.output;
  fs::remove_all(root() / "src-empty");
  fs::copy(root() / "src", root() / "src-empty", fs::copy_options::recursive);
  auto index = read_json_file(root() / "src-empty" / "kernels" / "index.json");
  ASSERT_TRUE(index);
  (*index)["kernels"] = Json::array();
  ASSERT_TRUE(write_text_file_atomic(root() / "src-empty" / "kernels" / "index.json", index->dump()));
  env["ATREX_SWEEP_NIGHT"] = "2026-02-02";
  env["ATREX_NIGHTLY_KERNELS_FROM"] = (root() / "src-empty").string();
  auto b = run({"bash", script}, env, 600);
  EXPECT_EQ(b.rc, 1) << b.output;
  EXPECT_NE(b.output.find("REGRESSION"), std::string::npos) << b.output;
  const std::string md = read(root() / "nights-missing" / "2026-02-02" / "regress" / "regress.md");
  EXPECT_NE(md.find("best"), std::string::npos) << md;
}

TEST_F(Nightly, ATamperedKernelFileIsRefusedNotMeasured) {
  fs::remove_all(root() / "src-bad");
  fs::copy(root() / "src", root() / "src-bad", fs::copy_options::recursive);
  auto index = read_json_file(root() / "src-bad" / "kernels" / "index.json");
  ASSERT_TRUE(index);
  fs::path file;
  for (const auto& k : (*index)["kernels"])
    if (k["operator"] == "rms_norm") file = root() / "src-bad" / k["file"].get<std::string>();
  ASSERT_FALSE(file.empty()) << index->dump(1);
  { std::ofstream(file, std::ios::app) << "\n// changed after the sweep\n"; }
  auto env = night_env("2026-03-01");
  auto r = run({bin(), "sweep", "run", (repo() / "sweeps" / "nightly.yaml").string(), "--out",
                "bad-night", "--kernels-from", (root() / "src-bad").string()},
               env, 600);
  const std::string report = read(root() / "bad-night" / "report.json");
  EXPECT_NE(report.find("the index says"), std::string::npos) << r.output << report.substr(0, 3000);
}

TEST_F(Nightly, KernelsFromARefusedFolderIsExitCode2) {
  fs::create_directories(root() / "no-index");
  { std::ofstream(root() / "no-index" / "manifest.json") << "{}"; }
  auto env = night_env("2026-04-01");
  auto r = run({bin(), "sweep", "run", (repo() / "sweeps" / "nightly.yaml").string(), "--out",
                "x", "--kernels-from", (root() / "no-index").string()},
               env);
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("kernels/index.json"), std::string::npos) << r.output;
  // Any sweep file with an agents list takes --kernels-from: the agent best is added.
  auto r2 = run({bin(), "sweep", "run", (root() / "fx" / "nightly_same.yaml").string(), "--out",
                 "y", "--kernels-from", (root() / "src").string()},
                env);
  EXPECT_EQ(r2.rc, 0) << "nightly_same has agent reference only: best is added" << r2.output;
  auto rep = read_json_file(root() / "y" / "report.json");
  ASSERT_TRUE(rep);
  EXPECT_NE(agent(*rep, "best"), nullptr);
}

TEST_F(Nightly, WrapperSettingsOutOfRangeAreExitCode2) {
  auto env = night_env("2026-05-01");
  env["ATREX_NIGHTLY_KEEP"] = "1";
  auto r = run({"bash", (repo() / "deploy" / "nightly" / "atrex-nightly.sh").string()}, env);
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("ATREX_NIGHTLY_KEEP"), std::string::npos) << r.output;
  env = night_env("../escape");
  r = run({"bash", (repo() / "deploy" / "nightly" / "atrex-nightly.sh").string()}, env);
  EXPECT_EQ(r.rc, 2) << r.output;
}

TEST_F(Nightly, SystemdUnitsPassSystemdAnalyzeVerify) {
  if (run({"sh", "-c", "command -v systemd-analyze"}).rc != 0) {
    GTEST_SKIP() << "systemd-analyze not installed: the units are not checked here";
  }
  // The units as shipped, with ExecStart pointing at this checkout's script (verify checks that
  // the program exists) and the settings file optional (it is the site's).
  const fs::path dir = root() / "units";
  fs::create_directories(dir);
  const fs::path src = repo() / "deploy" / "nightly";
  std::string service = read(src / "atrex-nightly.service");
  const std::string exec = "ExecStart=/usr/local/lib/atrex/atrex-nightly.sh";
  ASSERT_NE(service.find(exec), std::string::npos);
  service.replace(service.find(exec), exec.size(),
                  "ExecStart=" + (src / "atrex-nightly.sh").string());
  const std::string envfile = "EnvironmentFile=/etc/atrex/nightly.env";
  ASSERT_NE(service.find(envfile), std::string::npos);
  service.replace(service.find(envfile), envfile.size(), "EnvironmentFile=-/etc/atrex/nightly.env");
  { std::ofstream(dir / "atrex-nightly.service") << service; }
  fs::copy_file(src / "atrex-nightly.timer", dir / "atrex-nightly.timer",
                fs::copy_options::overwrite_existing);
  auto r = run({"systemd-analyze", "verify", (dir / "atrex-nightly.service").string(),
                (dir / "atrex-nightly.timer").string()});
  EXPECT_EQ(r.rc, 0) << r.output;
  // verify exits 0 on a setting it ignores (a misspelt value): any complaint fails the test.
  EXPECT_EQ(r.output, "") << r.output;
  // And it does complain about a bad unit (the check is not blind).
  std::string bad = service;
  bad.replace(bad.find("Type=oneshot"), 12, "Type=oneshut");
  { std::ofstream(dir / "atrex-nightly.service") << bad; }
  r = run({"systemd-analyze", "verify", (dir / "atrex-nightly.service").string()});
  EXPECT_NE(r.output, "");
}

}  // namespace
}  // namespace atrex
