// Python candidates (docs/python-candidates.md) on the cpu backend, end to end through the real
// evaluation child, its sandbox and the judge: Atrex-Bench's format (generated_kernel.py,
// `class Model(nn.Module)`) with Debian's CPU torch. Each candidate pays for a torch import in its
// child (~1-2 s), so one test evaluates them all, on one small shape, with two seeds.
//
// Needs a Python >= 3.11 with torch and a shared libpython (Debian: python3-dev python3-torch):
// $ATREX_PYTHON, else /usr/bin/python3. Skips without one, unless ATREX_REQUIRE_PYTHON_TORCH=1
// (CI), where a skip is a failure.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/python_site.h"
#include "atrex/scoring/aggregate.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

const fs::path kDir = fs::path(ATREX_TEST_DATA_DIR) / "python";

// The interpreter the tests use: $ATREX_PYTHON, else Debian's /usr/bin/python3 (a developer's
// PATH may lead to another Python without torch). Empty with the reason when none has torch.
std::string python_with_torch(std::string* why) {
  std::string interpreter;
  if (const char* e = std::getenv("ATREX_PYTHON"); e && *e) {
    interpreter = e;
  } else if (fs::exists("/usr/bin/python3")) {
    interpreter = "/usr/bin/python3";
  } else {
    *why = "no ATREX_PYTHON and no /usr/bin/python3";
    return "";
  }
  auto site = probe_python_site(interpreter);
  if (!site) {
    *why = site.error().message;
    return "";
  }
  if (auto s = python_site_supports(*site, Backend::kCpu); !s) {
    *why = s.error().message;
    return "";
  }
  if (!fs::exists(fs::path(ATREX_TEST_BIN_DIR) / "libatrex-python-shim.so")) {
    *why = "libatrex-python-shim.so was not built (no Python 3.11+ headers at configure time)";
    return "";
  }
  return interpreter;
}

bool required() {
  const char* e = std::getenv("ATREX_REQUIRE_PYTHON_TORCH");
  return e && std::string(e) == "1";
}

class PythonCandidates : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    interpreter_ = python_with_torch(&why);
    if (interpreter_.empty()) {
      if (required()) FAIL() << "ATREX_REQUIRE_PYTHON_TORCH=1 but " << why;
      GTEST_SKIP() << why;
    }
    ::setenv("ATREX_PYTHON", interpreter_.c_str(), 1);
    auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(suite) << suite.error().message;
    suite_ = std::make_unique<problems::Suite>(std::move(*suite));
    auto profiles =
        problems::load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware"});
    ASSERT_TRUE(profiles);
    hardware_ = *problems::find_hardware_profile(*profiles, "H20");
    cache_ = fs::temp_directory_path() / fmt::format("atrex_python_cache_{}", ::getpid());
  }
  void TearDown() override {
    std::error_code ec;
    if (!cache_.empty()) fs::remove_all(cache_, ec);
  }

  EvalTask task(const std::string& file, bool performance) {
    EvalTask t;
    t.task_id = "test-" + file;
    t.operator_name = "rms_norm";
    t.shape_ids = {"15"};
    t.candidate.source = *read_text_file(kDir / file);
    t.candidate.sha256 = sha256_hex(t.candidate.source);
    t.candidate.backend = Backend::kCpu;
    t.candidate.agent = "test";
    t.candidate.file_name = "generated_kernel.py";
    t.settings.seeds = 2;
    t.settings.performance = performance;
    t.settings.min_iterations = 3;
    t.settings.max_iterations = 5;
    t.settings.min_time_s = 0;
    t.settings.shape_timeout_s = 60;  // a torch import on a loaded 2-core machine
    t.settings.unseen_shapes = 0;
    return t;
  }

  EvalRecord evaluate(const std::string& file, bool performance = false) {
    EvaluatorOptions o;
    o.suite = suite_.get();
    o.hardware = hardware_;
    o.cache_dir = cache_;
    o.include_dir = ATREX_TEST_INCLUDE_DIR;
    o.child_dir = ATREX_TEST_BIN_DIR;
    o.seed = 99;
    o.sandbox = SandboxMode::kBwrap;
    Evaluator ev(o);
    auto r = ev.evaluate(task(file, performance));
    EXPECT_TRUE(r) << file << ": " << r.error().message;
    if (!r || r->size() != 1) return EvalRecord{};
    return r->front();
  }

  std::string interpreter_;
  std::unique_ptr<problems::Suite> suite_;
  problems::HardwareProfile hardware_;
  fs::path cache_;
};

