// One operator's reference on the host, in-process, for evaluator-side tools and tests (never a
// candidate: the evaluation child runs those, docs/evaluation.md): inputs drawn for a seed (and
// optionally rewritten into the operator's edge cases, operator.h EdgeCase), outputs initialised
// as the evaluator does (in-place outputs start as their input), the CPU reference run.
#pragma once

#include <cstdint>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/problems/operator.h"

namespace atrex::problems {

struct HostRun {
  std::vector<std::vector<uint8_t>> inputs;   // ResolvedShape::inputs layout, bytes() each
  std::vector<std::vector<uint8_t>> outputs;  // the reference's outputs
};

// kInvalidInput when the operator has no CPU reference.
Result<HostRun> run_reference_host(const ResolvedShape& shape, uint64_t seed,
                                   bool edge_cases = false);

}  // namespace atrex::problems
