#include "atrex/problems/roofline.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "atrex/problems/operator.h"

namespace atrex::problems {

Result<std::string> peak_path_for_dtype(std::string_view dtype) {
  static const std::map<std::string, std::string, std::less<>> kPaths = {
      {"bf16", "bf16_tc"},           {"fp16", "fp16_tc"},
      {"fp32", "fp32_strict"},       {"fp32_strict", "fp32_strict"},
      {"fp32_tf32", "fp32_tf32_tc"}, {"tf32", "fp32_tf32_tc"},
      {"fp8_e4m3", "fp8_e4m3_tc"},   {"fp8_e5m2", "fp8_e5m2_tc"}};
  auto it = kPaths.find(dtype);
  if (it != kPaths.end()) return it->second;
  for (const auto& [_, path] : kPaths) {
    if (path == dtype) return path;
  }
  return invalid_input(fmt::format(
      "unknown W dtype \"{}\" (known: bf16, fp16, fp32, fp32_tf32, fp8_e4m3, fp8_e5m2)", dtype));
}

Result<RooflineTime> roofline_time(const RooflineCounts& counts, const HardwareProfile& hw) {
  RooflineTime t;
  for (const auto& [dtype, flops] : counts.w_flops_by_dtype) {
    if (flops <= 0) continue;
    ATREX_ASSIGN_OR_RETURN(std::string path, peak_path_for_dtype(dtype));
    auto it = hw.p_peak_flops_per_s.find(path);
    if (it == hw.p_peak_flops_per_s.end()) {
      return invalid_input(fmt::format("hardware profile {} has no p_peak.{} (needed for {} FLOPs)",
                                       hw.name, path, dtype));
    }
    t.compute_s += flops / it->second;
  }
  t.memory_s = (counts.q_read_bytes + counts.q_write_bytes) / hw.hbm_bytes_per_s;
  t.roofline_s = std::max(t.compute_s, t.memory_s);
  t.bound = t.roofline_s == 0 ? "none" : (t.compute_s >= t.memory_s ? "compute" : "memory");
  return t;
}

ShapeScore score_shape(double t_roofline, double t_median, double t_slow, double margin) {
  ShapeScore s;
  if (!(t_median > 0)) {
    s.above_roofline = true;
    return s;
  }
  s.ratio = t_roofline / t_median;
  s.s_j = std::min(1.0, s.ratio);
  s.above_roofline = s.ratio > 1.0;
  const double slow = std::max(t_slow, t_median);
  s.impossible = t_roofline / slow > 1.0 + margin;
  return s;
}

Result<RooflineCounts> roofline_counts(const Suite& suite, const std::string& op,
                                       const Shape& shape, RooflineSource source) {
  // A reduced shape is atrex's own: the release has no counts for it.
  if (source == RooflineSource::kReleased && !shape.reduced) return suite.roofline(op, shape.id);
  ATREX_ASSIGN_OR_RETURN(const OperatorDef* def, require_native_operator(op));
  if (!def->analytic)
    return not_found(fmt::format("operator {} has no analytic roofline formula", op));
  ATREX_ASSIGN_OR_RETURN(ResolvedShape resolved, resolve_shape(*def, shape));
  return def->analytic(resolved);
}

}  // namespace atrex::problems
