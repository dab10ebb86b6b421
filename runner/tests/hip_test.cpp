// The hip backend as CI has it: hipcc and the HIP runtime, no AMD GPU. Candidates compile into
// shared objects that export the entry point and carry device code for the requested offload
// arch; the cache key covers hipcc's version and the arch; evaluation is `rejected` naming why,
// both by the evaluator and by atrex-eval-hip itself (never `crashed`). Execution on an AMD GPU
// is not tested anywhere: we have none.
//
// Tests needing hipcc or atrex-eval-hip skip where they are missing, unless ATREX_REQUIRE_HIP=1
// (.ci/run sets it: deploy/install-deps.sh installs the HIP packages), which makes that a failure.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "atrex/common/wire/child_protocol.h"

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/evaluator.h"
#include "atrex/common/process/subprocess.h"
#include "elf_symbols.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

bool hip_required() {
  const char* r = std::getenv("ATREX_REQUIRE_HIP");
  return r && std::string(r) == "1";
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::error_code ec;
    if (!dir.empty() && fs::exists(fs::path(dir) / program, ec)) return true;
  }
  return false;
}

#define ATREX_NEED(condition, what)                                                        \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      if (hip_required()) FAIL() << what << " (ATREX_REQUIRE_HIP=1 makes this a failure)"; \
      GTEST_SKIP() << what;                                                                \
    }                                                                                      \
  } while (0)

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

CandidateRef hip_candidate(const std::string& file) {
  CandidateRef c;
  c.source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / file);
  c.sha256 = sha256_hex(c.source);
  c.backend = Backend::kHip;
  c.file_name = file;
  c.agent = "test";
  return c;
}

class HipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_hip_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (had_hipcc_)
      ::setenv("HIPCC", old_hipcc_.c_str(), 1);
    else if (saved_)
      ::unsetenv("HIPCC");
    fs::remove_all(dir_);
  }
  // A stand-in for hipcc: prints `version_line` for --version, otherwise runs `compile` (sh).
  void fake_hipcc(const std::string& name, const std::string& version_line,
                  const std::string& compile) {
    const fs::path script = dir_ / name;
    std::ofstream(script) << "#!/bin/sh\ncase \" $* \" in *\" --version \"*) echo '" << version_line
                          << "'; exit 0;; esac\n"
                          << compile << "\n";
    fs::permissions(script, fs::perms::owner_all);
    if (!saved_) {
      saved_ = true;
      if (const char* old = std::getenv("HIPCC")) had_hipcc_ = true, old_hipcc_ = old;
    }
    ::setenv("HIPCC", script.c_str(), 1);
  }
  fs::path dir_;
  bool saved_ = false, had_hipcc_ = false;
  std::string old_hipcc_;
};

// What CI checks of a HIP candidate: the object exists, dlsym would find the entry point, and
// it holds device code for the arch asked for (a host-only build would not).
TEST_F(HipTest, CorrectCandidateBuildsASharedObjectThatExportsTheEntryPoint) {
  ATREX_NEED(on_path("hipcc"),
             "hipcc is not installed (Debian: apt-get install hipcc libamdhip64-dev)");
  CompileCache cache(dir_ / "cache", ATREX_TEST_INCLUDE_DIR);
  auto r = cache.compile(hip_candidate("rms_norm_correct.hip"), "gfx90a", 300);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->ok) << r->log;
  ASSERT_TRUE(fs::exists(r->library));
  auto symbols = exported_function_symbols(r->library);
  ASSERT_TRUE(symbols) << symbols.error().message;
  EXPECT_TRUE(symbols->count("atrex_candidate_run")) << "atrex_candidate_run is not exported";
  const std::string bytes = file_bytes(r->library);
  EXPECT_NE(bytes.find("amdgcn-amd-amdhsa--gfx90a"), std::string::npos)
      << "no gfx90a code object in the offload bundle";
  auto again = cache.compile(hip_candidate("rms_norm_correct.hip"), "gfx90a", 300);
  ASSERT_TRUE(again && again->ok);
  EXPECT_TRUE(again->cache_hit);
}

