// Reference re-expressed as a cuda candidate: rms_norm (one block per row).
// out = bf16((x * rsqrt(mean(x^2) + eps)) * w), x: bf16 [T, H], w: bf16 [H], fp32 arithmetic.
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

__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps) {
  __shared__ float smem[kThreads];
  const int64_t base = blockIdx.x * hidden;
  float ss = 0.0f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(x[base + h]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, smem) / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads)
    out[base + h] =
        __float2bfloat16_rn((__bfloat162float(x[base + h]) * inv) * __bfloat162float(w[h]));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors t(launch, "rms_norm");
  const DLTensor* x = t.input("x", atrex::cand::kBF16, 2);
  const DLTensor* w = t.input("weight", atrex::cand::kBF16, 1);
  const DLTensor* o = t.output("out", atrex::cand::kBF16, 2);
  if (!t.ok() || !t.same_dims(x, o) || !t.dim_is(w, 0, x->shape[1])) return t.failed();
  if (x->shape[0] == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  rms_norm_kernel<<<static_cast<unsigned>(x->shape[0]), kThreads, 0,
                    static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(o->data), x->shape[1], eps);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : atrex::cand::fail("rms_norm: %s", cudaGetErrorString(e));
}
