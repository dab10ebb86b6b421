// The CUDA executor of the shared operator functors, and the table each operator group
// registers its CUDA references in (one <group>_cuda.cu per *_defs.cpp group).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <string_view>

#include <cuda_runtime.h>

#include "atrex/common/error.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::cuda {

template <class F>
__global__ void for_each_kernel(F f, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    f(i);
}

// Runs a host/device functor f(i) for i in [0, n) on the GPU (naive but parallel: the
// references favour clarity; one thread per row or per output element).
struct CudaExec {
  cudaStream_t stream;
  template <class F>
  void for_each(int64_t n, const F& f) const {
    if (n <= 0) return;
    constexpr int kThreads = 128;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20);
    for_each_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(f, n);
  }
};

// Draws a structured input (TensorSpec::generate) with a device generator bit-identical to the
// host one when the input has one (moe_gemm_inputs_cuda.cu): true when it drew the input, false
// leaves the input to the host generator; a CUDA failure is an Error (cuda_status.h).
Result<bool> generate_input_on_device(const ResolvedShape& shape, size_t index, uint64_t seed,
                                      void* data, cudaStream_t stream);

using CudaRefFn = void (*)(const CudaExec&, const ResolvedShape&, const void* const*, void* const*);
using CudaRefTable = std::map<std::string_view, CudaRefFn>;

void add_norm_cuda(CudaRefTable& t);        // rms_norm, fused_add_rms_norm, l2_norm
void add_activation_cuda(CudaRefTable& t);  // silu_and_mul, moe_sum_reduce
void add_quant_norm_cuda(CudaRefTable& t);
void add_moe_gemm_cuda(CudaRefTable& t);
void add_attention_cuda(CudaRefTable& t);
void add_rope_conv_delta_cuda(CudaRefTable& t);

}  // namespace atrex::problems::cuda
