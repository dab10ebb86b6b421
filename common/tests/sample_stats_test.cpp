#include "atrex/common/sample_stats.h"

#include <gtest/gtest.h>

namespace atrex::stats {
namespace {

TEST(SampleStats, QuantilesInterpolateBetweenSortedSamples) {
  const std::vector<double> s = {1, 2, 4, 8};
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.0), 1);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.5), 3);  // halfway between 2 and 4
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 1.0), 8);
  EXPECT_DOUBLE_EQ(quantile_sorted({}, 0.5), 0);
  EXPECT_DOUBLE_EQ(median({9, 1, 5}), 5);
}

TEST(SampleStats, RelativeStandardErrorAndSpread) {
  // mean 2, sample variance 1, n 3: sqrt(1/3)/2
  EXPECT_NEAR(relative_standard_error({1, 2, 3}), 0.288675134594813, 1e-12);
  EXPECT_DOUBLE_EQ(relative_standard_error({5}), 0);
  EXPECT_DOUBLE_EQ(relative_standard_error({}), 1);
  EXPECT_DOUBLE_EQ(relative_spread({9, 10, 11}), 0.2);
  EXPECT_DOUBLE_EQ(relative_spread({4}), 0);
}

}  // namespace
}  // namespace atrex::stats
