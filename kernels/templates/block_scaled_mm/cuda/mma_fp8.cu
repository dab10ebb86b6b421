// atrex-template: mma_fp8
// atrex-description: fp8 tensor cores (mma.sync m16n8k32 e4m3 x e4m3 -> f32, sm_89+): BM x BN block tiles, 128-byte K tiles staged by cp.async over STAGES buffers in XOR-swizzled shared memory, one fp32 accumulator per K group scaled by a_scales x b_scales into the running sum (the per-group promotion the reference's fp32 semantics need)
// atrex-param: BM = 128 | 64, 128
// atrex-param: BN = 128 | 64, 128
// atrex-param: WARPS_M = 4 | 2, 4
// atrex-param: STAGES = 3 | 2, 3
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef WARPS_M
#define WARPS_M 4
#endif
#ifndef STAGES
#define STAGES 3
#endif

#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

// out[m, n] = sum_kb (dot_kb(a[m], b[n]) * a_scales[m, kb]) * b_scales[n / gn, kb]: a [M, K] and
// b [N, K] fp8 e4m3 (K contiguous in both, so b is the "col" operand of mma as stored), fp32
// scales, out [M, N] fp32. The products of two e4m3 values are exact in fp32; each K group's dot
// is accumulated by the tensor cores from zero and then scaled and added in fp32 registers.
namespace {

using atrex::cand::fail;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::aligned;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBK = 128;  // bytes (= fp8 elements) of K per stage: one 128-byte row per tile row
constexpr int WARPS_N = kWarps / WARPS_M;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 tiles per warp
constexpr int kStageBytes = (BM + BN) * kBK;

static_assert(kWarps % WARPS_M == 0, "WARPS_M must divide the 8 warps");
static_assert(WM % 16 == 0 && WN % 8 == 0 && MT >= 1 && NT >= 1, "warp tile");
static_assert((BM * kBK / 16) % kThreads == 0 && (BN * kBK / 16) % kThreads == 0, "copy split");
static_assert(STAGES >= 2, "STAGES");

// Byte offset of (row, byte) in a tile of 128-byte rows whose 16-byte chunks are XOR-swizzled by
// the row's low 3 bits: the 8 rows a fragment load touches land in 8 different bank groups.
__device__ __forceinline__ int swz(int row, int byte) {
  return row * kBK + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // src-size 0: the 16 bytes are zero-filled (rows past m or n)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// D = A (16x32 e4m3, row) * B (32x8 e4m3, col) + C, fp32.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One stage: BM rows of a and BN rows of b, 128 bytes of K each, as 16-byte chunks.
__device__ __forceinline__ void load_stage(uint8_t* stage, const uint8_t* a, const uint8_t* b,
                                           int64_t m, int64_t n, int64_t k, int64_t m0,
                                           int64_t n0, int64_t k0) {
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
#pragma unroll
  for (int i = 0; i < BM * kBK / 16 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx >> 3, chunk = idx & 7;
    const int64_t r = m0 + row;
    const bool ok = r < m;
    cp_async16(base + swz(row, chunk * 16), a + (ok ? r : 0) * k + k0 + chunk * 16, ok);
  }
#pragma unroll
  for (int i = 0; i < BN * kBK / 16 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx >> 3, chunk = idx & 7;
    const int64_t c = n0 + row;
    const bool ok = c < n;
    cp_async16(base + BM * kBK + swz(row, chunk * 16), b + (ok ? c : 0) * k + k0 + chunk * 16, ok);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    mma_fp8_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b,
                   const float* __restrict__ as, const float* __restrict__ bs,
                   float* __restrict__ out, int64_t m, int64_t n, int64_t k, int64_t gn,
                   int64_t gk) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
  const int g = lane >> 2, t = lane & 3;
  const int64_t groups = k / gk, ktiles = k / kBK, tiles_per_group = gk / kBK;

  float acc[MT][NT][4], sum[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f, sum[i][j][e] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(smem + s * kStageBytes, a, b, m, n, k, m0, n0, s * kBK);
    cp_commit();
  }

  for (int64_t kt = 0; kt < ktiles; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    // Refill the buffer every thread finished reading in the previous iteration.
    const int64_t next = kt + STAGES - 1;
    if (next < ktiles)
      load_stage(smem + (next % STAGES) * kStageBytes, a, b, m, n, k, m0, n0, next * kBK);
    cp_commit();

    const uint8_t* sa = smem + (kt % STAGES) * kStageBytes;
    const uint8_t* sb = sa + BM * kBK;
#pragma unroll
    for (int ks = 0; ks < kBK / 32; ++ks) {
      const int kb = ks * 32 + t * 4;
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = wm + i * 16 + g;
        af[i][0] = *reinterpret_cast<const uint32_t*>(sa + swz(r, kb));
        af[i][1] = *reinterpret_cast<const uint32_t*>(sa + swz(r + 8, kb));
        af[i][2] = *reinterpret_cast<const uint32_t*>(sa + swz(r, kb + 16));
        af[i][3] = *reinterpret_cast<const uint32_t*>(sa + swz(r + 8, kb + 16));
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int c = wn + j * 8 + g;
        bf[j][0] = *reinterpret_cast<const uint32_t*>(sb + swz(c, kb));
        bf[j][1] = *reinterpret_cast<const uint32_t*>(sb + swz(c, kb + 16));
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_e4m3(acc[i][j], af[i], bf[j]);
    }

    if ((kt + 1) % tiles_per_group == 0) {  // the end of K group q: scale, add, restart
      const int64_t q = kt / tiles_per_group;
      float sca[MT][2], scb[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = m0 + wm + i * 16 + g + h * 8;
          sca[i][h] = r < m ? __ldg(as + r * groups + q) : 0.f;
        }
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t c = n0 + wn + j * 8 + t * 2 + h;
          scb[j][h] = c < n ? __ldg(bs + (c / gn) * groups + q) : 0.f;
        }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            sum[i][j][e] += (acc[i][j][e] * sca[i][e >> 1]) * scb[j][e & 1];
            acc[i][j][e] = 0.f;
          }
    }
  }
  cp_wait<0>();

