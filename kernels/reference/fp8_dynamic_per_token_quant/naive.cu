// Reference re-expressed as a cuda candidate: fp8_dynamic_per_token_quant (one block per row).
// scale = max(amax|row|, 1e-12) * fl(1/240) (the float8_e4m3fnuz range of the Atrex reference);
// q = e4m3fn(clamp(x * fl(1/scale), -240, 240)).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
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

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__global__ void quant_kernel(const __nv_bfloat16* x, __nv_fp8_storage_t* q, float* scale,
                             int64_t hidden) {
  __shared__ float smem[kThreads];
  const __nv_bfloat16* xr = x + blockIdx.x * hidden;
  float amax = 0.0f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads)
    amax = fmaxf(amax, fabsf(__bfloat162float(xr[h])));
  amax = block_reduce(amax, MaxOp{}, smem);
  const float s = fmaxf(amax, 1e-12f) * (1.0f / 240.0f);
  const float inv = 1.0f / s;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = fminf(fmaxf(__bfloat162float(xr[h]) * inv, -240.0f), 240.0f);
    q[blockIdx.x * hidden + h] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* q = atrex_output(launch, "q");
  const DLTensor* scale = atrex_output(launch, "scale");
  if (!x || !q || !scale || x->ndim != 2) return 1;
  if (x->shape[0] == 0) return 0;
  quant_kernel<<<static_cast<unsigned>(x->shape[0]), kThreads, 0,
                 static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<__nv_fp8_storage_t*>(q->data),
      static_cast<float*>(scale->data), x->shape[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
