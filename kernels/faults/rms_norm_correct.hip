// A correct rms_norm candidate for the hip backend: one block per row, fp32 accumulation,
// block reduction through shared memory (no wavefront-size assumption: 32 or 64 both work).
// bf16 travels as its bit pattern (uint16_t), rounded to nearest-even on the way out.
// CI compiles it (hipcc, no AMD GPU there); it has never been run.
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 256;

__device__ float bf16_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ uint16_t float_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void rms_norm_kernel(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t hidden,
                                float eps) {
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = bf16_to_float(xr[h]);
    ss += v * v;
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] = float_to_bf16(bf16_to_float(xr[h]) * inv * bf16_to_float(w[h]));
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (rows == 0 || hidden == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  hipLaunchKernelGGL(rms_norm_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0,
                     static_cast<hipStream_t>(launch->stream),
                     static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(w->data),
                     static_cast<uint16_t*>(out->data), hidden, eps);
  return hipGetLastError() == hipSuccess ? 0 : 2;
}
