// Roofline model (paper §3; Williams, Waterman, Patterson, CACM 2009) as Atrex-Bench applies it:
//   T_roofline = max( Σ_dtype W_dtype / P_peak[path(dtype)],  (Q_read + Q_write) / B_hbm )
// with the dtype -> execution path map of Atrex's eval/roofline.py
// (bf16 -> bf16_tc, fp16 -> fp16_tc, fp32 -> fp32_strict, fp8_e4m3 -> fp8_e4m3_tc, ...).
// S_j = T_roofline / T_candidate, capped at 1; above 1 is flagged (docs/architecture.md §6): it
// means the roofline or the measurement is wrong.
#pragma once

#include <string>
#include <string_view>

#include "atrex/common/error.h"
#include "atrex/common/wire/eval_settings.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/suite.h"

namespace atrex::problems {

struct RooflineTime {
  double compute_s = 0;   // Σ W_d / P_d
  double memory_s = 0;    // Q / B
  double roofline_s = 0;  // max of the two
  std::string bound;      // "compute", "memory" or "none" (W = Q = 0)
};

// Path key of hardware.p_peak for a W dtype; kInvalidInput for an unknown dtype.
Result<std::string> peak_path_for_dtype(std::string_view dtype);

// T_roofline for one shape on one hardware profile. kInvalidInput names the dtype/path when the
// profile has no peak for a dtype the shape uses.
Result<RooflineTime> roofline_time(const RooflineCounts& counts, const HardwareProfile& hw);

struct ShapeScore {
  double s_j = 0;               // in [0, 1]
  bool above_roofline = false;  // raw ratio was > 1 (capped)
};

// S_j = min(1, T_roofline / T_candidate). Times in any one unit; a non-positive candidate time
// scores 0 and is flagged.
ShapeScore score_shape(double t_roofline, double t_candidate);

// W/Q of one shape from the released roofline.json (kReleased, comparable with the paper) or
// the operator's analytic formula (kAnalytic). Evaluator side: reads hidden data. Errors:
// kNotFound when the operator, the shape or the formula is missing.
Result<RooflineCounts> roofline_counts(const Suite& suite, const std::string& op,
                                       const Shape& shape, RooflineSource source);

}  // namespace atrex::problems