TEST_F(HipTest, OffloadArchIsPartOfTheCacheKeyAndOfTheObject) {
  ATREX_NEED(on_path("hipcc"),
             "hipcc is not installed (Debian: apt-get install hipcc libamdhip64-dev)");
  CompileCache cache(dir_ / "cache", ATREX_TEST_INCLUDE_DIR);
  auto a = cache.compile(hip_candidate("rms_norm_correct.hip"), "gfx90a", 300);
  auto b = cache.compile(hip_candidate("rms_norm_correct.hip"), "gfx940", 300);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->ok && b->ok) << a->log << b->log;
  EXPECT_NE(a->key, b->key);
  EXPECT_FALSE(b->cache_hit);
  const std::string bytes = file_bytes(b->library);
  EXPECT_NE(bytes.find("amdgcn-amd-amdhsa--gfx940"), std::string::npos);
  EXPECT_EQ(bytes.find("amdgcn-amd-amdhsa--gfx90a"), std::string::npos);
}

// Debian 12's hipcc (HIP 5.2) predates gfx942, the MI300X default: the compile error says which
// setting picks another arch. A newer hipcc compiles it.
TEST_F(HipTest, DefaultArchUnknownToThisHipccNamesTheSetting) {
  ATREX_NEED(on_path("hipcc"),
             "hipcc is not installed (Debian: apt-get install hipcc libamdhip64-dev)");
  CompileCache cache(dir_ / "cache", ATREX_TEST_INCLUDE_DIR);
  auto r = cache.compile(hip_candidate("rms_norm_correct.hip"), default_hip_arch(), 300);
  ASSERT_TRUE(r) << r.error().message;
  if (r->ok) {
    EXPECT_NE(file_bytes(r->library).find("amdgcn-amd-amdhsa--" + default_hip_arch()),
              std::string::npos);
  } else {
    EXPECT_NE(r->log.find("invalid target ID '" + default_hip_arch() + "'"), std::string::npos)
        << r->log;
    EXPECT_NE(r->log.find("ATREX_HIP_ARCH"), std::string::npos) << r->log;
  }
}

TEST_F(HipTest, HipccVersionIsPartOfTheCacheKey) {
  CompileCache first(dir_ / "cache", ATREX_TEST_INCLUDE_DIR);
  fake_hipcc("hipcc-a", "HIP version: 5.2.21153-0",
             "for a; do [ \"$prev\" = -o ] && : > \"$a\"; prev=$a; done");
  auto a = first.compile(hip_candidate("rms_norm_correct.hip"), "gfx90a", 60);
  ASSERT_TRUE(a && a->ok) << (a ? a->log : a.error().message);
  CompileCache second(dir_ / "cache", ATREX_TEST_INCLUDE_DIR);
  fake_hipcc("hipcc-b", "HIP version: 6.2.41133-0",
             "for a; do [ \"$prev\" = -o ] && : > \"$a\"; prev=$a; done");
  auto b = second.compile(hip_candidate("rms_norm_correct.hip"), "gfx90a", 60);
  ASSERT_TRUE(b && b->ok) << (b ? b->log : b.error().message);
  EXPECT_NE(a->key, b->key) << "a different hipcc reused a cached object";
  EXPECT_FALSE(b->cache_hit);
}

TEST_F(HipTest, CompilerRejectingTheArchGetsTheHintAndTheFailureIsCached) {
  fake_hipcc("hipcc", "HIP version: 5.2.21153-0",
             "echo \"clang: error: invalid target ID 'gfx942'; format is ...\" >&2; exit 1");
  CompileCache cache(dir_ / "cache", ATREX_TEST_INCLUDE_DIR);
  auto r = cache.compile(hip_candidate("rms_norm_correct.hip"), "gfx942", 60);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->log.find("does not know the offload arch gfx942"), std::string::npos) << r->log;
  EXPECT_NE(r->log.find("ATREX_HIP_ARCH"), std::string::npos) << r->log;
  auto again = cache.compile(hip_candidate("rms_norm_correct.hip"), "gfx942", 60);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->cache_hit);
  EXPECT_EQ(again->log, r->log);
}

