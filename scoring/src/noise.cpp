#include "noise.h"

#include <algorithm>
#include <random>

#include <boost/math/special_functions/beta.hpp>

#include "atrex/common/sample_stats.h"

namespace atrex::scoring {

namespace {

// The exact bootstrap distribution of the lower median of `x`: the sorted samples and, for each,
// P(resampled median <= it).
struct MedianDistribution {
  std::vector<double> sorted;
  std::vector<double> cdf;
  double draw(double u) const {
    const auto it = std::lower_bound(cdf.begin(), cdf.end(), u);
    return sorted[std::min<size_t>(static_cast<size_t>(it - cdf.begin()), sorted.size() - 1)];
  }
};

MedianDistribution median_distribution(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  const double m = static_cast<double>((n + 1) / 2);  // the lower median's rank
  MedianDistribution d;
  d.cdf.resize(n);
  for (size_t k = 1; k <= n; ++k) {
    const double p = static_cast<double>(k) / static_cast<double>(n);
    d.cdf[k - 1] = k == n ? 1.0 : boost::math::ibeta(m, static_cast<double>(n) - m + 1, p);
  }
  d.sorted = std::move(x);
  return d;
}

}  // namespace

std::optional<std::pair<double, double>> s_i_interval(const std::vector<const EvalRecord*>& correct,
                                                      int resamples) {
  if (correct.empty() || resamples < 2) return std::nullopt;
  std::vector<MedianDistribution> shapes;
  std::vector<double> t_roof;
  for (const EvalRecord* r : correct) {
    if (!r->timing || r->timing->samples_us.empty() || !(r->t_roofline_us > 0)) return std::nullopt;
    shapes.push_back(median_distribution(r->timing->samples_us));
    t_roof.push_back(r->t_roofline_us);
  }
  std::mt19937_64 rng(0x5eed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> s_i(static_cast<size_t>(resamples));
  std::vector<double> s_j(shapes.size());
  for (auto& out : s_i) {
    for (size_t j = 0; j < shapes.size(); ++j) {
      const double t = shapes[j].draw(uniform(rng));
      s_j[j] = t > 0 ? std::min(1.0, t_roof[j] / t) : 1.0;
    }
    out = stats::median(s_j);
  }
  std::sort(s_i.begin(), s_i.end());
  auto at = [&](double q) {
    return s_i[std::min(s_i.size() - 1, static_cast<size_t>(q * static_cast<double>(s_i.size())))];
  };
  return std::pair{at(0.025), at(0.975)};
}

}  // namespace atrex::scoring
