// Reference re-expressed as a cuda candidate: silu_and_mul (one thread per output element).
// x: bf16 [N, 2d] -> out: bf16 [N, d] = bf16(bf16(silu(x[:, :d])) * x[:, d:]), fp32 silu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate_util.h"

namespace {

__global__ void silu_and_mul_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t rows,
                                    int64_t d) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * d) return;
  const int64_t r = i / d, j = i % d;
  const float g = __bfloat162float(x[r * 2 * d + j]);
  const float act = __bfloat162float(__float2bfloat16_rn(g / (1.0f + expf(-g))));
  out[i] = __float2bfloat16_rn(act * __bfloat162float(x[r * 2 * d + d + j]));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors t(launch, "silu_and_mul");
  const DLTensor* x = t.input("x", atrex::cand::kBF16, 2);
  const DLTensor* o = t.output("out", atrex::cand::kBF16, 2);
  if (!t.ok() || !t.dim_is(o, 0, x->shape[0]) || !t.dim_is(o, 1, x->shape[1] / 2))
    return t.failed();
  if (x->shape[1] % 2 != 0) return atrex::cand::fail("silu_and_mul: odd last dimension");
  const int64_t rows = x->shape[0], d = x->shape[1] / 2, n = rows * d;
  if (n == 0) return 0;
  silu_and_mul_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                        static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<__nv_bfloat16*>(o->data), rows, d);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : atrex::cand::fail("silu_and_mul: %s", cudaGetErrorString(e));
}