// Without an AMD GPU a hip candidate is a verdict, not a crash: `rejected`, with the
// hipGetDeviceCount error, on every shape.
TEST_F(HipTest, EvaluatorWithoutAnAmdGpuRejectsEveryShapeNamingWhy) {
  ATREX_NEED(fs::exists(fs::path(ATREX_TEST_BIN_DIR) / "atrex-eval-hip"),
             "atrex-eval-hip was not built (no HIP runtime at configure time: ATREX_WITH_HIP, "
             "libamdhip64-dev)");
  if (!probe_hip_environment().gpus.empty()) GTEST_SKIP() << "this machine has an AMD GPU";
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  EvaluatorOptions o;
  o.suite = &*suite;
  o.cache_dir = dir_ / "cache";
  o.include_dir = ATREX_TEST_INCLUDE_DIR;
  o.child_dir = ATREX_TEST_BIN_DIR;
  o.work_dir = dir_ / "work";
  EvalTask t;
  t.task_id = "hip-no-gpu";
  t.operator_name = "rms_norm";
  t.shape_ids = {"15", "5"};
  t.candidate = hip_candidate("rms_norm_correct.hip");
  Evaluator ev(o);
  auto recs = ev.evaluate(t);
  ASSERT_TRUE(recs) << recs.error().message;
  ASSERT_EQ(recs->size(), 2u);
  for (const auto& r : *recs) {
    EXPECT_EQ(r.status, EvalStatus::kRejected) << r.error;
    EXPECT_NE(r.error.find("no AMD GPU / HIP runtime found: hipGetDeviceCount: hipError"),
              std::string::npos)
        << r.error;
  }
}

// The child on its own (a runner that skipped the probe, or a GPU that vanished): one `rejected`
// line per shape and exit code 4, not a signal; `--probe` lists no device and says why.
TEST_F(HipTest, ChildWithoutAnAmdGpuWritesARejectedVerdictPerShape) {
  const fs::path child = fs::path(ATREX_TEST_BIN_DIR) / "atrex-eval-hip";
  ATREX_NEED(fs::exists(child),
             "atrex-eval-hip was not built (no HIP runtime at configure time: ATREX_WITH_HIP, "
             "libamdhip64-dev)");
  if (!probe_hip_environment().gpus.empty()) GTEST_SKIP() << "this machine has an AMD GPU";
  ChildTaskRequest task;
  task.operator_name = "rms_norm";
  task.library = (dir_ / "none.so").string();
  task.shapes = {ChildShape{"15", Json::object(), {1}}, ChildShape{"5", Json::object(), {2}}};
  task.nonce = "0123456789abcdef";
  const Json request = to_json(ChildRequest{task, {}});
  ASSERT_TRUE(write_text_file_atomic(dir_ / "req.json", request.dump()));
  // The request and the result channel on inherited fds, as the runner passes them.
  const int req_fd = ::open((dir_ / "req.json").c_str(), O_RDONLY | O_CLOEXEC);
  const int resp_fd =
      ::open((dir_ / "resp.jsonl").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(req_fd, 0);
  ASSERT_GE(resp_fd, 0);
  SubprocessOptions opt;
  opt.argv = {child.string(), "--request-fd", "3", "--response-fd", "4"};
  opt.inherit_fds = {{req_fd, 3}, {resp_fd, 4}};
  auto r = run_subprocess(opt);
  opt.inherit_fds.clear();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->term_signal, 0) << r->describe();
  EXPECT_EQ(r->exit_code, 4) << r->describe() << ": " << r->output_tail;
  std::ifstream in(dir_ / "resp.jsonl");
  std::vector<Json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].value("shape_id", ""), "15");
  EXPECT_EQ(lines[1].value("shape_id", ""), "5");
  for (const auto& j : lines) {
    EXPECT_EQ(j.value("status", ""), "rejected");
    EXPECT_EQ(j.value("nonce", ""), "0123456789abcdef");
    EXPECT_NE(j.value("error", "").find("no AMD GPU / HIP runtime found"), std::string::npos)
        << j.dump();
  }
  opt.argv = {child.string(), "--probe"};
  auto probe = run_subprocess(opt);
  ASSERT_TRUE(probe && probe->ok()) << (probe ? probe->describe() : probe.error().message);
  const Json p = Json::parse(probe->output_tail.substr(probe->output_tail.find('{')));
  EXPECT_TRUE(p["devices"].empty());
  EXPECT_NE(p.value("error", "").find("hipGetDeviceCount"), std::string::npos) << p.dump();
}

}  // namespace
}  // namespace atrex::runner
