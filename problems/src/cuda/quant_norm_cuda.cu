// CUDA references of operator group "quant_norm" (see ../ops/quant_norm_defs.cpp). Not defined yet.
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_quant_norm_cuda(CudaRefTable& /*t*/) {}

}  // namespace atrex::problems::cuda
