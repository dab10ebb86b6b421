#include "atrex/scoring/regress.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "atrex/common/sample_stats.h"
#include "atrex/scoring/render.h"

namespace atrex::scoring {

const char* change_verdict_name(ChangeVerdict v) {
  switch (v) {
    case ChangeVerdict::kUnchanged: return "unchanged";
    case ChangeVerdict::kRegression: return "regression";
    case ChangeVerdict::kImprovement: return "improvement";
    case ChangeVerdict::kFlaky: return "flaky";
    case ChangeVerdict::kBroken: return "broken";
    case ChangeVerdict::kMissing: return "missing";
    case ChangeVerdict::kNew: return "new";
  }
  return "?";
}

Result<void> validate(const RegressOptions& o) {
  if (!(o.alpha > 0 && o.alpha < 0.5))
    return invalid_input(fmt::format("--alpha: must be in (0, 0.5); got {}", o.alpha));
  if (!(o.min_effect >= 0 && o.min_effect < 10))
    return invalid_input(fmt::format("--min-effect: must be in [0, 10); got {}", o.min_effect));
  if (!(o.flaky_spread > 0 && o.flaky_spread < 10))
    return invalid_input(
        fmt::format("--flaky-spread: must be in (0, 10); got {}", o.flaky_spread));
  if (o.bootstrap_resamples < 100 || o.bootstrap_resamples > 1000000)
    return invalid_input(fmt::format("--bootstrap: must be in [100, 1000000]; got {}",
                                     o.bootstrap_resamples));
  return ok();
}

namespace stats_test {

double mann_whitney_greater(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n1 = x.size(), n2 = y.size();
  if (n1 == 0 || n2 == 0) return 1;
  std::vector<std::pair<double, int>> all;
  all.reserve(n1 + n2);
  for (double v : x) all.emplace_back(v, 0);
  for (double v : y) all.emplace_back(v, 1);
  std::sort(all.begin(), all.end());
  const double n = static_cast<double>(n1 + n2);
  double rank_x = 0, ties = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double avg = (static_cast<double>(i + j) + 1) / 2;  // ranks i+1 .. j
    const double t = static_cast<double>(j - i);
    ties += t * t * t - t;
    for (size_t k = i; k < j; ++k) {
      if (all[k].second == 0) rank_x += avg;
    }
    i = j;
  }
  const double a = static_cast<double>(n1), b = static_cast<double>(n2);
  const double u = rank_x - a * (a + 1) / 2;
  const double mean = a * b / 2;
  const double var = a * b / 12 * ((n + 1) - ties / (n * (n - 1)));
  if (var <= 0) return u > mean ? 0 : 1;
  const double z = (u - mean - 0.5) / std::sqrt(var);
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

namespace {
double median_of(std::vector<double>& v) {
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  double hi = v[m];
  if (v.size() % 2) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m));
  return (lo + hi) / 2;
}
}  // namespace

std::pair<double, double> bootstrap_ratio_of_medians(const std::vector<double>& x,
                                                     const std::vector<double>& y, int resamples,
                                                     double level, uint64_t seed) {
  if (x.empty() || y.empty()) return {0, 0};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> dx(0, x.size() - 1), dy(0, y.size() - 1);
  std::vector<double> bx(x.size()), by(y.size()), ratios;
  ratios.reserve(static_cast<size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    for (auto& v : bx) v = x[dx(rng)];
    for (auto& v : by) v = y[dy(rng)];
    const double my = median_of(by);
    if (my > 0) ratios.push_back(median_of(bx) / my);
  }
  if (ratios.empty()) return {0, 0};
  std::sort(ratios.begin(), ratios.end());
  const double tail = (1 - level) / 2;
  return {stats::quantile_sorted(ratios, tail), stats::quantile_sorted(ratios, 1 - tail)};
}

}  // namespace stats_test

