// Fault candidate, cuda twin of rms_norm_guard_writes_out_of_bounds.cpp (issue 14, attack 8): the
// correct rms_norm of rms_norm_correct.cu plus a write of ATTACK_OVERRUN elements past the end of
// its output (ATTACK_BEFORE 1: before its start). Must be `rejected`, the note naming the output
// and the side (the guard regions are in device memory, compared on the device after each call).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

#define ATTACK_OVERRUN 1
#define ATTACK_BEFORE 0

namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(xr[h]);
    ss += v * v;
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] =
        __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
}

__global__ void overrun_kernel(__nv_bfloat16* out, int64_t n) {
  for (int64_t k = threadIdx.x; k < ATTACK_OVERRUN; k += blockDim.x) {
    if (ATTACK_BEFORE)
      out[-1 - k] = out[k % n];
    else
      out[n + k] = out[n - 1 - k % n];
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
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0,
                    static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(out->data), hidden, eps);
  overrun_kernel<<<1, 32, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<__nv_bfloat16*>(out->data), rows * hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
