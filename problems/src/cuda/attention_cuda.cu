// CUDA references of operator group "attention" (see ../ops/attention_defs.cpp). Not defined yet.
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_attention_cuda(CudaRefTable& /*t*/) {}

}  // namespace atrex::problems::cuda
