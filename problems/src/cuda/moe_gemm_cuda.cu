// CUDA references of operator group "moe_gemm" (see ../ops/moe_gemm_defs.cpp): the shared
// functors run by CudaExec, with stream-ordered scratch for routing tables and intermediates;
// block_scaled_mm has a tiled kernel of its own (block_scaled_mm_cuda.cuh), bit-identical to its
// functor; the fused MoEs tiled grouped GEMMs with fp32 accumulation (moe_fused_cuda.cuh).
#include "../ops/moe_gemm_block_mm.h"
#include "../ops/moe_gemm_fused.h"
#include "../ops/moe_gemm_routing.h"
#include "../ops/moe_gemm_topk.h"
#include "block_scaled_mm_cuda.cuh"
#include "cuda_exec.cuh"

namespace atrex::problems::ops {

// Freed on the stream after the kernels that use it; a failed allocation leaves the error pending
// for the caller's cudaGetLastError and the reference skips its work.
template <>
struct Scratch<cuda::CudaExec> {
  static void* alloc(const cuda::CudaExec& ex, size_t bytes) {
    void* p = nullptr;
    return cudaMallocAsync(&p, bytes, ex.stream) == cudaSuccess ? p : nullptr;
  }
  static void release(const cuda::CudaExec& ex, void* p) { cudaFreeAsync(p, ex.stream); }
};

}  // namespace atrex::problems::ops

#include "moe_fused_cuda.cuh"

namespace atrex::problems::cuda {

void add_moe_gemm_cuda(CudaRefTable& t) {
  t["moe_align_block_size"] = &ops::moe_align_block_size_reference<CudaExec>;
  t["moe_count_and_sort"] = &ops::moe_count_and_sort_reference<CudaExec>;
  t["moe_topk_gating_softmax"] = &ops::moe_topk_gating_softmax_reference<CudaExec>;
  t["topk_filter"] = &ops::topk_filter_reference<CudaExec>;
  t["fused_moe"] = &fused_moe_cuda;
  t["fp8_blockscale_fused_moe"] = &fp8_blockscale_fused_moe_cuda;
  t["block_scaled_mm"] = &block_scaled_mm_cuda;
}

}  // namespace atrex::problems::cuda
