// CUDA references of operator group "moe_gemm" (see ../ops/moe_gemm_defs.cpp). Not defined yet.
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_moe_gemm_cuda(CudaRefTable& /*t*/) {}

}  // namespace atrex::problems::cuda
