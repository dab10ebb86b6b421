// Reference re-expressed as a cuda candidate: block_scaled_mm (one thread per output element, n
// fastest so a warp shares the row of a; fp32 arithmetic as the reference's bmm).
// out[m, n] = sum_kb (dot_kb(a[m], b[n]) * a_scales[m, kb]) * b_scales[n / gn, kb].
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

// fp8 e4m3fn to float (bias 7; NaN does not occur in the inputs).
__device__ float fp8_to_float(unsigned v) {
  const unsigned e = (v >> 3) & 15u, m = v & 7u;
  const float mag = e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : static_cast<float>(m) * 0.001953125f;
  return (v & 0x80u) ? -mag : mag;
}

__global__ void block_mm_kernel(const unsigned char* a, const unsigned char* b, const float* as, const float* bs,
                                float* out, int64_t m, int64_t n, int64_t k, int64_t gn, int64_t gk) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t groups = k / gk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n; i += stride) {
    const int64_t r = i / n, c = i % n;
    const unsigned char* ar = a + r * k;
    const unsigned char* br = b + c * k;
    float acc = 0.0f;
    for (int64_t kb = 0; kb < groups; ++kb) {
      float dot = 0.0f;
      for (int64_t q = kb * gk; q < (kb + 1) * gk; ++q) dot += fp8_to_float(ar[q]) * fp8_to_float(br[q]);
      acc += (dot * as[r * groups + kb]) * bs[(c / gn) * groups + kb];
    }
    out[i] = acc;
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* a = atrex_input(launch, "a");
  const DLTensor* b = atrex_input(launch, "b");
  const DLTensor* as = atrex_input(launch, "a_scales");
  const DLTensor* bs = atrex_input(launch, "b_scales");
  const DLTensor* out = atrex_output(launch, "out");
  const int64_t gn = atrex_param_int(launch, "group_n", 128), gk = atrex_param_int(launch, "group_k", 128);
  if (!a || !b || !as || !bs || !out || a->ndim != 2 || b->ndim != 2 || gn < 1 || gk < 1) return 1;
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
  if (m * n == 0) return 0;
  const int64_t blocks = (m * n + 255) / 256;
  block_mm_kernel<<<static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)), 256, 0,
                    static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const unsigned char*>(a->data), static_cast<const unsigned char*>(b->data),
      static_cast<const float*>(as->data), static_cast<const float*>(bs->data), static_cast<float*>(out->data), m, n, k,
      gn, gk);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
