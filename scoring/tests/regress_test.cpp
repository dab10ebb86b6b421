// The nightly comparison: a slowdown beyond noise and the minimum effect is a regression, the
// same kernels re-measured are not, noisy baseline nights make a shape flaky, and nothing that
// was correct may silently disappear.
#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/scoring/regress.h"
#include "fixture_writer.h"

namespace atrex::scoring {
namespace {
namespace fs = std::filesystem;
using testing::FixtureShape;
using testing::FixtureSweep;

TEST(MannWhitney, ShiftedSamplesAreSignificantIdenticalOnesAreNot) {
  std::vector<double> a, b, c;
  for (int i = 0; i < 50; ++i) {
    a.push_back(100 + i % 7);
    b.push_back(100 + (i * 3) % 7);
    c.push_back(120 + i % 7);
  }
  EXPECT_GT(stats_test::mann_whitney_greater(a, b), 0.2);
  EXPECT_LT(stats_test::mann_whitney_greater(c, a), 1e-6);
  EXPECT_GT(stats_test::mann_whitney_greater(a, c), 0.99);
  // All ties: no evidence either way.
  std::vector<double> same(20, 5.0);
  EXPECT_GE(stats_test::mann_whitney_greater(same, same), 0.5);
  EXPECT_EQ(stats_test::mann_whitney_greater({}, a), 1);
}

TEST(Bootstrap, IntervalOfTheRatioOfMediansCoversTheTrueRatio) {
  std::vector<double> x, y;
  for (int i = 0; i < 60; ++i) {
    x.push_back(120 + (i % 11) - 5);
    y.push_back(100 + (i % 13) - 6);
  }
  auto [lo, hi] = stats_test::bootstrap_ratio_of_medians(x, y, 1000, 0.98, 7);
  EXPECT_LT(lo, 1.2);
  EXPECT_GT(hi, 1.2);
  EXPECT_GT(lo, 1.1);
  EXPECT_LT(hi, 1.3);
}

class RegressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(s);
    suite_ = std::make_unique<problems::Suite>(std::move(*s));
    dir_ = fs::temp_directory_path() /
           ("atrex_regress_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A night: rms_norm shapes 0-2 at `rms_us`, silu_and_mul shape 0 at 40 µs.
  fs::path night(const std::string& id, double rms_scale, double silu_us = 40,
                 EvalStatus silu = EvalStatus::kOk, uint64_t seed = 1) {
    FixtureSweep f(*suite_, id, "nightly", {"reference"}, {"rms_norm", "silu_and_mul"});
    f.evaluated("reference", "rms_norm",
                {{"0", 50 * rms_scale}, {"1", 60 * rms_scale}, {"2", 70 * rms_scale}}, seed);
    f.evaluated("reference", "silu_and_mul", {{"0", silu_us, silu}}, seed + 10);
    f.write(dir_ / id);
    return dir_ / id;
  }
  RegressResult compare(const std::vector<fs::path>& nights, const fs::path& current,
                        RegressOptions o = {}) {
    reducer_ = std::make_unique<Reducer>(*suite_);
    for (const auto& n : nights) EXPECT_TRUE(reducer_->add_folder(n));
    EXPECT_TRUE(reducer_->add_folder(current));
    std::vector<const ReducedSweep*> base;
    for (size_t i = 0; i + 1 < reducer_->sweeps().size(); ++i)
      base.push_back(reducer_->sweeps()[i].get());
    return regress(base, *reducer_->sweeps().back(), o);
  }
  static int count(const RegressResult& r, ChangeVerdict v, const std::string& op = "") {
    int n = 0;
    for (const auto& c : r.changes) n += c.verdict == v && (op.empty() || c.op == op);
    return n;
  }

  std::unique_ptr<problems::Suite> suite_;
  std::unique_ptr<Reducer> reducer_;
  fs::path dir_;
};

TEST_F(RegressTest, TheSameKernelsMeasuredAgainAreNoRegression) {
  auto r = compare({night("mon", 1.0, 40, EvalStatus::kOk, 1), night("tue", 1.01, 40, EvalStatus::kOk, 5)},
                   night("wed", 1.0, 40, EvalStatus::kOk, 9));
  EXPECT_EQ(r.regressions, 0) << render_markdown(r);
  EXPECT_EQ(r.changes.size(), 4u);
  EXPECT_EQ(count(r, ChangeVerdict::kUnchanged), 4) << render_markdown(r);
}

TEST_F(RegressTest, ATwentyPercentSlowerOperatorIsExactlyWhatIsReported) {
  auto r = compare({night("mon", 1.0), night("tue", 1.01, 40, EvalStatus::kOk, 5)},
                   night("wed", 1.2, 40, EvalStatus::kOk, 9));
  EXPECT_EQ(r.regressions, 3) << render_markdown(r);
  EXPECT_EQ(count(r, ChangeVerdict::kRegression, "rms_norm"), 3);
  EXPECT_EQ(count(r, ChangeVerdict::kUnchanged, "silu_and_mul"), 1);
  for (const auto& c : r.changes) {
    if (c.op != "rms_norm") continue;
    EXPECT_NEAR(c.ratio, 1.2, 0.03);
    EXPECT_GT(c.ratio_ci_low, 1.0);
    EXPECT_LT(c.p_slower, 0.01);
  }
  const std::string junit = render_junit(r);
  EXPECT_NE(junit.find("failures=\"3\""), std::string::npos) << junit;
  EXPECT_EQ(to_json(r)["regressions"], 3);
}

TEST_F(RegressTest, ASlowdownUnderTheMinimumEffectIsNotARegression) {
  RegressOptions o;
  o.min_effect = 0.25;
  auto r = compare({night("mon", 1.0)}, night("wed", 1.2, 40, EvalStatus::kOk, 9), o);
  EXPECT_EQ(r.regressions, 0) << render_markdown(r);
}

TEST_F(RegressTest, NoisyBaselineNightsMakeAShapeFlakyNotARegression) {
  auto r = compare({night("mon", 1.0), night("tue", 1.3, 40, EvalStatus::kOk, 5)},
                   night("wed", 1.45, 40, EvalStatus::kOk, 9));
  EXPECT_EQ(count(r, ChangeVerdict::kFlaky, "rms_norm"), 3) << render_markdown(r);
  EXPECT_EQ(r.regressions, 0);
}

TEST_F(RegressTest, ABrokenOrMissingShapeIsARegression) {
  auto broken = compare({night("mon", 1.0)}, night("wed", 1.0, 40, EvalStatus::kWrongResult, 9));
  EXPECT_EQ(count(broken, ChangeVerdict::kBroken, "silu_and_mul"), 1) << render_markdown(broken);
  EXPECT_EQ(broken.regressions, 1);
  FixtureSweep f(*suite_, "thu", "nightly", {"reference"}, {"rms_norm", "silu_and_mul"});
  f.evaluated("reference", "rms_norm", {{"0", 50}, {"1", 60}, {"2", 70}});
  f.write(dir_ / "thu");  // silu_and_mul never finished
  auto missing = compare({night("mon", 1.0)}, dir_ / "thu");
  EXPECT_EQ(count(missing, ChangeVerdict::kMissing, "silu_and_mul"), 1)
      << render_markdown(missing);
  EXPECT_EQ(missing.regressions, 1);
}

TEST_F(RegressTest, OptionsOutOfRangeNameTheFlag) {
  RegressOptions o;
  o.alpha = 0.7;
  auto v = validate(o);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("--alpha"), std::string::npos);
}

// Gives the results folder's manifest one build entry whose candidate compiler is `version`.
void set_build(const fs::path& folder, const std::string& version) {
  auto j = read_json_file(folder / "manifest.json");
  ASSERT_TRUE(j) << j.error().message;
  BuildRecord b;
  b.atrex_version = "0.1.0";
  b.commit = "2618e7b4c1d2";
  b.host = "node1";
  b.candidate_compiler = "/usr/local/cuda/bin/nvcc";
  b.candidate_compiler_version = version;
  b.candidate_arch = "sm_90a";
  b.candidate_flags = {"-O3", "-I/opt/atrex/share/atrex/include"};
  (*j)["builds"] = Json::array({to_json(b)});
  ASSERT_TRUE(write_text_file_atomic(folder / "manifest.json", j->dump(2)));
}

TEST_F(RegressTest, NightsCompiledByAnotherCandidateCompilerAreNamedInAWarning) {
  const fs::path mon = night("mon", 1.0), wed = night("wed", 1.0, 40, EvalStatus::kOk, 9);
  set_build(mon, "Cuda compilation tools, release 12.8, V12.8.93");
  set_build(wed, "Cuda compilation tools, release 13.0, V13.0.88");
  auto r = compare({mon}, wed);
  ASSERT_EQ(r.warnings.size(), 1u) << render_markdown(r);
  EXPECT_NE(r.warnings[0].find("release 12.8"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("release 13.0"), std::string::npos) << r.warnings[0];
  EXPECT_NE(render_markdown(r).find("> warning: baseline"), std::string::npos);
  EXPECT_EQ(to_json(r)["warnings"].size(), 1u);
  // The same compiler on both sides (another include folder aside): no warning.
  set_build(mon, "Cuda compilation tools, release 13.0, V13.0.88");
  EXPECT_TRUE(compare({mon}, wed).warnings.empty());
}

}  // namespace
}  // namespace atrex::scoring
