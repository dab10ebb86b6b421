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
  double ratio = 0;             // T_roofline / T_candidate, uncapped
  bool above_roofline = false;  // ratio > 1: capped at 1, within the profile's margin
  // Faster than the roofline beyond the margin, even at the slower quartile of the samples:
  // the measurement cannot be right (a bent timer, a skipped computation the gates missed) or
  // the profile is wrong. A verdict, not a score (DESIGN.md §5).
  bool impossible = false;
};

// How far above the roofline a measurement may be before it is impossible: a profile's ceilings
// can sit under what honest kernels reach (the H200 profile's 4.16 TB/s copy figure, before
// 2026-12-01, was beaten by read-mostly kernels at 4.3-4.4 TB/s; its memory ceiling is now the best
// of copy, read and write streams), plus launch noise on the smallest shapes. Beyond it the
// record is `rejected`.
inline constexpr double kImpossibleSpeedMargin = 0.25;

// S_j = min(1, T_roofline / T_median). `t_slow` (the 75th percentile, or the median when not
// known) decides `impossible`: T_roofline / t_slow > 1 + margin. Times in any one unit; a
// non-positive candidate time scores 0 and is flagged above the roofline.
ShapeScore score_shape(double t_roofline, double t_median, double t_slow = 0,
                       double margin = kImpossibleSpeedMargin);

// W/Q of one shape from the released roofline.json (kReleased, comparable with the paper) or
// the operator's analytic formula (kAnalytic; always for a reduced shape, which the release has
// no counts for). Evaluator side: reads hidden data. Errors:
// kNotFound when the operator, the shape or the formula is missing.
Result<RooflineCounts> roofline_counts(const Suite& suite, const std::string& op,
                                       const Shape& shape, RooflineSource source);

}  // namespace atrex::problems
