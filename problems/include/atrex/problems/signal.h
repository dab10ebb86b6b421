// The signal of an operator's outputs under the correctness gate's tolerances (compare.h,
// "Low-signal outputs"): for one shape and seed, each output's reference magnitude and whether
// the comparison judges it against its own scale. `atrex problems signal` prints it; the table
// in docs/evaluation.md ("Low-signal outputs") is its output over the suite.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/problems/operator.h"

namespace atrex::problems {

struct OutputSignal {
  std::string output;           // the output tensor's name
  std::string dtype;            // its dtype name ("bf16", ...)
  int64_t elements = 0;
  double ref_max = 0;           // max |r| over finite reference elements
  double ref_rms = 0;           // sqrt(mean r^2) over finite reference elements
  double atol = 0;              // the tolerance the comparison uses (operator override or sweep)
  bool integer = false;         // integer outputs match exactly: no signal question
  bool zero_passes = false;     // an all-zero output would pass the plain allclose test
  bool low_signal = false;      // compare_output judges it relative to max|r|
  bool custom_compare = false;  // the operator compares this output its own way (TensorSpec)
};

// Draws the inputs of `shape` for `seed` on the host, runs the CPU reference and measures each
// output. `atol`/`rtol`: the sweep's tolerances (the operator's override wins, as in the
// evaluator). kInvalidInput when the operator has no CPU reference.
Result<std::vector<OutputSignal>> measure_output_signal(const ResolvedShape& shape, uint64_t seed,
                                                        double atol, double rtol);

}  // namespace atrex::problems
