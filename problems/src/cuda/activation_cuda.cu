#include "../ops/activation_ops.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_activation_cuda(CudaRefTable& t) {
  t["silu_and_mul"] = &ops::silu_and_mul_reference<CudaExec>;
  t["moe_sum_reduce"] = &ops::moe_sum_reduce_reference<CudaExec>;
}

}  // namespace atrex::problems::cuda
