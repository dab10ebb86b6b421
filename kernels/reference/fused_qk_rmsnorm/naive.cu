// Reference re-expressed as a cuda candidate: fused_qk_rmsnorm (one warp per (token, head)).
// Each q and k head of hidden_states [T, (Hq + 2 Hkv) d] fp16 becomes fp16(w * fp16(x *
// rsqrt(mean(x^2) + eps))) with q_weight / k_weight [d]; v heads are copied.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void qk_rmsnorm_kernel(const __half* hs, const __half* qw, const __half* kw, __half* out,
                                  int64_t units, int64_t heads, int64_t kv_heads, int64_t d,
                                  float eps) {
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;  // whole warps leave together
  const int64_t slots = heads + 2 * kv_heads, slot = unit % slots, base = unit * d;
  if (slot >= heads + kv_heads) {
    for (int64_t j = lane; j < d; j += 32) out[base + j] = hs[base + j];
    return;
  }
  const __half* w = slot < heads ? qw : kw;
  float sum_sq = 0.0f;
  for (int64_t j = lane; j < d; j += 32)
    sum_sq += __half2float(hs[base + j]) * __half2float(hs[base + j]);
  for (int off = 16; off > 0; off >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, off);
  const float r = rsqrtf(sum_sq / static_cast<float>(d) + eps);
  for (int64_t j = lane; j < d; j += 32) {
    const float normed = __half2float(__float2half_rn(__half2float(hs[base + j]) * r));
    out[base + j] = __float2half_rn(__half2float(w[j]) * normed);
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* hs = atrex_input(launch, "hidden_states");
  const DLTensor* qw = atrex_input(launch, "q_weight");
  const DLTensor* kw = atrex_input(launch, "k_weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!hs || !qw || !kw || !out || hs->ndim != 2) return 1;
  const int64_t heads = atrex_param_int(launch, "head_num", 0),
                kv_heads = atrex_param_int(launch, "kv_head_num", 0);
  const int64_t d = qw->shape[0], slots = heads + 2 * kv_heads;
  if (slots * d != hs->shape[1]) return 2;
  const int64_t units = hs->shape[0] * slots;
  if (units == 0) return 0;
  const int64_t blocks = (units + kWarpsPerBlock - 1) / kWarpsPerBlock;
  qk_rmsnorm_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0,
                      static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __half*>(hs->data), static_cast<const __half*>(qw->data),
      static_cast<const __half*>(kw->data), static_cast<__half*>(out->data), units, heads, kv_heads,
      d, static_cast<float>(atrex_param_float(launch, "eps", 1e-6)));
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
