// Reference re-expressed as a cuda candidate: gated_rms_norm (one block per row).
// norm_before_gate: out = bf16((x * rsqrt(mean(x^2) + eps)) * w * act(z)); else the gated x
// (x * act(z)) is normalised. act: silu / swish or sigmoid. fp32 arithmetic, one rounding.
#include <cstring>

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

struct Gate {
  bool sigmoid;
  __device__ float operator()(float v) const {
    const float e = expf(-v);
    return sigmoid ? 1.0f / (1.0f + e) : v / (1.0f + e);
  }
};

__global__ void gated_rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                      const __nv_bfloat16* z, __nv_bfloat16* out, int64_t hidden,
                                      float eps, bool norm_before_gate, Gate act) {
  __shared__ float smem[kThreads];
  const int64_t base = blockIdx.x * hidden;
  float sum_sq = 0.0f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    float v = __bfloat162float(x[base + h]);
    if (!norm_before_gate) v *= act(__bfloat162float(z[base + h]));
    sum_sq += v * v;
  }
  sum_sq = block_reduce(sum_sq, SumOp{}, smem);
  const float rstd = rsqrtf(sum_sq / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float g = act(__bfloat162float(z[base + h]));
    float v = __bfloat162float(x[base + h]);
    if (!norm_before_gate) v *= g;
    float o = (v * rstd) * __bfloat162float(w[h]);
    if (norm_before_gate) o *= g;
    out[base + h] = __float2bfloat16_rn(o);
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* weight = atrex_input(launch, "weight");
  const DLTensor* z = atrex_input(launch, "z");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !weight || !z || !out || x->ndim != 2) return 1;
  const AtrexParam* act_param = atrex_param(launch, "activation");
  const char* act_name = act_param && act_param->string_value ? act_param->string_value : "silu";
  const bool sigmoid = std::strcmp(act_name, "sigmoid") == 0;
  if (!sigmoid && std::strcmp(act_name, "silu") != 0 && std::strcmp(act_name, "swish") != 0)
    return 2;
  if (x->shape[0] == 0) return 0;
  gated_rms_norm_kernel<<<static_cast<unsigned>(x->shape[0]), kThreads, 0,
                          static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(weight->data),
      static_cast<const __nv_bfloat16*>(z->data), static_cast<__nv_bfloat16*>(out->data),
      x->shape[1], static_cast<float>(atrex_param_float(launch, "eps", 1e-6)),
      atrex_param_int(launch, "norm_before_gate", 1) != 0, Gate{sigmoid});
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
