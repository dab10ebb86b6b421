// Reference re-expressed as a cuda candidate: fused_add_rms_norm (one block per row).
// residual_out = bf16(x + residual); out = bf16((residual_out * rsqrt(mean(residual_out^2) + eps))
// * w), bf16 [T, H] rows, fp32 arithmetic.
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

__global__ void fused_add_rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* residual,
                                          const __nv_bfloat16* w, __nv_bfloat16* out,
                                          __nv_bfloat16* residual_out, int64_t hidden, float eps) {
  __shared__ float smem[kThreads];
  const int64_t base = blockIdx.x * hidden;
  float ss = 0.0f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const __nv_bfloat16 s =
        __float2bfloat16_rn(__bfloat162float(x[base + h]) + __bfloat162float(residual[base + h]));
    residual_out[base + h] = s;
    const float v = __bfloat162float(s);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, smem) / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads)
    out[base + h] = __float2bfloat16_rn((__bfloat162float(residual_out[base + h]) * inv) *
                                        __bfloat162float(w[h]));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  using namespace atrex::cand;
  Tensors t(launch, "fused_add_rms_norm");
  const DLTensor* x = t.input("x", kBF16, 2);
  const DLTensor* res = t.input("residual", kBF16, 2);
  const DLTensor* w = t.input("weight", kBF16, 1);
  const DLTensor* o = t.output("out", kBF16, 2);
  const DLTensor* ro = t.output("residual", kBF16, 2);
  if (!t.ok() || !t.same_dims(x, res) || !t.same_dims(x, o) || !t.same_dims(x, ro) ||
      !t.dim_is(w, 0, x->shape[1]))
    return t.failed();
  if (x->shape[0] == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  fused_add_rms_norm_kernel<<<static_cast<unsigned>(x->shape[0]), kThreads, 0,
                              static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(res->data),
      static_cast<const __nv_bfloat16*>(w->data), static_cast<__nv_bfloat16*>(o->data),
      static_cast<__nv_bfloat16*>(ro->data), x->shape[1], eps);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail("fused_add_rms_norm: %s", cudaGetErrorString(e));
}
