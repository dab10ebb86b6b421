// The atrex binary end to end: bad input gives one clear message and exit code 2; a sweep
// that meets crashing and hanging candidates completes; a second run resumes without
// re-evaluating anything.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/problems/hardware.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/host_measure.h"
#include "atrex/common/process/subprocess.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

struct CliRun {
  int rc;
  std::string output;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliRun atrex(std::vector<std::string> args, int timeout_s = 300) {
    SubprocessOptions o;
    o.argv = {std::string(ATREX_TEST_BIN_DIR) + "/atrex"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = std::chrono::seconds(timeout_s);
    o.working_dir = dir_;
    o.output_tail_bytes = 1 << 20;
    o.extra_env = {{"ATREX_CACHE_DIR", (dir_ / "cache").string()}};
    auto r = run_subprocess(o);
    EXPECT_TRUE(r) << r.error().message;
    return CliRun{r->timed_out ? -1 : r->exit_code, r->output_tail};
  }

  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

  fs::path dir_;
};

TEST_F(Cli, MalformedSweepFileIsOneMessageAndExitCode2) {
  auto f = write("bad.yaml", "name: x\nagents: [\n");
  auto r = atrex({"sweep", "run", f.string()});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("bad.yaml: not valid YAML"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one message:\n" << r.output;
}

TEST_F(Cli, SweepFileWithUnknownFieldNamesIt) {
  auto f = write("s.yaml", "name: x\nagents: [{name: a}]\nevaluation: {seedz: 3}\n");
  auto r = atrex({"sweep", "run", f.string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("evaluation.seedz"), std::string::npos) << r.output;
}

TEST_F(Cli, SweepWithUnknownOperatorIsExitCode2) {
  auto f = write("s.yaml",
                 "name: x\nbackend: cpu\nhardware: H20\nagents: [{name: a}]\noperators: [rms_norm, "
                 "rmsnorm]\n");
  auto r = atrex({"sweep", "run", f.string()});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("field \"operators[1]\": unknown operator \"rmsnorm\""),
            std::string::npos)
      << r.output;
}

TEST_F(Cli, MissingCandidateFileIsExitCode2) {
  auto r = atrex({"eval", "nope.cpp", "--operator", "rms_norm"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("nope.cpp: no such file"), std::string::npos) << r.output;
}

TEST_F(Cli, EvalOfUnknownOperatorIsExitCode2) {
  auto r = atrex({"eval", std::string(ATREX_TEST_CANDIDATES_DIR) + "/rms_norm_correct.cpp",
                  "--operator", "rmsnorm"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("unknown operator \"rmsnorm\""), std::string::npos) << r.output;
}

TEST_F(Cli, BadFlagIsOneLineAndExitCode2) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"eval", "--frobnicate"}, {"problems", "show"}, {"sweep"}}) {
    auto r = atrex(args);
    EXPECT_EQ(r.rc, 2) << r.output;
    EXPECT_EQ(r.output.rfind("atrex: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

TEST_F(Cli, EvalPrintsAPerShapeTableAndSi) {
  auto r = atrex({"eval", std::string(ATREX_TEST_CANDIDATES_DIR) + "/rms_norm_correct.cpp",
                  "--operator", "rms_norm", "--shapes", "15,28", "--hardware", "H20"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("T_roofline us"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("S_i(rms_norm) ="), std::string::npos) << r.output;
  auto wrong = atrex({"eval", std::string(ATREX_TEST_CANDIDATES_DIR) + "/rms_norm_wrong.cpp",
                      "--operator", "rms_norm", "--shapes", "15", "--hardware", "H20"});
  EXPECT_EQ(wrong.rc, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("wrong_result"), std::string::npos);
}

// A GPU backend on a machine without a GPU is not the candidate's failure (exit code 1) nor bad
// input (2): exit code 3, unavailable (README "Exit codes"). With a named profile the shapes are
// still recorded `rejected`, and --out written.
TEST_F(Cli, GpuCommandsWithoutAGpuExitWithCode3) {
  if (runner::probe_environment().has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  const std::string cu = std::string(ATREX_TEST_CANDIDATES_DIR) + "/rms_norm_correct.cu";
  auto r = atrex({"eval", cu, "--operator", "rms_norm", "--shapes", "15"});
  EXPECT_EQ(r.rc, 3) << r.output;
  EXPECT_NE(r.output.find("atrex: the cuda backend needs a GPU and this machine has none"),
            std::string::npos)
      << r.output;
  auto named = atrex({"eval", cu, "--operator", "rms_norm", "--shapes", "15,28", "--hardware",
                      "H20", "--out", "r.jsonl"});
  EXPECT_EQ(named.rc, 3) << named.output;
  EXPECT_NE(named.output.find("the cuda backend needs a GPU"), std::string::npos) << named.output;
  std::ifstream in(dir_ / "r.jsonl");
  int rejected = 0;
  for (std::string line; std::getline(in, line);)
    rejected += Json::parse(line)["status"] == "rejected";
  EXPECT_EQ(rejected, 2);
  auto dump =
      atrex({"problems", "dump", "rms_norm", "--shapes", "15", "--backend", "cuda", "--out", "d"});
  EXPECT_EQ(dump.rc, 3) << dump.output;
}

// A host-cpu profile in this test's cache, as `atrex hardware measure` writes it, for `cpu`
// (default: this CPU), with figures no measurement gives: cached figures are told from measured.
void cache_host_profile(const fs::path& dir, std::string cpu = runner::host_cpu_model()) {
  runner::HostCeilings c;
  c.copy_bytes_per_s = 123e9;
  c.fp32_flops_per_s = 4.56e12;
  c.threads = 2;
  c.isa = "test";
  c.cpu_name = std::move(cpu);
  fs::create_directories(dir / "cache" / "hardware");
  std::ofstream(dir / "cache" / "hardware" / "host-cpu.yaml")
      << problems::hardware_profile_yaml(runner::host_profile(c));
}

// `hardware list` shows host-cpu's cached figures and where they come from (the file, the
// measurement); "measured on demand" only when nothing is cached for this CPU model.
// `atrex compile` runs the compiler in the compile sandbox, as `atrex eval` does, and an object
// compiled with --no-sandbox never serves a sandboxed compile (the compile-sandbox attack of
// 2026-12-06: an .incbin of a host file compiled by `atrex compile`, then served from the cache
// to a sandboxed `atrex eval`, which handed the file out in the candidate's error).
TEST_F(Cli, CompileIsSandboxedAndUnsandboxedObjectsAreCachedApart) {
  write("secret.txt", "TOPSECRET\n");
  const std::string source =
      "#include \"atrex/candidate_util.h\"\n"
      "using namespace atrex::cand;\n"
      "ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT\n"
      "asm(\".section .rodata\\n.global exf_begin\\nexf_begin:\\n.incbin \\\"" +
      (dir_ / "secret.txt").string() +
      "\\\"\\n.byte 0\\n.text\\n\");\n"
      "extern \"C\" const char exf_begin[];\n"
      "ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch*) {\n"
      "  return fail(\"%s\", exf_begin);\n"
      "}\n";
  const auto cand = write("reads_host.cpp", source);
  auto outside = atrex({"compile", cand.string(), "--no-sandbox"});
  EXPECT_EQ(outside.rc, 0) << "the honest twin: without the sandbox the file is there\n"
                           << outside.output;
  auto inside = atrex({"compile", cand.string()});
  EXPECT_EQ(inside.rc, 1) << inside.output;
  EXPECT_NE(inside.output.find("file not found"), std::string::npos) << inside.output;
  EXPECT_EQ(inside.output.find("(cache hit)"), std::string::npos) << inside.output;
  auto eval = atrex({"eval", cand.string(), "--operator", "rms_norm", "--shapes", "smallest:1",
                     "--seeds", "1", "--no-perf"});
  EXPECT_EQ(eval.rc, 1) << eval.output;
  EXPECT_EQ(eval.output.find("TOPSECRET"), std::string::npos) << eval.output;
  EXPECT_NE(eval.output.find("compile_error"), std::string::npos) << eval.output;
}

TEST_F(Cli, HardwareListShowsTheCachedHostCpuProfile) {
  const std::string file = (dir_ / "cache" / "hardware" / "host-cpu.yaml").string();
  auto before = atrex({"hardware", "list"});
  ASSERT_EQ(before.rc, 0) << before.output;
  EXPECT_NE(before.output.find("host-cpu         (measured on demand: not measured yet"),
            std::string::npos)
      << before.output;
  cache_host_profile(dir_);
  auto after = atrex({"hardware", "list"});
  ASSERT_EQ(after.rc, 0) << after.output;
  EXPECT_EQ(after.output.find("measured on demand"), std::string::npos) << after.output;
  const size_t row = after.output.find("\nhost-cpu ");
  ASSERT_NE(row, std::string::npos) << after.output;
  const std::string line = after.output.substr(row + 1, after.output.find('\n', row + 1) - row - 1);
  for (const std::string& figure : {std::string(" 0.12 "), std::string(" 4.6 "), file}) {
    EXPECT_NE(line.find(figure), std::string::npos) << figure << " not in: " << line;
  }
  EXPECT_NE(after.output.find("host-cpu: measured by atrex on"), std::string::npos) << after.output;
  auto json = atrex({"hardware", "list", "--json"});
  ASSERT_EQ(json.rc, 0) << json.output;
  const Json listed = Json::parse(json.output);
  Json host;
  for (const auto& p : listed["profiles"]) {
    if (p["name"] == "host-cpu") host = p;
  }
  EXPECT_EQ(host["cached"], true) << json.output;
  EXPECT_EQ(host["hbm_bytes_per_s"], 123e9) << host.dump();
  EXPECT_EQ(host["file"], file);
  // Another CPU model's profile is not this host's: measured on demand, and said why.
  cache_host_profile(dir_, "Some Other CPU");
  auto other = atrex({"hardware", "list"});
  EXPECT_NE(other.output.find("is of another CPU (Some Other CPU)"), std::string::npos)
      << other.output;
}

// host-cpu is the profile cpu scores use: `atrex roofline` takes it too, from the cache as the
// evaluator does (measured there when none is cached).
TEST_F(Cli, RooflineTakesTheHostCpuProfileFromTheCache) {
  cache_host_profile(dir_);
  auto r = atrex({"roofline", "--hardware", "host-cpu", "--operator", "rms_norm", "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  const Json j = Json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["hardware"], "host-cpu");
  EXPECT_EQ(j["hardware_file"], (dir_ / "cache" / "hardware" / "host-cpu.yaml").string());
  ASSERT_FALSE(j["shapes"].empty()) << r.output;
  for (const auto& s : j["shapes"]) {
    const double q = s["q_read_bytes"].get<double>() + s["q_write_bytes"].get<double>();
    EXPECT_NEAR(s["t_memory_us"].get<double>(), q / 123e9 * 1e6, 1e-9 * q) << s.dump();
  }
  auto text = atrex({"roofline", "--hardware", "host-cpu", "--operator", "rms_norm"});
  ASSERT_EQ(text.rc, 0) << text.output;
  EXPECT_NE(text.output.find("hardware host-cpu: HBM 0.12 TB/s"), std::string::npos) << text.output;
}

TEST_F(Cli, ProblemsListHas30OperatorsAndShowHidesEvaluatorData) {
  auto r = atrex({"problems", "list", "--json"});
  ASSERT_EQ(r.rc, 0);
  Json j = Json::parse(r.output);
  EXPECT_EQ(j["operators"].size(), 30u);
  auto show = atrex({"problems", "show", "fused_moe", "--json"});
  ASSERT_EQ(show.rc, 0);
  for (const char* hidden : {"production_performance", "performance_us", "semantic_W_flops",
                             "SOL_time", "origin_kernel"}) {
    EXPECT_EQ(show.output.find(hidden), std::string::npos) << hidden;
  }
}

TEST_F(Cli, SweepWithCrashingAndHangingCandidatesCompletesAndResumes) {
  fs::copy(ATREX_TEST_FIXTURES_DIR, dir_ / "fx", fs::copy_options::recursive);
  const std::string sweep = (dir_ / "fx" / "crash_sweep.yaml").string();
  auto r = atrex({"sweep", "run", sweep, "--out", "out"}, 600);
  ASSERT_EQ(r.rc, 0) << r.output;
  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  const Json& agent = (*report)["agents"][0];
  EXPECT_EQ(agent["agent"], "fixture");
  Json rms;
  for (const auto& o : agent["operators"])
    if (o["operator"] == "rms_norm") rms = o;
  EXPECT_EQ(rms["status"], "correct") << rms.dump();
  EXPECT_GT(rms["s_i"].get<double>(), 0.0);
  EXPECT_GT(agent["s_agg"].get<double>(), 0.0);
  // The audit trail shows the crash and the timeout.
  std::ifstream audit(dir_ / "out" / "audit" / "fixture" / "rms_norm.jsonl");
  std::string all((std::istreambuf_iterator<char>(audit)), {});
  EXPECT_NE(all.find("\"status\":\"crashed\""), std::string::npos);
  EXPECT_NE(all.find("\"status\":\"timeout\""), std::string::npos);
  // Running again resumes: nothing is evaluated twice.
  auto count_lines = [&] {
    std::ifstream in(dir_ / "out" / "results.jsonl");
    return std::count(std::istreambuf_iterator<char>(in), {}, '\n');
  };
  const auto before = count_lines();
  auto again = atrex({"sweep", "run", sweep, "--out", "out"}, 120);
  ASSERT_EQ(again.rc, 0) << again.output;
  EXPECT_EQ(count_lines(), before);
  // A different sweep cannot reuse that folder.
  auto other = write(
      "other.yaml",
      "name: other\nbackend: cpu\nhardware: H20\nagents: [{name: a}]\noperators: [l2_norm]\n");
  auto clash = atrex({"sweep", "run", other.string(), "--out", "out"});
  EXPECT_EQ(clash.rc, 2) << clash.output;
  EXPECT_NE(clash.output.find("different sweep"), std::string::npos);
}

}  // namespace
}  // namespace atrex
