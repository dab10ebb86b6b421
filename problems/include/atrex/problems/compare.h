// Output comparison of the correctness gate (docs/architecture.md §5, paper §4: atol 1e-2, rtol
// 5e-2).
//
//  * Integer outputs must match exactly.
//  * Float outputs: |c - r| <= atol + rtol * |r| element-wise (torch.allclose), and a NaN/Inf
//    where the reference is finite fails; where the reference holds ±inf the candidate must
//    match it exactly.
//  * Low-signal outputs: where atol is a large fraction of the output's own scale, the absolute
//    tolerance hides whole terms of the computation (fused_moe's outputs peak near 0.02 under
//    atol 1e-2: skipping half the experts passes). An output is low-signal when an all-zero
//    output would pass the test above (quantisation scales), or when atol >= kLowSignalFraction
//    * max|r| over its finite elements; it is then judged relative to its magnitude:
//    |c - r| <= atol * max|r| + rtol * |r|. Which outputs of which operators this engages on is
//    measured by `atrex problems signal` and listed in docs/evaluation.md ("Low-signal outputs").
#pragma once

#include <cstdint>
#include <string>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems {

// atol at or above this fraction of max|r| makes an output low-signal (see above): an error of a
// tenth of the output's largest magnitude is not a rounding difference.
inline constexpr double kLowSignalFraction = 0.1;

// The low-signal decision of compare_output, from the reference's statistics: `zero_passes`,
// an all-zero output would pass the plain test; `ref_max`, max |r| over finite elements.
ATREX_HD bool is_low_signal(bool zero_passes, double ref_max, double atol) {
  return zero_passes || (ref_max > 0 && atol >= kLowSignalFraction * ref_max);
}

// What the correctness gate needs to know about one reference output before comparing: the
// statistics over its finite elements and the low-signal decision taken from them. Shared by
// compare_output and `atrex problems signal` (measure_output_signal), so both decide alike.
struct ReferenceSignal {
  bool integer = false;      // integer / bool dtype: compared exactly, never low-signal
  int64_t finite = 0;        // finite reference elements
  double ref_max = 0;        // max |r| over them
  double sum_sq = 0;         // sum of r^2 over them
  bool zero_passes = false;  // an all-zero output would pass |0 - r| <= atol + rtol |r| everywhere
  bool low_signal = false;   // judged relative to ref_max (is_low_signal)
};

// Integer outputs (int32, int64, uint8, bool) are compared exactly.
bool is_integer_dtype(DType dtype);

// One pass over the `n` reference elements of `dtype` at `reference` (host memory).
ReferenceSignal reference_signal(DType dtype, const void* reference, int64_t n, double atol,
                                 double rtol);

struct CompareResult {
  bool pass = true;
  bool low_signal = false;
  double max_abs_error = 0;
  double max_rel_error = 0;  // max |c - r| / |r| over elements with r != 0
  int64_t bad_count = 0;
  std::string message;  // first failure, with coordinates and values
};

// Compares host buffers of one output tensor.
CompareResult compare_output(const TensorDesc& desc, const void* candidate, const void* reference,
                             double atol, double rtol);

// Reads element i of a typed buffer as double (bf16/fp16/fp32/fp64/int).
double element_as_double(DType dtype, const void* data, int64_t i);

}  // namespace atrex::problems