  // Fragment rows g and g + 8, columns 2t and 2t + 1 of each m16 x n8 tile.
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = m0 + wm + i * 16 + g + h * 8;
      if (r >= m) continue;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int64_t c = n0 + wn + j * 8 + t * 2;
        float* o = out + r * n + c;
        if (c + 1 < n && (n & 1) == 0) {
          *reinterpret_cast<float2*>(o) = make_float2(sum[i][j][h * 2], sum[i][j][h * 2 + 1]);
        } else {
          if (c < n) o[0] = sum[i][j][h * 2];
          if (c + 1 < n) o[1] = sum[i][j][h * 2 + 1];
        }
      }
    }
}

// Any K, any group sizes: one thread per output, e4m3 decoded in registers (the shapes the tensor
// core path cannot take: K or group_k not a multiple of 128, unaligned rows).
__device__ __forceinline__ float e4m3_to_float(uint32_t v) {
  const uint32_t e = (v >> 3) & 15u, mant = v & 7u;
  const float mag = e ? __uint_as_float(((e + 120u) << 23) | (mant << 20))
                      : static_cast<float>(mant) * 0.001953125f;
  return (v & 0x80u) ? -mag : mag;
}

__global__ void scalar_kernel(const uint8_t* a, const uint8_t* b, const float* as, const float* bs,
                              float* out, int64_t m, int64_t n, int64_t k, int64_t gn, int64_t gk) {
  const int64_t groups = k / gk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    float total = 0.f;
    for (int64_t q = 0; q < groups; ++q) {
      float dot = 0.f;
      for (int64_t x = q * gk; x < (q + 1) * gk; ++x)
        dot += e4m3_to_float(a[r * k + x]) * e4m3_to_float(b[c * k + x]);
      total += (dot * as[r * groups + q]) * bs[(c / gn) * groups + q];
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
  const int64_t gy = (m + BM - 1) / BM;
  if (gk % kBK == 0 && aligned(ap, 16) && aligned(bp, 16) && aligned(op, 8) && gy <= 65535) {
    const int bytes = STAGES * kStageBytes;
    static bool attr_set = false;  // once per process: the dynamic shared memory beyond 48 KiB
    if (!attr_set) {
      const cudaError_t e =
          cudaFuncSetAttribute(mma_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (e != cudaSuccess) return fail("block_scaled_mm: %s", cudaGetErrorString(e));
      attr_set = true;
    }
    const dim3 grid(static_cast<unsigned>((n + BN - 1) / BN), static_cast<unsigned>(gy));
    mma_fp8_kernel<<<grid, kThreads, bytes, s>>>(ap, bp, asp, bsp, op, m, n, k, gn, gk);
  } else {
    const int64_t blocks = (m * n + 255) / 256;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)), 256, 0, s>>>(
        ap, bp, asp, bsp, op, m, n, k, gn, gk);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("block_scaled_mm: %s", cudaGetErrorString(err));
}
