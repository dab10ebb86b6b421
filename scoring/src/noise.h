// The timing noise of an operator's score: a bootstrap interval of S_i (docs/reports.md "Noise").
//
// S_i is the median over the operator's correct shapes of S_j = min(1, T_roofline / median time);
// each median time comes from a shape's raw timing samples (atrex.eval/1 timing.samples_us). The
// interval resamples each shape's samples with replacement (the bootstrap of Efron 1979), takes
// the resample's median, recomputes S_j and S_i, and reports the 2.5th and 97.5th percentiles of
// S_i over the resamples. The resampled median of n samples has an exact distribution (its rank
// is a binomial order statistic: P(M* <= x_(k)) = P(Binomial(n, k/n) >= ceil(n/2)) =
// I_{k/n}(ceil(n/2), n - ceil(n/2) + 1), Boost's regularized incomplete beta), so a resample
// draws one uniform per shape instead of n: cheap enough for every report. The resampled median
// is the lower median (rank ceil(n/2)). The shapes themselves are not resampled: S_i is defined
// over the sweep's shapes, and what is uncertain is each shape's measured time.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "atrex/common/wire/eval_record.h"

namespace atrex::scoring {

// The 95% interval {low, high} of S_i over `correct` (records with status ok and an S_j), with
// `resamples` resamples from a fixed seed (reports are reproducible); nullopt when `correct` is
// empty or a record has no raw samples (older records) or no T_roofline.
std::optional<std::pair<double, double>> s_i_interval(const std::vector<const EvalRecord*>& correct,
                                                      int resamples = 1000);

}  // namespace atrex::scoring