// Issue 19's "Must show", first bullet: one test process, every verdict.
TEST_F(PythonCandidates, TorchOnlyCandidatesGetTheRightVerdictsOnTheCpuBackend) {
  // Correct, PyTorch only: ok on both seeds, timed, dsl_share 0, and a fallback when scored.
  const EvalRecord ok = evaluate("rms_norm_torch.py", true);
  EXPECT_EQ(ok.status, EvalStatus::kOk) << ok.error;
  EXPECT_EQ(ok.seeds_passed, 2);
  ASSERT_TRUE(ok.timing);
  EXPECT_GT(ok.timing->time_us_median, 0);
  ASSERT_TRUE(ok.dsl_share);
  EXPECT_EQ(*ok.dsl_share, 0.0);
  EXPECT_LT(ok.max_rel_error, 2e-2);
  {
    const auto score = scoring::score_agent(*suite_, "test", {ok});
    const auto it = std::find_if(score.operators.begin(), score.operators.end(),
                                 [](const auto& x) { return x.name == "rms_norm"; });
    ASSERT_NE(it, score.operators.end());
    EXPECT_EQ(it->status, "correct");
    EXPECT_TRUE(it->fallback) << "a correct candidate with DSL share 0 is a fallback";
  }

  struct Case {
    const char* file;
    EvalStatus status;
    const char* says;  // in the record's error
  };
  const Case cases[] = {
      {"rms_norm_wrong.py", EvalStatus::kWrongResult, "out"},
      {"rms_norm_nan.py", EvalStatus::kWrongResult, "nan"},
      {"rms_norm_mutates_input.py", EvalStatus::kWrongResult, "modified its input x"},
      {"rms_norm_raises.py", EvalStatus::kWrongResult,
       "RuntimeError: kernel launch failed: too many resources requested"},
      {"rms_norm_wrong_structure.py", EvalStatus::kWrongResult,
       "forward returned a tuple of 2; the operator has 1 output(s) (out)"},
      {"rms_norm_syntax_error.py", EvalStatus::kCompileError, "SyntaxError"},
  };
  for (const Case& c : cases) {
    const EvalRecord r = evaluate(c.file);
    EXPECT_EQ(r.status, c.status) << c.file << ": " << eval_status_name(r.status) << " " << r.error;
    std::string lower = r.error;
    if (std::string(c.says) == "nan") {
      for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    EXPECT_NE(lower.find(c.says), std::string::npos) << c.file << ": " << r.error;
  }
  // The syntax error names the file, the line and what Python expected.
  const EvalRecord syntax = evaluate("rms_norm_syntax_error.py");
  EXPECT_NE(syntax.error.find("generated_kernel.py\", line 6"), std::string::npos) << syntax.error;
  EXPECT_NE(syntax.error.find("expected ':'"), std::string::npos) << syntax.error;
  // The raising candidate's record points at its own line.
  const EvalRecord raises = evaluate("rms_norm_raises.py");
  EXPECT_NE(raises.error.find("generated_kernel.py line 11, in forward"), std::string::npos)
      << raises.error;
}

// A forward that never returns: the shape's limit kills the child's group; `timeout`. The
// record carries the child's last output, where the candidate said that forward was entered:
// the limit hit the call, not torch's import (a limit that fired during the import, or a
// candidate that failed to import, would not have that line).
TEST_F(PythonCandidates, HangingForwardTimesOut) {
  EvaluatorOptions o;
  o.suite = suite_.get();
  o.hardware = hardware_;
  o.cache_dir = cache_;
  o.include_dir = ATREX_TEST_INCLUDE_DIR;
  o.child_dir = ATREX_TEST_BIN_DIR;
  o.sandbox = SandboxMode::kBwrap;
  Evaluator ev(o);
  EvalTask t = task("rms_norm_hangs.py", false);
  // A torch import takes 1-2 s idle; the margin is for a loaded 2-core machine.
  t.settings.shape_timeout_s = 15;
  auto r = ev.evaluate(t);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  const EvalRecord& rec = r->front();
  EXPECT_EQ(rec.status, EvalStatus::kTimeout) << rec.error;
  EXPECT_NE(rec.error.find("limit of one shape; the child was killed"), std::string::npos)
      << rec.error;
  EXPECT_NE(rec.error.find("rms_norm_hangs: forward entered, import done"), std::string::npos)
      << "the limit must have hit forward, after the import: " << rec.error;
}

}  // namespace
}  // namespace atrex::runner
