// CUDA references of operator group "rope_conv_delta" (see ../ops/rope_conv_delta_defs.cpp). Not defined yet.
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_rope_conv_delta_cuda(CudaRefTable& /*t*/) {}

}  // namespace atrex::problems::cuda
