#include "../ops/norm_ops.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_norm_cuda(CudaRefTable& t) {
  t["rms_norm"] = &ops::rms_norm_reference<CudaExec>;
  t["fused_add_rms_norm"] = &ops::fused_add_rms_norm_reference<CudaExec>;
  t["l2_norm"] = &ops::l2_norm_reference<CudaExec>;
}

}  // namespace atrex::problems::cuda
