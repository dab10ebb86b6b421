// CUDA references of operator group "attention" (see ../ops/attention_defs.cpp): the same
// functors as the CPU definitions, one thread per (query row, head) or per cache element.
#include "../ops/attention_cache_ops.h"
#include "../ops/attention_decode_ops.h"
#include "../ops/attention_ops.h"
#include "attention_forward_cuda.cuh"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

void add_attention_cuda(CudaRefTable& t) {
  t["attention_forward"] = &attention_forward_cuda;  // tiled (attention_forward_cuda.cuh)
  t["unified_attention"] = &ops::unified_attention_reference<CudaExec>;
  t["paged_attention_decode"] = &ops::paged_attention_decode_reference<CudaExec>;
  t["mla_decode_attention"] = &ops::mla_decode_attention_reference<CudaExec>;
  t["reshape_and_cache"] = &ops::reshape_and_cache_reference<CudaExec>;
}

}  // namespace atrex::problems::cuda
