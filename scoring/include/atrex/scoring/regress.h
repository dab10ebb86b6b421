// Nightly regression comparison (`atrex regress`, DESIGN.md §1 "Nightly regression
// benchmarks"): the final records of a current results folder against one or more baseline
// nights, per (agent, operator, shape).
//
// A shape regressed when its slowdown is beyond the measured noise AND beyond a minimum effect:
//   ratio = median(current samples) / median over the nights of each night's median
//   spread = max over the baseline nights of |night median / that median - 1| (0 for one night)
//   regression  <=> ratio > 1 + max(min_effect, spread)
//                   and the one-sided Mann-Whitney U test (current slower than the pooled
//                   baseline samples; normal approximation with tie correction) has p < alpha
//                   and the lower end of the bootstrap interval (level 1 - 2 alpha, percentile
//                   method) of the ratio of medians is above 1.
// Improvements mirror it. A shape whose baseline nights spread more than `flaky_spread` is
// "flaky": reported, never a regression. A shape correct on a baseline night but not correct (or
// absent: no silent loss) in the current folder is "broken" / "missing", both regressions.
// Without raw samples (records from before they were kept) the test is on the ratio alone and
// the change says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/scoring/reducer.h"

namespace atrex::scoring {

inline constexpr const char* kRegressSchema = "atrex.regress/1";

struct RegressOptions {
  double alpha = 0.01;         // significance of the rank test, in (0, 0.5)
  double min_effect = 0.05;    // relative change of the median below which nothing is flagged
  double flaky_spread = 0.10;  // baseline nights' relative spread above which a shape is flaky
  int bootstrap_resamples = 1000;
  uint64_t seed = 1;  // of the bootstrap (results are reproducible)
};
// Range checks naming the flag (kInvalidInput).
Result<void> validate(const RegressOptions& o);

enum class ChangeVerdict { kUnchanged, kRegression, kImprovement, kFlaky, kBroken, kMissing, kNew };
const char* change_verdict_name(ChangeVerdict v);
inline bool is_regression(ChangeVerdict v) {
  return v == ChangeVerdict::kRegression || v == ChangeVerdict::kBroken ||
         v == ChangeVerdict::kMissing;
}

struct ShapeChange {
  std::string agent, op, shape;
  ChangeVerdict verdict = ChangeVerdict::kUnchanged;
  int baseline_nights = 0;          // nights with a correct, timed record of this shape
  double baseline_median_us = 0;    // median of the nights' medians
  double current_median_us = 0;
  double ratio = 0;                 // current / baseline (> 1: slower)
  double ratio_ci_low = 0, ratio_ci_high = 0;
  double p_slower = 1, p_faster = 1;  // one-sided Mann-Whitney p-values
  double night_spread = 0;
  double threshold = 0;             // max(min_effect, night_spread)
  int current_samples = 0, baseline_samples = 0;
  std::string note;
};

struct RegressResult {
  std::string current;                 // source of the current folder
  std::vector<std::string> baselines;  // sources of the baseline nights
  RegressOptions options;
  std::vector<ShapeChange> changes;    // sorted by agent, operator, shape
  int regressions = 0, improvements = 0, flaky = 0, unchanged = 0, fresh = 0;
  // Comparisons across builds whose candidate compilers differ (manifest builds): a change may
  // be the compiler's rather than the kernel's. One line per baseline night that differs.
  std::vector<std::string> warnings;
};

// Compares the sweeps a Reducer read (each baseline night its own sweep; the current one too).
RegressResult regress(const std::vector<const ReducedSweep*>& baselines,
                      const ReducedSweep& current, const RegressOptions& options);

Json to_json(const RegressResult& r);
std::string render_markdown(const RegressResult& r);
// One <testcase> per (agent, operator, shape) compared; failure = a regression.
std::string render_junit(const RegressResult& r);

namespace stats_test {
// One-sided Mann-Whitney U: p-value of "x tends to be larger than y" (normal approximation with
// tie and continuity corrections). 1 when either side is empty.
double mann_whitney_greater(const std::vector<double>& x, const std::vector<double>& y);
// Percentile bootstrap interval of median(x) / median(y) at `level` (e.g. 0.98).
std::pair<double, double> bootstrap_ratio_of_medians(const std::vector<double>& x,
                                                     const std::vector<double>& y, int resamples,
                                                     double level, uint64_t seed);
}  // namespace stats_test

}  // namespace atrex::scoring