namespace {

using Key = std::tuple<std::string, std::string, std::string>;  // agent, operator, shape

// Every final record of a sweep by (agent, operator, shape).
std::map<Key, const EvalRecord*> index_of(const ReducedSweep& s,
                                          std::vector<std::vector<EvalRecord>>& keep) {
  std::map<Key, const EvalRecord*> out;
  for (const auto& [agent_op, fin] : s.finals) {
    keep.push_back(s.final_records(agent_op.first, agent_op.second));
    for (const auto& r : keep.back()) out[{agent_op.first, agent_op.second, r.shape_id}] = &r;
  }
  return out;
}

bool timed(const EvalRecord* r) {
  return r && r->status == EvalStatus::kOk && r->timing && r->timing->n > 0 &&
         r->timing->time_us_median > 0;
}

void judge(ShapeChange& c, const std::vector<const EvalRecord*>& nights, const EvalRecord& cur,
           const RegressOptions& o) {
  std::vector<double> medians, pooled;
  for (const EvalRecord* r : nights) {
    medians.push_back(r->timing->time_us_median);
    pooled.insert(pooled.end(), r->timing->samples_us.begin(), r->timing->samples_us.end());
  }
  const std::vector<double>& xs = cur.timing->samples_us;
  c.baseline_nights = static_cast<int>(nights.size());
  c.baseline_median_us = stats::median(medians);
  c.current_median_us = cur.timing->time_us_median;
  c.ratio = c.current_median_us / c.baseline_median_us;
  for (double m : medians) c.night_spread = std::max(c.night_spread, std::abs(m / c.baseline_median_us - 1));
  c.threshold = std::max(o.min_effect, c.night_spread);
  c.current_samples = static_cast<int>(xs.size());
  c.baseline_samples = static_cast<int>(pooled.size());
  const bool samples = !xs.empty() && !pooled.empty();
  if (samples) {
    c.p_slower = stats_test::mann_whitney_greater(xs, pooled);
    c.p_faster = stats_test::mann_whitney_greater(pooled, xs);
    std::tie(c.ratio_ci_low, c.ratio_ci_high) = stats_test::bootstrap_ratio_of_medians(
        xs, pooled, o.bootstrap_resamples, 1 - 2 * o.alpha, o.seed);
  } else {
    c.p_slower = c.p_faster = 0;
    c.ratio_ci_low = c.ratio_ci_high = c.ratio;
    c.note = "no raw samples on one side: judged on the ratio of medians alone";
  }
  const bool slower = c.ratio > 1 + c.threshold && c.p_slower < o.alpha && c.ratio_ci_low > 1;
  const bool faster =
      c.ratio < 1 / (1 + c.threshold) && c.p_faster < o.alpha && c.ratio_ci_high < 1;
  if (c.night_spread > o.flaky_spread) {
    c.verdict = ChangeVerdict::kFlaky;
    c.note = fmt::format("baseline nights spread {:.1f}% (> {:.1f}%){}", 100 * c.night_spread,
                         100 * o.flaky_spread, slower ? "; slower now, but within that noise" : "");
  } else if (slower) {
    c.verdict = ChangeVerdict::kRegression;
  } else if (faster) {
    c.verdict = ChangeVerdict::kImprovement;
  }
}

}  // namespace

RegressResult regress(const std::vector<const ReducedSweep*>& baselines,
                      const ReducedSweep& current, const RegressOptions& o) {
  RegressResult res;
  res.options = o;
  res.current = current.summary.source;
  std::vector<std::vector<EvalRecord>> keep;
  std::vector<std::map<Key, const EvalRecord*>> nights;
  std::set<Key> keys;
  for (const ReducedSweep* b : baselines) {
    res.baselines.push_back(b->summary.source);
    nights.push_back(index_of(*b, keep));
    for (const auto& [k, _] : nights.back()) keys.insert(k);
  }
  for (const ReducedSweep* b : baselines) {
    const auto& bb = b->manifest.builds;
    const auto& cb = current.manifest.builds;
    if (bb.empty() || cb.empty()) continue;
    std::string diff = candidate_compiler_difference(bb.back(), cb.back());
    if (!diff.empty()) {
      res.warnings.push_back(fmt::format("baseline {} and the current folder were compiled "
                                         "differently ({}): a change may be the compiler's",
                                         b->summary.source, diff));
    }
  }
  auto cur = index_of(current, keep);
  for (const auto& [k, _] : cur) keys.insert(k);
  for (const auto& k : keys) {
    ShapeChange c;
    std::tie(c.agent, c.op, c.shape) = k;
    std::vector<const EvalRecord*> ok_nights;
    for (const auto& n : nights) {
      auto it = n.find(k);
      if (it != n.end() && timed(it->second)) ok_nights.push_back(it->second);
    }
    auto it = cur.find(k);
    const EvalRecord* now = it == cur.end() ? nullptr : it->second;
    if (ok_nights.empty()) {
      if (!timed(now)) continue;  // correct on no side: nothing to compare
      c.verdict = ChangeVerdict::kNew;
      c.current_median_us = now->timing->time_us_median;
      c.note = "no correct baseline night";
    } else if (!now) {
      c.verdict = ChangeVerdict::kMissing;
      c.baseline_nights = static_cast<int>(ok_nights.size());
      c.note = "no record in the current folder";
    } else if (!timed(now)) {
      c.verdict = ChangeVerdict::kBroken;
      c.baseline_nights = static_cast<int>(ok_nights.size());
      c.note = fmt::format("now {}: {}", eval_status_name(now->status), now->error.substr(0, 200));
    } else {
      judge(c, ok_nights, *now, o);
    }
    switch (c.verdict) {
      case ChangeVerdict::kRegression:
      case ChangeVerdict::kBroken:
      case ChangeVerdict::kMissing: ++res.regressions; break;
      case ChangeVerdict::kImprovement: ++res.improvements; break;
      case ChangeVerdict::kFlaky: ++res.flaky; break;
      case ChangeVerdict::kNew: ++res.fresh; break;
      case ChangeVerdict::kUnchanged: ++res.unchanged; break;
    }
    res.changes.push_back(std::move(c));
  }
  return res;
}

