// CUDA references of operator group "rope_conv_delta" (see ../ops/rope_conv_delta_defs.cpp):
// the same functors as the CPU definitions, one thread per unit of work.
#include "../ops/rope_conv_delta_chunk.h"
#include "../ops/rope_conv_delta_ops.h"
#include "../ops/rope_conv_delta_recurrent.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_rope_conv_delta_cuda(CudaRefTable& t) {
  t["fused_qkv_rope"] = &ops::fused_qkv_rope_reference<CudaExec>;
  t["mrope"] = &ops::mrope_reference<CudaExec>;
  t["causal_conv1d"] = &ops::causal_conv1d_reference<CudaExec>;
  t["chunk_delta_rule_output"] = &ops::chunk_delta_rule_output_reference<CudaExec>;
  t["chunk_gated_delta_rule_state"] = &ops::chunk_gated_delta_rule_state_reference<CudaExec>;
  t["gated_delta_rule_update"] = &ops::gated_delta_rule_update_reference<CudaExec>;
}

}  // namespace atrex::problems::cuda
