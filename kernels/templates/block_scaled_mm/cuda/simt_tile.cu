// atrex-template: simt_tile
// atrex-description: CUDA cores only: TILE x TILE output tiles, a 32-deep K chunk of a and b decoded from e4m3 to fp32 into shared memory per step, each thread a TM x TM register block of fp32 FMAs; the K group's dot is scaled and added at each group end
// atrex-param: TILE = 64 | 64, 128
// atrex-param: TM = 4 | 4, 8
#ifndef TILE
#define TILE 64
#endif
#ifndef TM
#define TM 4
#endif

#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

// out[m, n] = sum_kb (dot_kb(a[m], b[n]) * a_scales[m, kb]) * b_scales[n / gn, kb] with fp8 e4m3
// a [M, K], b [N, K], fp32 scales and out [M, N]; everything in fp32 as the reference.
namespace {

using atrex::cand::fail;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;

constexpr int kChunk = 32;
constexpr int kSide = TILE / TM;  // threads per tile side
constexpr int kThreads = kSide * kSide;
static_assert(TILE % TM == 0 && kThreads >= 64 && kThreads <= 1024, "TILE / TM");

__device__ __forceinline__ float e4m3_to_float(uint32_t v) {
  const uint32_t e = (v >> 3) & 15u, mant = v & 7u;
  const float mag = e ? __uint_as_float(((e + 120u) << 23) | (mant << 20))
                      : static_cast<float>(mant) * 0.001953125f;
  return (v & 0x80u) ? -mag : mag;
}

__global__ void __launch_bounds__(kThreads)
    simt_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b,
                const float* __restrict__ as, const float* __restrict__ bs, float* __restrict__ out,
                int64_t m, int64_t n, int64_t k, int64_t gn, int64_t gk) {
  // K-major tiles so a thread's TM rows (columns) are consecutive words.
  __shared__ float ta[kChunk][TILE + 4];
  __shared__ float tb[kChunk][TILE + 4];
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * TILE, n0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int64_t groups = k / gk;
  float dot[TM][TM] = {}, sum[TM][TM] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
    // 4 bytes of K per load; chunks never straddle a group (group_k % 32 == 0, checked).
    for (int i = threadIdx.x; i < TILE * (kChunk / 4); i += kThreads) {
      const int r = i / (kChunk / 4), q = (i % (kChunk / 4)) * 4;
      const uint32_t wa = m0 + r < m ? *reinterpret_cast<const uint32_t*>(a + (m0 + r) * k + k0 + q) : 0u;
      const uint32_t wb = n0 + r < n ? *reinterpret_cast<const uint32_t*>(b + (n0 + r) * k + k0 + q) : 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ta[q + e][r] = e4m3_to_float((wa >> (8 * e)) & 0xffu);
        tb[q + e][r] = e4m3_to_float((wb >> (8 * e)) & 0xffu);
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < kChunk; ++kk) {
      float av[TM], bv[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = ta[kk][ty * TM + i], bv[i] = tb[kk][tx * TM + i];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TM; ++j) dot[i][j] = fmaf(av[i], bv[j], dot[i][j]);
    }
    __syncthreads();
    if ((k0 + kChunk) % gk == 0) {
      const int64_t q = k0 / gk;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int64_t r = m0 + ty * TM + i;
        const float sa = r < m ? __ldg(as + r * groups + q) : 0.f;
#pragma unroll
        for (int j = 0; j < TM; ++j) {
          const int64_t c = n0 + tx * TM + j;
          const float sb = c < n ? __ldg(bs + (c / gn) * groups + q) : 0.f;
          sum[i][j] += (dot[i][j] * sa) * sb;
          dot[i][j] = 0.f;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t r = m0 + ty * TM + i;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < TM; ++j) {
      const int64_t c = n0 + tx * TM + j;
      if (c < n) out[r * n + c] = sum[i][j];
    }
  }
}

// Any K and group sizes: one thread per output.
__global__ void scalar_kernel(const uint8_t* a, const uint8_t* b, const float* as, const float* bs,
                              float* out, int64_t m, int64_t n, int64_t k, int64_t gn, int64_t gk) {
  const int64_t groups = k / gk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    float total = 0.f;
    for (int64_t q = 0; q < groups; ++q) {
      float d = 0.f;
      for (int64_t x = q * gk; x < (q + 1) * gk; ++x)
        d += e4m3_to_float(a[r * k + x]) * e4m3_to_float(b[c * k + x]);
      total += (d * as[r * groups + q]) * bs[(c / gn) * groups + q];
    }
    out[i] = total;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "block_scaled_mm");
  const DLTensor* a = ts.input("a", kFP8E4M3, 2);
  const DLTensor* b = ts.input("b", kFP8E4M3, 2);
  const DLTensor* as = ts.input("a_scales", kF32, 2);
  const DLTensor* bs = ts.input("b_scales", kF32, 2);
  const DLTensor* o = ts.output("out", kF32, 2);
  if (!ts.ok() || !ts.dim_is(b, 1, a->shape[1]) || !ts.dim_is(o, 0, a->shape[0]) ||
      !ts.dim_is(o, 1, b->shape[0]))
    return ts.failed();
  const int64_t gn = atrex_param_int(launch, "group_n", 128), gk = atrex_param_int(launch, "group_k", 128);
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
  if (gn < 1 || gk < 1 || k % gk != 0)
    return fail("block_scaled_mm: group_n %lld, group_k %lld do not tile K %lld", (long long)gn,
                (long long)gk, (long long)k);
  if (m == 0 || n == 0) return 0;
  const auto* ap = static_cast<const uint8_t*>(a->data);
  const auto* bp = static_cast<const uint8_t*>(b->data);
  const auto* asp = static_cast<const float*>(as->data);
  const auto* bsp = static_cast<const float*>(bs->data);
  auto* op = static_cast<float*>(o->data);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int64_t gy = (m + TILE - 1) / TILE;
  if (gk % kChunk == 0 && k % 4 == 0 && atrex::cand::aligned(ap, 4) && atrex::cand::aligned(bp, 4) &&
      gy <= 65535) {
    const dim3 grid(static_cast<unsigned>((n + TILE - 1) / TILE), static_cast<unsigned>(gy));
    simt_kernel<<<grid, kThreads, 0, s>>>(ap, bp, asp, bsp, op, m, n, k, gn, gk);
  } else {
    const int64_t blocks = (m * n + 255) / 256;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)), 256, 0, s>>>(
        ap, bp, asp, bsp, op, m, n, k, gn, gk);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("block_scaled_mm: %s", cudaGetErrorString(err));
}
