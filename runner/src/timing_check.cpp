#include "timing_check.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace atrex::runner {

int timed_calls(const JudgeVerdict& judge) {
  int n = 0;
  for (int c : judge.bracket_calls) n += c;
  return n;
}

// Where the brackets hold the work (cpu: judge_messages.h), only the brackets whose call the
// judge checked bound the claim: any other bracket may have been emptied by a relay of the
// candidate's (it answers a forged go, or sends the done before the work), and only a checked one
// is known to have held a call that started after the go (its inputs carried the go's splice)
// and had its outputs when the done came (the judge's read of them at the done).
TimingCrossCheck cross_check_timing(const TimingSummary& claimed, const JudgeVerdict& judge) {
  TimingCrossCheck out;
  out.claimed_us = claimed.time_us_median;
  std::vector<size_t> counted;
  if (judge.brackets_hold_work) {
    for (int k : judge.checked_brackets) counted.push_back(static_cast<size_t>(k));
  } else {
    for (size_t k = 0; k < judge.bracket_us.size(); ++k) counted.push_back(k);
  }
  if (judge.bracket_us.empty()) return out;
  if (counted.empty()) {
    out.plausible = false;
    out.why = fmt::format(
        "timing not vouched for by the judge's clock: none of its {} brackets of the timed calls "
        "was checked (a re-check of the call, its inputs spliced as the go named, its outputs "
        "as the call returned)",
        judge.bracket_us.size());
    return out;
  }
  // The latency measured at timing_begin, a moment the candidate sees coming, counts only up to
  // kStartLatencyFactor times the one measured before the candidate was loaded.
  double measured = judge.bracket_latency_us;
  if (judge.start_latency_us > 0)
    measured = std::min(measured, kStartLatencyFactor * judge.start_latency_us);
  const double latency = std::max(
      judge.brackets_hold_work ? kCheckedBracketLatencyUs : kBracketLatencyUs, measured);
  out.latency_us = latency;
  double bound = std::numeric_limits<double>::infinity();
  out.shortest_bracket_us = std::numeric_limits<double>::infinity();
  for (size_t k : counted) {
    if (k >= judge.bracket_us.size()) continue;  // the verdict's reader refuses such an index
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
      "but the shortest of the judge's {} {}brackets of the timed calls holds at least {:.4g} us "
      "per call (after {:.0f} us of pipe latency and {:.4g} us of flush and reset per "
      "sample), more than {:.0f}x the claim: the child's clock or its report was bent",
      out.claimed_us, counted.size(), judge.brackets_hold_work ? "checked " : "", bound, latency,
      judge.bracket_overhead_us, kClaimedTimeFactor);
  return out;
}

}  // namespace atrex::runner