Json to_json(const RegressResult& r) {
  Json changes = Json::array();
  for (const auto& c : r.changes) {
    changes.push_back(Json{{"agent", c.agent},
                           {"operator", c.op},
                           {"shape_id", c.shape},
                           {"verdict", change_verdict_name(c.verdict)},
                           {"regression", is_regression(c.verdict)},
                           {"baseline_nights", c.baseline_nights},
                           {"baseline_median_us", c.baseline_median_us},
                           {"current_median_us", c.current_median_us},
                           {"ratio", c.ratio},
                           {"ratio_ci_low", c.ratio_ci_low},
                           {"ratio_ci_high", c.ratio_ci_high},
                           {"p_slower", c.p_slower},
                           {"p_faster", c.p_faster},
                           {"night_spread", c.night_spread},
                           {"threshold", c.threshold},
                           {"current_samples", c.current_samples},
                           {"baseline_samples", c.baseline_samples},
                           {"note", c.note}});
  }
  const RegressOptions& o = r.options;
  return Json{{"schema", kRegressSchema},
              {"current", r.current},
              {"baselines", r.baselines},
              {"options", Json{{"alpha", o.alpha},
                               {"min_effect", o.min_effect},
                               {"flaky_spread", o.flaky_spread},
                               {"bootstrap_resamples", o.bootstrap_resamples},
                               {"seed", o.seed}}},
              {"regressions", r.regressions},
              {"improvements", r.improvements},
              {"flaky", r.flaky},
              {"unchanged", r.unchanged},
              {"new", r.fresh},
              {"warnings", r.warnings},
              {"changes", changes}};
}

std::string render_markdown(const RegressResult& r) {
  std::string md = fmt::format(
      "# atrex regress: {}\n\n- current: `{}`\n- baseline nights: {}\n- thresholds: alpha {}, "
      "minimum effect {:.1f}%, flaky above {:.1f}% night-to-night spread\n\n**{} regression(s)**, "
      "{} improvement(s), {} flaky, {} unchanged, {} new\n\n",
      r.regressions ? "REGRESSION" : "no regression", markdown_cell(r.current), r.baselines.size(),
      r.options.alpha, 100 * r.options.min_effect, 100 * r.options.flaky_spread, r.regressions,
      r.improvements, r.flaky, r.unchanged, r.fresh);
  for (const auto& w : r.warnings) md += "> warning: " + markdown_cell(w) + "\n\n";
  md += "| verdict | agent | operator | shape | baseline µs | current µs | ratio | interval | "
        "p (slower) | night spread | note |\n|---|---|---|---|---:|---:|---:|---|---:|---:|---|\n";
  for (const auto& c : r.changes) {
    if (c.verdict == ChangeVerdict::kUnchanged) continue;
    md += fmt::format("| {} | {} | {} | {} | {:.4g} | {:.4g} | {:.3f} | [{:.3f}, {:.3f}] | {:.2g} "
                      "| {:.1f}% | {} |\n",
                      change_verdict_name(c.verdict), markdown_cell(c.agent), markdown_cell(c.op),
                      markdown_cell(c.shape), c.baseline_median_us, c.current_median_us, c.ratio,
                      c.ratio_ci_low, c.ratio_ci_high, c.p_slower, 100 * c.night_spread,
                      markdown_cell(c.note));
  }
  md += fmt::format("\n{} shape(s) unchanged (not listed).\n", r.unchanged);
  return md;
}

std::string render_junit(const RegressResult& r) {
  std::string cases;
  int failures = 0, skipped = 0;
  for (const auto& c : r.changes) {
    cases += fmt::format("    <testcase classname=\"atrex.regress.{}.{}\" name=\"shape {}\" time=\"0\">",
                         xml_escape(c.agent), xml_escape(c.op), xml_escape(c.shape));
    if (is_regression(c.verdict)) {
      ++failures;
      cases += fmt::format(
          "<failure type=\"{}\" message=\"{}: {:.4g} µs vs baseline {:.4g} µs (x{:.3f}, p "
          "{:.2g})\">{}</failure>",
          change_verdict_name(c.verdict), change_verdict_name(c.verdict), c.current_median_us,
          c.baseline_median_us, c.ratio, c.p_slower, xml_escape(c.note));
    } else if (c.verdict == ChangeVerdict::kFlaky) {
      ++skipped;
      cases += fmt::format("<skipped message=\"flaky: {}\"/>", xml_escape(c.note));
    }
    cases += "</testcase>\n";
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"atrex regress\" "
      "tests=\"{0}\" failures=\"{1}\" errors=\"0\" skipped=\"{2}\">\n  <testsuite "
      "name=\"atrex.regress\" tests=\"{0}\" failures=\"{1}\" errors=\"0\" skipped=\"{2}\">\n{3}"
      "  </testsuite>\n</testsuites>\n",
      r.changes.size(), failures, skipped, cases);
}

}  // namespace atrex::scoring
