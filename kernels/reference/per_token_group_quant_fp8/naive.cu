// Reference re-expressed as a cuda candidate: per_token_group_quant_fp8 (one warp per group).
// scale = max(amax|group| * fl(1/448), 1e-10); quantized = e4m3fn(clamp(x / scale, -448, 448)).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void group_quant_kernel(const __nv_bfloat16* x, __nv_fp8_storage_t* q, float* scales,
                                   int64_t groups, int64_t group_size) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (g >= groups) return;  // whole warps leave together
  const int64_t base = g * group_size;
  float amax = 0.0f;
  for (int64_t j = lane; j < group_size; j += 32)
    amax = fmaxf(amax, fabsf(__bfloat162float(x[base + j])));
  for (int off = 16; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float s = fmaxf(amax * (1.0f / 448.0f), 1e-10f);
  for (int64_t j = lane; j < group_size; j += 32) {
    const float v = fminf(fmaxf(__bfloat162float(x[base + j]) / s, -448.0f), 448.0f);
    q[base + j] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
  if (lane == 0) scales[g] = s;
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* q = atrex_output(launch, "quantized");
  const DLTensor* scales = atrex_output(launch, "scales");
  const int64_t group = atrex_param_int(launch, "group_size", 0);
  if (!x || !q || !scales || group <= 0 || atrex_numel(x) % group != 0) return 1;
  const int64_t groups = atrex_numel(x) / group;
  if (groups == 0) return 0;
  const int64_t blocks = (groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  group_quant_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0,
                       static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<__nv_fp8_storage_t*>(q->data),
      static_cast<float*>(scales->data), groups, group);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
