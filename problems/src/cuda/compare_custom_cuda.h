// Device versions of the operators' own elementwise fp8 comparisons (compare_custom_cuda.cu),
// dispatched on TensorSpec::compare by compare_custom.cpp. That dispatch is host-compiled: the
// ops headers it must name (quant_norm_compare.h, moe_gemm_compare.h) use fmt's compile-time
// format strings, which nvcc's front end rejects.
//
// Each returns a Status (a CUDA failure: cuda_status.h), synchronises `stream` (a cudaStream_t),
// and fills `result` with the host function's pass, bad_count, max_abs_error and max_rel_error
// (low_signal false, no message). `supported` is false, and nothing runs, for dtypes or
// layouts the host function does not define.
#pragma once

#include "atrex/common/error.h"
#include "atrex/problems/compare.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::cuda {

// ops::compare_dequantised: q fp8 e4m3 [.., H], scales fp32, one per q.numel() / scale.numel()
// consecutive elements (a row or a group).
Status compare_fp8_dequantised(const TensorDesc& q, const TensorDesc& scale, const void* q_cand,
                               const void* scale_cand, const void* q_ref, const void* scale_ref,
                               double rtol, void* stream, CompareResult& result, bool& supported);

// ops::compare_fp8_output: fp8 e4m3 outputs, allclose widened by one fp8 step, NaN (torch's
// overflow) only next to NaN or ±448 of the same sign.
Status compare_fp8_output(const TensorDesc& d, const void* cand, const void* ref, double atol,
                          double rtol, void* stream, CompareResult& result, bool& supported);

}  // namespace atrex::problems::cuda
