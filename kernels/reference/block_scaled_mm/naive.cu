// Reference re-expressed as a cuda candidate: block_scaled_mm, fp32 arithmetic as the reference's
// bmm: out[m, n] = sum_kb (dot_kb(a[m], b[n]) * a_scales[m, kb]) * b_scales[n / gn, kb].
// group_k a multiple of 32: 64 x 64 shared-memory tiles, 4 x 4 outputs per thread, K in chunks
// of 32 inside one group. Otherwise one thread per output element.
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

// fp8 e4m3fn to float (bias 7; NaN does not occur in the inputs).
__device__ float fp8_to_float(unsigned v) {
  const unsigned e = (v >> 3) & 15u, m = v & 7u;
  const float mag =
      e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : static_cast<float>(m) * 0.001953125f;
  return (v & 0x80u) ? -mag : mag;
}

__global__ void block_mm_kernel(const unsigned char* a, const unsigned char* b, const float* as,
                                const float* bs, float* out, int64_t m, int64_t n, int64_t k,
                                int64_t gn, int64_t gk) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t groups = k / gk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n;
       i += stride) {
    const int64_t r = i / n, c = i % n;
    const unsigned char* ar = a + r * k;
    const unsigned char* br = b + c * k;
    float acc = 0.0f;
    for (int64_t kb = 0; kb < groups; ++kb) {
      float dot = 0.0f;
      for (int64_t q = kb * gk; q < (kb + 1) * gk; ++q)
        dot += fp8_to_float(ar[q]) * fp8_to_float(br[q]);
      acc += (dot * as[r * groups + kb]) * bs[(c / gn) * groups + kb];
    }
    out[i] = acc;
  }
}

constexpr int kTile = 64, kChunk = 32;

__global__ void __launch_bounds__(256)
    tiled_kernel(const unsigned char* a, const unsigned char* b, const float* as, const float* bs,
                 float* out, int64_t m, int64_t n, int64_t k, int64_t gn, int64_t gk) {
  __shared__ float ta[kChunk][kTile + 1];
  __shared__ float tb[kChunk][kTile + 1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile,
                col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t groups = k / gk;
  float acc[4][4] = {}, dot[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
    for (int i = threadIdx.x; i < kTile * kChunk; i += 256) {
      const int r = i / kChunk, kk = i % kChunk;
      ta[kk][r] = row0 + r < m ? fp8_to_float(a[(row0 + r) * k + k0 + kk]) : 0.0f;
      tb[kk][r] = col0 + r < n ? fp8_to_float(b[(col0 + r) * k + k0 + kk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kChunk; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = ta[kk][ty * 4 + i], bv[i] = tb[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) dot[i][j] = fmaf(av[i], bv[j], dot[i][j]);
      }
    }
    __syncthreads();
    if ((k0 + kChunk) % gk == 0) {  // end of group kb: scale and add, as the reference
      const int64_t kb = k0 / gk;
      for (int i = 0; i < 4; ++i) {
        const int64_t r = row0 + ty * 4 + i;
        const float sa = r < m ? as[r * groups + kb] : 0.0f;
        for (int j = 0; j < 4; ++j) {
          const int64_t c = col0 + tx * 4 + j;
          const float sb = c < n ? bs[(c / gn) * groups + kb] : 0.0f;
          acc[i][j] += (dot[i][j] * sa) * sb;
          dot[i][j] = 0.0f;
        }
      }
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + ty * 4 + i;
    for (int j = 0; j < 4; ++j) {
      const int64_t c = col0 + tx * 4 + j;
      if (r < m && c < n) out[r * n + c] = acc[i][j];
    }
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* a = atrex_input(launch, "a");
  const DLTensor* b = atrex_input(launch, "b");
  const DLTensor* as = atrex_input(launch, "a_scales");
  const DLTensor* bs = atrex_input(launch, "b_scales");
  const DLTensor* out = atrex_output(launch, "out");
  const int64_t gn = atrex_param_int(launch, "group_n", 128),
                gk = atrex_param_int(launch, "group_k", 128);
  if (!a || !b || !as || !bs || !out || a->ndim != 2 || b->ndim != 2 || gn < 1 || gk < 1) return 1;
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
  if (m * n == 0) return 0;
  if (gk % kChunk == 0 && k % gk == 0 && (m + kTile - 1) / kTile < 65536) {
    const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile),
                    static_cast<unsigned>((m + kTile - 1) / kTile));
    tiled_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(launch->stream)>>>(
        static_cast<const unsigned char*>(a->data), static_cast<const unsigned char*>(b->data),
        static_cast<const float*>(as->data), static_cast<const float*>(bs->data),
        static_cast<float*>(out->data), m, n, k, gn, gk);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  const int64_t blocks = (m * n + 255) / 256;
  block_mm_kernel<<<static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)), 256, 0,
                    static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const unsigned char*>(a->data), static_cast<const unsigned char*>(b->data),
      static_cast<const float*>(as->data), static_cast<const float*>(bs->data),
      static_cast<float*>(out->data), m, n, k, gn, gk);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
