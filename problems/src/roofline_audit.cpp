#include "atrex/problems/roofline_audit.h"

#include <cmath>

#include "atrex/problems/operator.h"

namespace atrex::problems {
namespace {

double total_flops(const RooflineCounts& c) {
  double w = 0;
  for (const auto& [_, f] : c.w_flops_by_dtype) w += f;
  return w;
}

double rel_diff(double analytic, double released) {
  if (released == 0) return analytic == 0 ? 0.0 : INFINITY;
  return (analytic - released) / released;
}

}  // namespace

Result<std::vector<OperatorAudit>> audit_roofline(const Suite& suite, double threshold) {
  std::vector<OperatorAudit> out;
  for (const auto& info : suite.operators()) {
    OperatorAudit a;
    a.op = info.name;
    const auto* def = find_native_operator(info.name);
    a.has_formula = def && def->analytic;
    if (!a.has_formula) {
      out.push_back(std::move(a));
      continue;
    }
    a.notes = def->roofline_notes;
    for (const auto& shape : info.shapes) {
      ATREX_ASSIGN_OR_RETURN(ResolvedShape r, resolve_shape(*def, shape));
      ATREX_ASSIGN_OR_RETURN(RooflineCounts released, suite.roofline(info.name, shape.id));
      const RooflineCounts analytic = def->analytic(r);
      ShapeAudit s;
      s.shape_id = shape.id;
      s.w_released = total_flops(released);
      s.w_analytic = total_flops(analytic);
      s.q_released = released.q_read_bytes + released.q_write_bytes;
      s.q_analytic = analytic.q_read_bytes + analytic.q_write_bytes;
      s.w_diff = rel_diff(s.w_analytic, s.w_released);
      s.q_diff = rel_diff(s.q_analytic, s.q_released);
      s.flagged = std::fabs(s.w_diff) > threshold || std::fabs(s.q_diff) > threshold;
      a.max_abs_w_diff = std::max(a.max_abs_w_diff, std::fabs(s.w_diff));
      a.max_abs_q_diff = std::max(a.max_abs_q_diff, std::fabs(s.q_diff));
      a.flagged += s.flagged;
      a.shapes.push_back(s);
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace atrex::problems
