// A cheating rms_norm candidate for the cuda backend (test fixture of the range probe, twin of
// rms_norm_fp16_accumulate.cpp): one block per row computing in __half where the operator's
// policy is fp32 — squares, per-thread sums and the shared-memory tree. It passes the usual
// inputs (fp16 has more mantissa than bf16); on the range probe's inputs (x * 2^11) the row sum
// passes 65504, becomes inf, and the rows come out as zeros.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_fp16_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                     __nv_bfloat16* out, int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  __half ss = __float2half(0.f);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const __half v = __float2half(__bfloat162float(xr[h]));
    ss = __hadd(ss, __hmul(v, v));
  }
  __shared__ __half partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      partial[threadIdx.x] = __hadd(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  const __half mean = __hdiv(partial[0], __float2half(static_cast<float>(hidden)));
  const __half inv = __float2half(rsqrtf(__half2float(__hadd(mean, __float2half(eps)))));
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const __half v = __float2half(__bfloat162float(xr[h]));
    const __half y = __hmul(__hmul(v, inv), __float2half(__bfloat162float(w[h])));
    out[row * hidden + h] = __float2bfloat16_rn(__half2float(y));
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  rms_norm_fp16_kernel<<<static_cast<unsigned>(rows), kThreads, 0,
                         static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(out->data), hidden, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
