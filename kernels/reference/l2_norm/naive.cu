// Reference re-expressed as a cuda candidate: l2_norm (one block per row).
// out = bf16(x * rsqrt(sum(x^2) + eps)), x: bf16 [N, H], fp32 arithmetic.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate_util.h"

namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v, float* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
    __syncthreads();
  }
  const float r = smem[0];
  __syncthreads();
  return r;
}

__global__ void l2_norm_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t hidden,
                               float eps) {
  __shared__ float smem[kThreads];
  const int64_t base = blockIdx.x * hidden;
  float ss = 0.0f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(x[base + h]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, smem) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads)
    out[base + h] = __float2bfloat16_rn(__bfloat162float(x[base + h]) * inv);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors t(launch, "l2_norm");
  const DLTensor* x = t.input("x", atrex::cand::kBF16, 2);
  const DLTensor* o = t.output("out", atrex::cand::kBF16, 2);
  if (!t.ok() || !t.same_dims(x, o)) return t.failed();
  if (x->shape[0] == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  l2_norm_kernel<<<static_cast<unsigned>(x->shape[0]), kThreads, 0,
                   static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<__nv_bfloat16*>(o->data), x->shape[1],
      eps);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : atrex::cand::fail("l2_norm: %s", cudaGetErrorString(e));
}
