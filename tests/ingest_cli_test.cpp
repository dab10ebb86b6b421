// `atrex ingest` end to end: a suite `problems list` and `roofline` read, and exit code 2 with one
// clear message for the inputs it cannot use (issue 18, "Must show").
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/ingest/ingest.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

struct CliRun {
  int rc;
  std::string output;
};

class IngestCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_ingest_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliRun atrex(std::vector<std::string> args) {
    SubprocessOptions o;
    o.argv = {std::string(ATREX_TEST_BIN_DIR) + "/atrex"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = std::chrono::seconds(120);
    o.working_dir = dir_;
    o.output_tail_bytes = 1 << 20;
    auto r = run_subprocess(o);
    EXPECT_TRUE(r) << r.error().message;
    return CliRun{r->timed_out ? -1 : r->exit_code, r->output_tail};
  }
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }
  fs::path synthetic(const std::string& name, bool gzip) {
    ingest::SyntheticTrace spec;
    spec.target_bytes = 200000;
    spec.ranks = 2;
    spec.gzip = gzip;
    EXPECT_TRUE(ingest::write_synthetic_trace(dir_ / name, spec));
    return dir_ / name;
  }
  fs::path dir_;
};

TEST_F(IngestCli, WritesASuiteThatProblemsListAndRooflineRead) {
  auto t = synthetic("serve.pt.trace.json.gz", true);
  auto r = atrex({"ingest", t.string(), "--out", (dir_ / "suite").string()});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("rms_norm"), std::string::npos) << r.output;
  auto list = atrex({"--suite", (dir_ / "suite").string(), "problems", "list", "--json"});
  ASSERT_EQ(list.rc, 0) << list.output;
  const Json j = Json::parse(list.output);
  std::set<std::string> ops;
  double total = 0;
  for (const auto& op : j["operators"]) {
    ops.insert(op["operator"].get<std::string>());
    total += op["weight"].get<double>();
  }
  EXPECT_EQ(ops, (std::set<std::string>{"rms_norm", "silu_and_mul"})) << list.output;
  EXPECT_NEAR(total, 1, 1e-9);
  auto roof = atrex({"--suite", (dir_ / "suite").string(), "roofline", "--hardware", "H200-SXM",
                     "--operator", "rms_norm"});
  EXPECT_EQ(roof.rc, 0) << roof.output;
  EXPECT_TRUE(fs::exists(dir_ / "suite" / "coverage.md"));
  auto cov = read_json_file(dir_ / "suite" / "coverage.json");
  ASSERT_TRUE(cov);
  EXPECT_EQ((*cov)["schema"], "atrex.ingest-coverage/1");
}

TEST_F(IngestCli, ATruncatedTraceIsIngestedAndSaysSo) {
  auto t = synthetic("full.json", false);
  std::ifstream in(t, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto cut = write("cut.json", text.substr(0, text.size() * 2 / 3));
  auto r = atrex({"ingest", cut.string(), "--out", (dir_ / "suite").string()});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("TRUNCATED"), std::string::npos) << r.output;
}

TEST_F(IngestCli, ABadRulesFileIsExit2NamingTheFileAndTheField) {
  auto t = synthetic("a.json", false);
  auto rules = write("rules.yaml",
                     "version: atrex.ingest-rules/1\nfamilies:\n  - family: rms_norm\n    op: '(('\n");
  auto r = atrex({"ingest", t.string(), "--rules", rules.string(), "--out", (dir_ / "s").string()});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("rules.yaml: field \"families[0].op\""), std::string::npos) << r.output;
}

TEST_F(IngestCli, TracesWithoutGpuKernelsAreExit2WithAClearMessage) {
  auto t = write("cpu.json", R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add",
      "pid": 1, "tid": 1, "ts": 0, "dur": 3}]})");
  auto r = atrex({"ingest", t.string(), "--out", (dir_ / "s").string()});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("0 GPU kernels"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "s" / "coverage.md"));
}

TEST_F(IngestCli, AFileThatIsNotATraceIsExit2) {
  auto t = write("notes.json", "this is not json");
  auto r = atrex({"ingest", t.string(), "--out", (dir_ / "s").string()});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("notes.json: not a PyTorch-profiler trace"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace atrex
