// CHEAT (GPU): returns at once and launches the kernel from a host thread a moment later, so
// the timed window (and a check right after the call) sees no work. The poisoned-output check
// after the call must reject it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "atrex/candidate.h"

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

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const __nv_bfloat16*>(x->data);
  const auto* wp = static_cast<const __nv_bfloat16*>(w->data);
  auto* op = static_cast<__nv_bfloat16*>(out->data);
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads>>>(xp, wp, op, hidden, eps);
  }).detach();
  return 0;
}
