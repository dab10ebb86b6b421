// The bootstrap interval of S_i (src/noise.h): its exact resampled-median distribution against a
// brute-force bootstrap, an interval that collapses without noise and widens with it, and none
// for records without raw samples.
#include "noise.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

namespace atrex::scoring {
namespace {

EvalRecord record(std::vector<double> samples, double t_roofline_us) {
  EvalRecord r;
  r.status = EvalStatus::kOk;
  r.t_roofline_us = t_roofline_us;
  TimingSummary t;
  t.n = static_cast<int>(samples.size());
  t.samples_us = std::move(samples);
  r.timing = t;
  r.s_j = 0.5;
  return r;
}

TEST(SiInterval, OneShapeMatchesABruteForceBootstrapOfTheMedian) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> noise(0.0, 0.2);
  std::vector<double> x(41);
  for (auto& v : x) v = 10.0 * noise(rng);
  const EvalRecord r = record(x, 1.0);  // S_j = 1 / median, never capped here
  auto ci = s_i_interval({&r}, 4000);
  ASSERT_TRUE(ci);
  // Brute force: resample 41 samples with replacement, lower median, S_j.
  std::vector<double> s;
  std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
  for (int b = 0; b < 4000; ++b) {
    std::vector<double> y(x.size());
    for (auto& v : y) v = x[pick(rng)];
    std::nth_element(y.begin(), y.begin() + 20, y.end());
    s.push_back(1.0 / y[20]);
  }
  std::sort(s.begin(), s.end());
  const double low = s[100], high = s[3900];
  // The sample's order statistics are the only values either can take; the two agree to within
  // one or two ranks.
  EXPECT_NEAR(ci->first, low, 0.06 * low);
  EXPECT_NEAR(ci->second, high, 0.06 * high);
  EXPECT_LT(ci->first, ci->second);
}

TEST(SiInterval, NoNoiseIsAPointAndMoreNoiseIsWider) {
  const EvalRecord a = record(std::vector<double>(30, 4.0), 1.0);
  const EvalRecord b = record(std::vector<double>(30, 8.0), 1.0);
  auto exact = s_i_interval({&a, &b});
  ASSERT_TRUE(exact);
  EXPECT_DOUBLE_EQ(exact->first, exact->second);
  EXPECT_DOUBLE_EQ(exact->first, (0.25 + 0.125) / 2);  // median of S_j over two shapes

  std::mt19937_64 rng(3);
  auto noisy = [&](double sigma) {
    std::normal_distribution<double> n(4.0, sigma);
    std::vector<double> v(30);
    for (auto& x : v) x = std::max(0.5, n(rng));
    return record(v, 1.0);
  };
  const EvalRecord quiet = noisy(0.05), loud = noisy(0.8);
  auto q = s_i_interval({&quiet});
  auto l = s_i_interval({&loud});
  ASSERT_TRUE(q && l);
  EXPECT_LT(q->second - q->first, l->second - l->first);
  EXPECT_LE(q->first, 0.25 * 1.05);
  EXPECT_GE(q->second, 0.25 * 0.95);
}

TEST(SiInterval, CappedAtOneAndAbsentWithoutRawSamples) {
  const EvalRecord fast = record({0.5, 0.6, 0.7}, 1.0);  // faster than the roofline: S_j = 1
  auto ci = s_i_interval({&fast});
  ASSERT_TRUE(ci);
  EXPECT_DOUBLE_EQ(ci->second, 1.0);
  EvalRecord old = record({}, 1.0);
  EXPECT_FALSE(s_i_interval({&old}));
  EXPECT_FALSE(s_i_interval({}));
}

}  // namespace
}  // namespace atrex::scoring
