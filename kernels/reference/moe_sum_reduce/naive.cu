// Reference re-expressed as a cuda candidate: moe_sum_reduce (one thread per output element).
// expert_outputs: bf16 [T, K, H] -> out: bf16 [T, H] = bf16(sum over K * routed_scaling_factor),
// fp32 sum.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate_util.h"

namespace {

__global__ void moe_sum_reduce_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t tokens,
                                      int64_t top_k, int64_t hidden, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * hidden) return;
  const int64_t t = i / hidden, h = i % hidden;
  float acc = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) acc += __bfloat162float(x[(t * top_k + k) * hidden + h]);
  out[i] = __float2bfloat16_rn(acc * scale);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors t(launch, "moe_sum_reduce");
  const DLTensor* x = t.input("expert_outputs", atrex::cand::kBF16, 3);
  const DLTensor* o = t.output("out", atrex::cand::kBF16, 2);
  if (!t.ok() || !t.dim_is(o, 0, x->shape[0]) || !t.dim_is(o, 1, x->shape[2])) return t.failed();
  const int64_t n = x->shape[0] * x->shape[2];
  if (n == 0) return 0;
  const float scale = static_cast<float>(atrex_param_float(launch, "routed_scaling_factor", 1.0));
  moe_sum_reduce_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                          static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<__nv_bfloat16*>(o->data), x->shape[0],
      x->shape[1], x->shape[2], scale);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : atrex::cand::fail("moe_sum_reduce: %s", cudaGetErrorString(e));
}
