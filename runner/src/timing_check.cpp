#include "timing_check.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace atrex::runner {

int timed_calls(const JudgeVerdict& judge) {
  int n = 0;
  for (int c : judge.bracket_calls) n += c;
  return n;
}

TimingCrossCheck cross_check_timing(const TimingSummary& claimed, const JudgeVerdict& judge) {
  TimingCrossCheck out;
  out.claimed_us = claimed.time_us_median;
  if (judge.bracket_us.empty()) return out;
  const double latency = std::max(kBracketLatencyUs, judge.bracket_latency_us);
  out.latency_us = latency;
  double bound = std::numeric_limits<double>::infinity();
  out.shortest_bracket_us = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < judge.bracket_us.size(); ++k) {
    const double calls = std::max(1, judge.bracket_calls[k]);
    out.shortest_bracket_us = std::min(out.shortest_bracket_us, judge.bracket_us[k] / calls);
    const double inside = judge.bracket_us[k] - latency -
                          calls * std::max(0.0, judge.bracket_overhead_us);
    bound = std::min(bound, std::max(0.0, inside) / calls);
  }
  out.bound_us = bound;
  if (kClaimedTimeFactor * out.claimed_us >= bound) return out;
  out.plausible = false;
  out.why = fmt::format(
      "timing refuted by the judge's clock: the child claims a median of {:.4g} us per call, "
      "but the shortest of the judge's {} brackets of the timed calls holds at least {:.4g} us "
      "per call (after {:.0f} us of pipe latency and {:.4g} us of flush and reset per sample), "
      "more than {:.0f}x the claim: the child's clock or its report was bent",
      out.claimed_us, judge.bracket_us.size(), bound, latency,
      judge.bracket_overhead_us, kClaimedTimeFactor);
  return out;
}

}  // namespace atrex::runner
