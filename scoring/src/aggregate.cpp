#include "atrex/scoring/aggregate.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "atrex/common/sample_stats.h"
#include "noise.h"

namespace atrex::scoring {

double median(std::vector<double> v) { return stats::median(std::move(v)); }

ShapeDetail shape_detail(const EvalRecord& r) {
  ShapeDetail d;
  d.shape_id = r.shape_id;
  d.status = eval_status_name(r.status);
  if (r.timing && r.timing->n > 0) {
    d.time_us_median = r.timing->time_us_median;
    d.time_us_p25 = r.timing->time_us_p25;
    d.time_us_p75 = r.timing->time_us_p75;
    d.samples = r.timing->n;
    d.relative_standard_error = r.timing->relative_standard_error;
  }
  d.t_roofline_us = r.t_roofline_us;
  d.s_j = r.s_j;
  d.above_roofline = r.above_roofline;
  d.dsl_share = r.dsl_share;
  d.error = r.error.substr(0, 300);
  return d;
}

AgentScore score_agent(const problems::Suite& suite, const std::string& agent,
                       const std::vector<EvalRecord>& records,
                       const std::map<std::string, std::string>& failed, double dsl_threshold,
                       double target_rse) {
  std::map<std::string, std::vector<const EvalRecord*>> by_op;
  for (const auto& r : records) {
    if (r.candidate.agent == agent && suite.find(r.operator_name))
      by_op[r.operator_name].push_back(&r);
  }
  AgentScore out;
  out.agent = agent;
  int measured_correct = 0, adopting = 0;
  for (const auto& info : suite.operators()) {
    OperatorScore os;
    os.name = info.name;
    os.weight = info.weight;
    os.shapes_in_suite = static_cast<int>(info.shapes.size());
    auto it = by_op.find(info.name);
    if (it == by_op.end()) {
      auto f = failed.find(info.name);
      if (f != failed.end()) {
        os.attempted = true;
        os.status = "incorrect";
        os.first_error = f->second;
        ++out.operators_attempted;
      } else {
        os.status = "not attempted";
      }
      out.operators.push_back(std::move(os));
      continue;
    }
    os.attempted = true;
    std::vector<double> s_j, shares;
    std::vector<const EvalRecord*> correct;
    std::optional<std::set<std::string>> ghosts;  // over the records that were traced
    for (const EvalRecord* r : it->second) {
      if (r->unlaunched_kernels) {
        std::set<std::string> here(r->unlaunched_kernels->begin(), r->unlaunched_kernels->end());
        if (ghosts) {
          std::erase_if(*ghosts, [&](const std::string& k) { return !here.count(k); });
        } else {
          ghosts = std::move(here);
        }
      }
      ++os.shapes_evaluated;
      os.candidate_sha256 = r->candidate.sha256;
      os.python = is_python_candidate(r->candidate);
      os.shapes.push_back(shape_detail(*r));
      if (target_rse > 0 && os.shapes.back().samples > 0 &&
          os.shapes.back().relative_standard_error > target_rse) {
        os.shapes.back().noisy = true;
        ++os.shapes_noisy;
      }
      if (r->status == EvalStatus::kOk && r->s_j) {
        ++os.shapes_correct;
        correct.push_back(r);
        s_j.push_back(*r->s_j);
        if (r->above_roofline) ++os.shapes_above_roofline;
        if (r->dsl_share) shares.push_back(*r->dsl_share);
      } else if (os.first_error.empty()) {
        os.first_error = fmt::format("shape {}: {}{}{}", r->shape_id, eval_status_name(r->status),
                                     r->error.empty() ? "" : ": ", r->error);
      }
    }
    if (ghosts) os.unlaunched_kernels.assign(ghosts->begin(), ghosts->end());
    os.s_i = median(s_j);
    if (auto ci = s_i_interval(correct)) {
      os.s_i_ci_low = ci->first;
      os.s_i_ci_high = ci->second;
    }
    if (!shares.empty()) os.dsl_share = median(shares);
    const bool all = os.shapes_correct == os.shapes_evaluated;
    os.status = os.shapes_correct == 0 ? "incorrect" : (all ? "correct" : "partially correct");
    ++out.operators_attempted;
    if (all) {
      ++out.operators_correct;
      if (os.dsl_share) {
        ++measured_correct;
        if (*os.dsl_share >= dsl_threshold) {
          ++adopting;
        } else {
          os.fallback = true;
          ++out.operators_fallback;
        }
      }
    }
    out.s_agg += os.weight * os.s_i;
    out.operators.push_back(std::move(os));
  }
  out.correctness_rate =
      out.operators_attempted ? double(out.operators_correct) / out.operators_attempted : 0.0;
  if (measured_correct > 0) out.dsl_adoption_rate = double(adopting) / measured_correct;
  return out;
}

std::string fallback_operators(const AgentScore& agent) {
  std::string names;
  for (const auto& o : agent.operators) {
    if (!o.fallback) continue;
    names += fmt::format("{}{} ({:.0f}% DSL{})", names.empty() ? "" : ", ", o.name,
                         100 * o.dsl_share.value_or(0), o.python ? ", Python" : "");
  }
  return names;
}

}  // namespace atrex::scoring
