// Reference re-expressed as a cuda candidate: layer_norm (one block per row of the last dim).
// out = bf16(((x - mean) * rsqrt(var + 1e-5)) * w + b), biased variance, two-pass in fp32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 256;

// Block-wide reduction over kThreads threads (a power of two); every thread gets the result.
template <class Op>
__device__ float block_reduce(float v, Op op, float* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] = op(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = smem[0];
  __syncthreads();
  return r;
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__global__ void layer_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                  const __nv_bfloat16* b, __nv_bfloat16* out, int64_t hidden) {
  __shared__ float smem[kThreads];
  const int64_t base = blockIdx.x * hidden;
  float sum = 0.0f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) sum += __bfloat162float(x[base + h]);
  const float mean = block_reduce(sum, SumOp{}, smem) / static_cast<float>(hidden);
  float m2 = 0.0f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float d = __bfloat162float(x[base + h]) - mean;
    m2 += d * d;
  }
  const float rstd = rsqrtf(block_reduce(m2, SumOp{}, smem) / static_cast<float>(hidden) + 1e-5f);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = ((__bfloat162float(x[base + h]) - mean) * rstd) * __bfloat162float(w[h]) +
                    __bfloat162float(b[h]);
    out[base + h] = __float2bfloat16_rn(v);
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* weight = atrex_input(launch, "weight");
  const DLTensor* bias = atrex_input(launch, "bias");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !weight || !bias || !out || weight->ndim != 1) return 1;
  const int64_t hidden = weight->shape[0], rows = atrex_numel(x) / hidden;
  if (rows == 0) return 0;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0,
                      static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(weight->data),
      static_cast<const __nv_bfloat16*>(bias->data), static_cast<__nv_bfloat16*>(out->data),
      hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
