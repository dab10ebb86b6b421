#include "atrex/problems/signal.h"

#include <cmath>

#include <fmt/format.h>

#include "atrex/problems/compare.h"
#include "atrex/problems/host_run.h"

namespace atrex::problems {

Result<std::vector<OutputSignal>> measure_output_signal(const ResolvedShape& shape, uint64_t seed,
                                                        double atol, double rtol) {
  const OperatorDef& def = *shape.def;
  if (def.atol) atol = *def.atol;
  if (def.rtol) rtol = *def.rtol;
  ATREX_ASSIGN_OR_RETURN(HostRun run, run_reference_host(shape, seed));
  const auto& out = run.outputs;
  std::vector<OutputSignal> res;
  for (size_t o = 0; o < shape.outputs.size(); ++o) {
    const TensorDesc& t = shape.outputs[o];
    OutputSignal s;
    s.output = t.name;
    s.dtype = std::string(dtype_name(t.dtype));
    s.elements = t.numel();
    s.atol = atol;
    s.custom_compare = def.outputs[o].compare != nullptr;
    s.integer = t.dtype == DType::kI32 || t.dtype == DType::kI64 || t.dtype == DType::kU8 ||
                t.dtype == DType::kBool;
    double sum_sq = 0;
    int64_t finite = 0;
    bool zero_passes = !s.integer;
    for (int64_t i = 0; i < s.elements; ++i) {
      const double r = element_as_double(t.dtype, out[o].data(), i);
      if (!std::isfinite(r)) continue;
      ++finite;
      s.ref_max = std::max(s.ref_max, std::fabs(r));
      sum_sq += r * r;
      if (std::fabs(r) > atol + rtol * std::fabs(r)) zero_passes = false;
    }
    s.ref_rms = finite > 0 ? std::sqrt(sum_sq / static_cast<double>(finite)) : 0;
    s.zero_passes = zero_passes && s.elements > 0;
    // The same decision compare_output makes on these buffers.
    s.low_signal = !s.integer && s.elements > 0 && is_low_signal(s.zero_passes, s.ref_max, atol);
    res.push_back(std::move(s));
  }
  return res;
}

}  // namespace atrex::problems
