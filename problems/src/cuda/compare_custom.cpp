// cuda::compare_custom_output (cuda_ops.h): the operators' own comparisons that run on the
// device. These are the elementwise ones whose outputs get large (per_token_group_quant_fp8
// reaches 6.3e9 elements, minutes on the host):
//  * ops::compare_fp8_dequantised<1> (fp8_dynamic_per_token_quant, per_token_group_quant_fp8,
//    fused_rmsnorm_quant: q compared dequantised, scales in output 1);
//  * ops::compare_scale_relative (their scales): the generic comparison with atol 0;
//  * ops::compare_fp8_output (fp8_blockscale_fused_moe's out).
// The moe_gemm routing comparisons (sorted segments, near-ties recomputed from the inputs) stay
// on the host: they are not elementwise and their outputs are small.
//
// Host-compiled on purpose (see compare_custom_cuda.h). The dispatch compares function
// addresses: the comparisons are inline functions (one address per program), and the problems
// libraries are static.
#include "../ops/moe_gemm_compare.h"
#include "../ops/quant_norm_compare.h"
#include "atrex/problems/cuda_ops.h"
#include "compare_custom_cuda.h"

namespace atrex::problems::cuda {

Status compare_custom_output(const ResolvedShape& shape, size_t index,
                             std::span<const void* const> candidate,
                             std::span<const void* const> reference, double atol, double rtol,
                             void* stream, CompareResult& result, bool& supported) {
  result = CompareResult{};
  supported = false;
  if (!shape.def || index >= shape.def->outputs.size() || index >= shape.outputs.size())
    return ok();
  const OutputCompareFn fn = shape.def->outputs[index].compare;
  constexpr size_t kScale = 1;  // the quantisation operators' scales
  if (fn == &ops::compare_fp8_dequantised<kScale> && shape.outputs.size() > kScale) {
    return cuda::compare_fp8_dequantised(shape.outputs[index], shape.outputs[kScale],
                                         candidate[index], candidate[kScale], reference[index],
                                         reference[kScale], rtol, stream, result, supported);
  }
  if (fn == &ops::compare_scale_relative) {
    supported = true;
    return cuda::compare_output(shape.outputs[index], candidate[index], reference[index], 0.0, rtol,
                                stream, result);
  }
  if (fn == &ops::compare_fp8_output) {
    return cuda::compare_fp8_output(shape.outputs[index], candidate[index], reference[index], atol,
                                    rtol, stream, result, supported);
  }
  return ok();
}

}  // namespace atrex::problems::cuda
