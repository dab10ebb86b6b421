#include "atrex/problems/host_run.h"

#include <cstring>

#include <fmt/format.h>

namespace atrex::problems {

Result<HostRun> run_reference_host(const ResolvedShape& shape, uint64_t seed, bool edge_cases) {
  const OperatorDef& def = *shape.def;
  if (!def.reference_cpu)
    return invalid_input(fmt::format("operator {} has no CPU reference", def.name));
  HostRun run;
  std::vector<const void*> in_ptr;
  std::vector<void*> out_ptr;
  for (size_t i = 0; i < shape.inputs.size(); ++i) {
    run.inputs.emplace_back(shape.inputs[i].bytes());
    generate_input_cpu(shape, i, seed, run.inputs[i].data());
    if (edge_cases) apply_edge_case_cpu(shape, i, seed, run.inputs[i].data());
    in_ptr.push_back(run.inputs[i].data());
  }
  for (size_t o = 0; o < shape.outputs.size(); ++o) {
    run.outputs.emplace_back(shape.outputs[o].bytes(), uint8_t{0});
    const std::string& from = def.outputs[o].initial_from;
    for (size_t i = 0; !from.empty() && i < shape.inputs.size(); ++i) {
      if (shape.inputs[i].name == from && run.inputs[i].size() == run.outputs[o].size())
        std::memcpy(run.outputs[o].data(), run.inputs[i].data(), run.inputs[i].size());
    }
    out_ptr.push_back(run.outputs[o].data());
  }
  def.reference_cpu(shape, in_ptr, out_ptr);
  return run;
}

}  // namespace atrex::problems
