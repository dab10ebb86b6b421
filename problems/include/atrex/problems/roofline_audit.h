// Roofline audit (`atrex roofline --audit`): atrex's analytical W/Q per operator against the
// released Atrex-Bench roofline.json (traced with FlopCounterMode), flagging shapes whose
// counts differ by more than a threshold, with the operator's explanation.
#pragma once

#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/problems/suite.h"

namespace atrex::problems {

struct ShapeAudit {
  std::string shape_id;
  double w_released = 0, w_analytic = 0;  // FLOPs, all dtypes
  double q_released = 0, q_analytic = 0;  // bytes read + written
  double w_diff = 0, q_diff = 0;          // (analytic - released) / released; 0 when both are 0
  bool flagged = false;
};

struct OperatorAudit {
  std::string op;
  bool has_formula = false;  // a native definition with an analytic formula exists
  std::vector<ShapeAudit> shapes;
  double max_abs_w_diff = 0;
  double max_abs_q_diff = 0;
  int flagged = 0;
  std::string notes;  // OperatorDef::roofline_notes
};

// Audits every suite operator (operators without a formula are listed with has_formula false).
Result<std::vector<OperatorAudit>> audit_roofline(const Suite& suite, double threshold = 0.05);

}  // namespace atrex::problems
