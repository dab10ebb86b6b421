// Summary statistics of timing samples and scores, shared by the evaluation child, the GPU
// benchmark child, the scorer and the benchmarks (header-only: the children stay light).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace atrex::stats {

// Linear-interpolation quantile (q in [0, 1]) of an ascending vector; 0 when empty.
inline double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

// Median (mean of the two middle values for even sizes); 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}

inline double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// Standard error of the mean over the mean: 1 for no samples, 0 for one sample or a zero mean.
inline double relative_standard_error(const std::vector<double>& v) {
  if (v.size() < 2) return v.empty() ? 1.0 : 0.0;
  const double m = mean(v);
  double var = 0;
  for (double x : v) var += (x - m) * (x - m);
  var /= static_cast<double>(v.size() - 1);
  return m > 0 ? std::sqrt(var / static_cast<double>(v.size())) / m : 0.0;
}

// (max - min) / mean: the run-to-run spread of repeated measurements; 0 below two values.
inline double relative_spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return m > 0 ? (*hi - *lo) / m : 0;
}

}  // namespace atrex::stats
