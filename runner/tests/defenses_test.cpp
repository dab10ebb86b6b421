// Reward-hack defenses of the correctness gate on the cpu backend, end to end through the real
// evaluation children (docs/evaluation.md "Reward-hack defenses"): the range probe catches a
// candidate computing in fp16 that passes the usual seeds; the unseen shapes catch a candidate
// that is only right at the hot shapes. Each cheat is first shown to pass without the defense,
// and its honest twin passes with it.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/problems/unseen.h"
#include "atrex/runner/evaluator.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

class DefensesTest : public ::testing::Test {
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
                          ("atrex_defenses_cache_" + std::to_string(::getpid())));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*cache_);
    delete suite_;
    delete hardware_;
    delete cache_;
  }

  // Correctness only (both defenses are part of the correctness gate), default defenses unless
  // `adjust` changes them.
  std::vector<EvalRecord> evaluate(const std::string& file,
                                   const std::function<void(EvalSettings&)>& adjust = nullptr,
                                   std::vector<std::string> shapes = {"15", "5"}) {
    EvalTask t;
    t.task_id = "defenses-" + file;
    t.operator_name = "rms_norm";
    t.shape_ids = std::move(shapes);
    t.candidate.source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / file);
    t.candidate.sha256 = sha256_hex(t.candidate.source);
    t.candidate.backend = Backend::kCpu;
    t.candidate.agent = "test";
    t.candidate.file_name = file;
    t.settings.performance = false;
    t.settings.shape_timeout_s = 60;
    if (adjust) adjust(t.settings);
    EvaluatorOptions o;
    o.suite = suite_;
    o.hardware = *hardware_;
    o.cache_dir = *cache_;
    o.include_dir = ATREX_TEST_INCLUDE_DIR;
    o.child_dir = ATREX_TEST_BIN_DIR;
    o.seed = 99;
    Evaluator ev(o);
    auto r = ev.evaluate(t);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : std::vector<EvalRecord>{};
  }

  static problems::Suite* suite_;
  static problems::HardwareProfile* hardware_;
  static fs::path* cache_;
};

problems::Suite* DefensesTest::suite_ = nullptr;
problems::HardwareProfile* DefensesTest::hardware_ = nullptr;
fs::path* DefensesTest::cache_ = nullptr;

// --- range probe

TEST_F(DefensesTest, Fp16ComputingCandidatePassesTheUsualSeedsButFailsTheRangeProbe) {
  auto unprobed =
      evaluate("rms_norm_fp16_accumulate.cpp", [](EvalSettings& s) { s.range_probe = false; });
  ASSERT_EQ(unprobed.size(), 2u);
  for (const auto& r : unprobed) {
    EXPECT_EQ(r.status, EvalStatus::kOk)
        << "the cheat must pass the usual seeds, else it tests nothing: " << r.error;
    EXPECT_EQ(r.seeds_passed, 5);
    EXPECT_TRUE(r.range_probe.empty());
  }
  auto probed = evaluate("rms_norm_fp16_accumulate.cpp");
  ASSERT_EQ(probed.size(), 2u);
  for (const auto& r : probed) {
    EXPECT_EQ(r.status, EvalStatus::kWrongResult) << r.shape_id;
    EXPECT_NE(r.error.find("range probe (x scaled by 2^11"), std::string::npos) << r.error;
    EXPECT_EQ(r.seeds_passed, 1) << "the probe runs after the first seed";
  }
}

TEST_F(DefensesTest, CorrectCandidatePassesTheRangeProbeAndTheRecordSaysItRan) {
  auto recs = evaluate("rms_norm_correct.cpp", [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.error;
    EXPECT_EQ(r.range_probe, "x scaled by 2^11");
    EXPECT_EQ(r.seeds_passed, 5);
  }
}

// --- unseen shapes

TEST_F(DefensesTest, HotShapesOnlyCandidateFailsEveryShapeOnAnUnseenOne) {
  auto hot = evaluate("rms_norm_hot_shapes_only.cpp", [](EvalSettings& s) { s.unseen_shapes = 0; });
  ASSERT_EQ(hot.size(), 2u);
  for (const auto& r : hot)
    EXPECT_EQ(r.status, EvalStatus::kOk) << "right at the hot shapes: " << r.error;
  auto recs = evaluate("rms_norm_hot_shapes_only.cpp");
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kWrongResult) << r.shape_id;
    EXPECT_NE(r.error.find("fails on an unseen shape, token_count = "), std::string::npos)
        << r.error;
    EXPECT_FALSE(r.timing);
    EXPECT_EQ(r.seeds_passed, 0) << "the task's own shapes are not run after the failure";
    ASSERT_EQ(r.unseen_shapes.size(), 1u)
        << "the child stops at the first failed unseen shape: " << to_json(r).dump();
    EXPECT_EQ(r.unseen_shapes[0].status, EvalStatus::kWrongResult);
  }
}

TEST_F(DefensesTest, CorrectCandidatePassesTheUnseenShapesWhichHoldNoHotValue) {
  auto recs = evaluate("rms_norm_correct.cpp", [](EvalSettings& s) { s.unseen_shapes = 3; });
  ASSERT_EQ(recs.size(), 2u);
  const auto hot = problems::hot_values(*suite_->find("rms_norm"), "token_count");
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.error;
    ASSERT_EQ(r.unseen_shapes.size(), 3u) << to_json(r).dump();
    for (const auto& u : r.unseen_shapes) {
      EXPECT_EQ(u.status, EvalStatus::kOk) << to_json(u).dump();
      const int64_t rows = u.params["token_count"].get<int64_t>();
      EXPECT_FALSE(std::binary_search(hot.begin(), hot.end(), rows)) << rows << " is a hot value";
    }
  }
  // Records of the unseen shapes themselves never reach the results: only the task's shapes.
  EXPECT_EQ(recs[0].shape_id, "15");
  EXPECT_EQ(recs[1].shape_id, "5");
}

// A crash or a hang on an unseen shape is the candidate's: the task's shapes get that status,
// naming the unseen shape, without being run.
TEST_F(DefensesTest, CrashOrHangOnAnUnseenShapeGivesTheTaskThatStatus) {
  auto crashed = evaluate("rms_norm_segfault.cpp");
  ASSERT_EQ(crashed.size(), 2u);
  for (const auto& r : crashed) {
    EXPECT_EQ(r.status, EvalStatus::kCrashed) << r.error;
    EXPECT_NE(r.error.find("fails on an unseen shape"), std::string::npos) << r.error;
  }
  auto hung = evaluate("rms_norm_hang.cpp", [](EvalSettings& s) { s.shape_timeout_s = 2; });
  ASSERT_EQ(hung.size(), 2u);
  for (const auto& r : hung) {
    EXPECT_EQ(r.status, EvalStatus::kTimeout) << r.error;
    EXPECT_NE(r.error.find("unseen shape"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace atrex::runner
