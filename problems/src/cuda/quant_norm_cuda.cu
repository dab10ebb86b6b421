// CUDA references of operator group "quant_norm" (definitions in ../ops/quant_norm_defs.cpp).
#include "../ops/quant_norm_ops.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_quant_norm_cuda(CudaRefTable& t) {
  t["fp8_dynamic_per_token_quant"] = &ops::fp8_dynamic_per_token_quant_reference<CudaExec>;
  t["per_token_group_quant_fp8"] = &ops::per_token_group_quant_fp8_reference<CudaExec>;
  t["fused_rmsnorm_quant"] = &ops::fused_rmsnorm_quant_reference<CudaExec>;
  t["gated_rms_norm"] = &ops::gated_rms_norm_reference<CudaExec>;
  t["layer_norm"] = &ops::layer_norm_reference<CudaExec>;
  t["fused_qk_rmsnorm"] = &ops::fused_qk_rmsnorm_reference<CudaExec>;
  t["linear_sigmoid_mul"] = &ops::linear_sigmoid_mul_reference<CudaExec>;
}

}  // namespace atrex::problems::cuda
