// Output comparison of the correctness gate (docs/architecture.md §5, paper §4: atol 1e-2, rtol
// 5e-2).
//
//  * Integer outputs must match exactly.
//  * Float outputs: |c - r| <= atol + rtol * |r| element-wise (torch.allclose), and a NaN/Inf
//    where the reference is finite fails; where the reference holds ±inf the candidate must
//    match it exactly.
//  * Low-signal outputs: if an all-zero output would pass the test above (tiny outputs such
//    as quantisation scales), the absolute tolerance is meaningless; such an output is judged
//    relative to its magnitude: |c - r| <= atol * max|r| + rtol * |r|.
#pragma once

#include <cstdint>
#include <string>

#include "atrex/problems/operator.h"

namespace atrex::problems {

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
