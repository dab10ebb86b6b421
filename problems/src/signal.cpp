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
    const ReferenceSignal sig = reference_signal(t.dtype, out[o].data(), s.elements, atol, rtol);
    s.integer = sig.integer;
    s.ref_max = sig.ref_max;
    s.ref_rms = sig.finite > 0 ? std::sqrt(sig.sum_sq / static_cast<double>(sig.finite)) : 0;
    s.zero_passes = sig.zero_passes;
    s.low_signal = sig.low_signal;  // the decision compare_output makes on these buffers
    res.push_back(std::move(s));
  }
  return res;
}

}  // namespace atrex::problems
