// atrex-template: dequant_mma
// atrex-description: grouped GEMMs over the routed tokens on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulators) with the fp8 operands entering them undequantised (every e4m3 value is exact in bf16) and the block scales applied per K block, as block-scaled fp8 GEMMs do: one block aligns the (token, expert) pairs into per-expert runs padded to the row tile (shared histogram and scan), the gate-up GEMM loads each run's fp8 hidden rows and the expert's fp8 gate and up rows into registers one K tile ahead (16-byte loads) and stores them as bf16 into a 2-stage ring read by ldmatrix, sums each 128-wide K block on its own and folds it in times a_scale and fc1_scale, so silu(gate) * up is formed in registers and stored once as fp32; the down GEMM splits that fp32 intermediate into bf16 hi + lo (two MMAs, 16 mantissa bits) against the exact w2, folds fc2_scale per K block, adds topk_weight * y into an fp32 sum with atomics, and a last pass casts the sum to e4m3; the routing-size class picks the row tile: 16-row tiles when the average routed rows per expert is at most SMALL_ROWS, else 64-row tiles
// atrex-param: SMALL_ROWS = 16 | 0, 16
#ifndef SMALL_ROWS
#define SMALL_ROWS 16
#endif

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kFP8E4M3;
using atrex::cand::kF32;
using atrex::cand::kI32;

using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps
constexpr int kBN = 128;       // output columns per CTA (gate-up: 64 gate + 64 up)
constexpr int kBK = 32;        // K per stage
constexpr int kRow = kBK + 8;  // smem row stride (elements): 80 bytes, ldmatrix conflict-free
constexpr int kAlignThreads = 1024;
constexpr int kMaxExperts = 4 * kAlignThreads;

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- routing: pairs grouped by expert into runs padded to `tile` rows ----------------------

__device__ __forceinline__ int block_exclusive_scan(int v, int* sums, int* total) {
  constexpr int kWarps = kAlignThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    const int w = lane < kWarps ? sums[lane] : 0;
    int s = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    if (lane < kWarps) sums[lane] = s - w;
    if (lane == 31) sums[kWarps] = s;
  }
  __syncthreads();
  *total = sums[kWarps];
  return sums[warp] + x - v;
}

// sorted[0, len): flat pair ids by expert, pads = pairs; run_expert[b]: expert of row tile b;
// *len_out: padded length.
__global__ void __launch_bounds__(kAlignThreads)
    align_kernel(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                 int32_t* __restrict__ run_expert, int32_t* __restrict__ len_out, int pairs,
                 int experts, int tile) {
  __shared__ int count[kMaxExperts];
  __shared__ int cursor[kMaxExperts];
  __shared__ int sums[kAlignThreads / 32 + 1];
  const int t = threadIdx.x;
  for (int e = t; e < experts; e += kAlignThreads) count[e] = 0;
  __syncthreads();
  for (int j = t; j < pairs; j += kAlignThreads) {
    const unsigned x = static_cast<unsigned>(__ldg(ids + j));
    if (x < static_cast<unsigned>(experts)) atomicAdd(&count[x], 1);
  }
  __syncthreads();
  int c[4], local = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = t * 4 + i;
    c[i] = e < experts ? count[e] : 0;
    local += (c[i] + tile - 1) / tile * tile;
  }
  int total;
  int start = block_exclusive_scan(local, sums, &total);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = t * 4 + i;
    if (e >= experts) break;
    const int end = start + (c[i] + tile - 1) / tile * tile;
    cursor[e] = start;
    for (int j = start + c[i]; j < end; ++j) sorted[j] = pairs;
    for (int q = start / tile; q < end / tile; ++q) run_expert[q] = e;
    start = end;
  }
  if (t == 0) *len_out = total;
  __syncthreads();
  for (int j = t; j < pairs; j += kAlignThreads) {
    const unsigned x = static_cast<unsigned>(__ldg(ids + j));
    if (x < static_cast<unsigned>(experts)) sorted[atomicAdd(&cursor[x], 1)] = j;
  }
}

// ---- the grouped GEMM tile ------------------------------------------------------------------

// 16 e4m3 values (one uint4) -> 16 bf16 (two uint4), exactly: every e4m3 value, subnormals
// included, is a bf16 value (3 mantissa bits of 7), so the tensor-core products are exact.
__device__ __forceinline__ void fp8x16_to_bf16(const uint4& v, uint4 (&o)[2]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t r[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw hr =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * h)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hr));
      const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
      r[i * 2 + h] = *reinterpret_cast<const uint32_t*>(&b);
    }
  }
  o[0] = make_uint4(r[0], r[1], r[2], r[3]);
  o[1] = make_uint4(r[4], r[5], r[6], r[7]);
}

// 4 fp32 -> hi = bf16(v) and lo = bf16(v - hi) (4 bf16 each): hi + lo carries 16 mantissa bits,
// so a product with an exact bf16 operand is within 2^-17 of the fp32 one.
__device__ __forceinline__ void split4(const uint4& v, uint2& hi, uint2& lo) {
  const float f[4] = {__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                      __uint_as_float(v.w)};
  __nv_bfloat162 h[2], l[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    const float2 hf = __bfloat1622float2(h[i]);
    l[i] = __floats2bfloat162_rn(f[2 * i] - hf.x, f[2 * i + 1] - hf.y);
  }
  hi = make_uint2(*reinterpret_cast<const uint32_t*>(&h[0]), *reinterpret_cast<const uint32_t*>(&h[1]));
  lo = make_uint2(*reinterpret_cast<const uint32_t*>(&l[0]), *reinterpret_cast<const uint32_t*>(&l[1]));
}

// C[BM, kBN] = A[BM, K] . B[kBN, K]^T for one row tile of one expert run. The fp8 operands enter
// the tensor cores undequantised (exact in bf16); each K block of the scales (bk for w1, bn for
// w2: whole K tiles) is summed on its own in fp32 and folded into the result times its scales,
// as block-scaled fp8 GEMMs do (and as exact as the reference's fp32 products).
// kGateUp: A = fp8 hidden rows (a_scale per row and K block), B rows [0, 64) gate rows n0 + i and
// [64, 128) up rows N + n0 + i - 64 of w1 (fc1_scale); the epilogue writes silu(gate) * up as
// fp32 into inter. Else A = inter (fp32, split into bf16 hi + lo: two MMAs), B = w2 rows n0 + i
// (fc2_scale); the epilogue adds topk_weight * C into acc_out.
template <int BM, bool kGateUp>
__global__ void __launch_bounds__(kThreads)
    gemm_kernel(const uint8_t* __restrict__ x, const float* __restrict__ a_scale,
                const float* __restrict__ inter_in, const uint8_t* __restrict__ w,
                const float* __restrict__ w_scale, const int32_t* __restrict__ sorted,
                const int32_t* __restrict__ run_expert, const int32_t* __restrict__ len_ptr,
                const float* __restrict__ topk_w, float* __restrict__ inter,
                float* __restrict__ acc_out, int K, int b_rows, int N, int H, int top_k,
                int pairs, int bn, int bk) {
  constexpr int WARPS_M = BM >= 64 ? 2 : 1, WARPS_N = 4 / WARPS_M;
  constexpr int WM = BM / WARPS_M, MF = WM / 16;
  constexpr int WN = kBN / WARPS_N, NF = WN / 8;
  constexpr int kARows = kGateUp ? BM : 2 * BM;  // down: hi rows, then lo rows
  constexpr int kStageElems = (kARows + kBN) * kRow;
  // Per thread and K tile: A chunks of 16 fp8 (gate-up) or 4 fp32 (down), B chunks of 16 fp8.
  constexpr int kAChunks = kGateUp ? BM * 2 : BM * 8;
  constexpr int kAPer = (kAChunks + kThreads - 1) / kThreads;
  constexpr int kBPer = kBN * 2 / kThreads;
  __shared__ alignas(128) bf16 smem[2 * kStageElems];
  __shared__ int tok[BM];
  __shared__ int pair_of[BM];
  const int tile = blockIdx.x;
  if (tile * BM >= *len_ptr) return;
  const int e = run_expert[tile];
  const int n0 = blockIdx.y * (kGateUp ? kBN / 2 : kBN);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  for (int m = t; m < BM; m += kThreads) {
    const int p = sorted[tile * BM + m];
    pair_of[m] = p;
    tok[m] = p < pairs ? p / top_k : -1;
  }
  __syncthreads();
  const uint8_t* wb = w + static_cast<int64_t>(e) * b_rows * K;
  // Scale rows: w1 [2N/bn, H/bk] per expert (row block, k block); w2 [H/bk, N/bn].
  const int kblock = kGateUp ? bk : bn;  // K per scale block
  const int kblocks = K / kblock;
  const float* wsb = w_scale + static_cast<int64_t>(e) * (b_rows / (kGateUp ? bn : bk)) * kblocks;
  uint4 ra[kAPer], rb[kBPer];
  auto brow_global = [&](int r) {
    return kGateUp ? (r < kBN / 2 ? n0 + r : N + n0 + r - kBN / 2) : n0 + r;
  };
  auto fetch = [&](int kt) {
    const int k0 = kt * kBK;
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      const int c = t + i * kThreads;
      ra[i] = make_uint4(0, 0, 0, 0);
      if (c < kAChunks) {
        if (kGateUp) {
          const int r = c >> 1, ch = c & 1;
          if (tok[r] >= 0)
            ra[i] = __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(tok[r]) * K + k0 + ch * 16));
        } else {
          const int r = c >> 3, ch = c & 7;
          ra[i] = __ldg(reinterpret_cast<const uint4*>(inter_in + static_cast<int64_t>(tile * BM + r) * K + k0 + ch * 4));
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kBPer; ++i) {
      const int c = t + i * kThreads, r = c >> 1, ch = c & 1;
      rb[i] = __ldg(reinterpret_cast<const uint4*>(wb + static_cast<int64_t>(brow_global(r)) * K + k0 + ch * 16));
    }
  };
  auto store = [&](int stage) {
    bf16* st = smem + stage * kStageElems;
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      const int c = t + i * kThreads;
      if (c >= kAChunks) continue;
      if (kGateUp) {
        const int r = c >> 1, ch = c & 1;
        uint4 o[2];
        fp8x16_to_bf16(ra[i], o);
        *reinterpret_cast<uint4*>(st + r * kRow + ch * 16) = o[0];
        *reinterpret_cast<uint4*>(st + r * kRow + ch * 16 + 8) = o[1];
      } else {
        const int r = c >> 3, ch = c & 7;
        uint2 hi, lo;
        split4(ra[i], hi, lo);
        *reinterpret_cast<uint2*>(st + r * kRow + ch * 4) = hi;
        *reinterpret_cast<uint2*>(st + (BM + r) * kRow + ch * 4) = lo;
      }
    }
#pragma unroll
    for (int i = 0; i < kBPer; ++i) {
      const int c = t + i * kThreads, r = c >> 1, ch = c & 1;
      uint4 o[2];
      fp8x16_to_bf16(rb[i], o);
      *reinterpret_cast<uint4*>(st + (kARows + r) * kRow + ch * 16) = o[0];
      *reinterpret_cast<uint4*>(st + (kARows + r) * kRow + ch * 16 + 8) = o[1];
    }
  };
  float acc[MF][NF][4], part[MF][NF][4];
#pragma unroll
  for (int i = 0; i < MF; ++i)
#pragma unroll
    for (int j = 0; j < NF; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = part[i][j][q] = 0.f;
  auto brow = [&](int f) {
    if (kGateUp)
      return f < NF / 2 ? wn * (WN / 2) + f * 8 : kBN / 2 + wn * (WN / 2) + (f - NF / 2) * 8;
    return wn * WN + f * 8;
  };
  const int g = lane >> 2, q = lane & 3;
  // acc += part * scale(row) * scale(column) for K block kb; part = 0. A fragment column pair
  // (q * 2, q * 2 + 1) lies in one row block of w (bn, bk >= 32).
  auto fold = [&](int kb) {
    float sa[MF][2];
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = wm * WM + i * 16 + g + h * 8;
        sa[i][h] = kGateUp ? (tok[m] >= 0 ? __ldg(a_scale + static_cast<int64_t>(tok[m]) * kblocks + kb) : 0.f) : 1.f;
      }
#pragma unroll
    for (int f = 0; f < NF; ++f) {
      const int gr = brow_global(brow(f) + q * 2);
      const float sb = __ldg(wsb + static_cast<int64_t>(gr / (kGateUp ? bn : bk)) * kblocks + kb);
#pragma unroll
      for (int i = 0; i < MF; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          acc[i][f][c] = fmaf(part[i][f][c], sa[i][c >> 1] * sb, acc[i][f][c]);
          part[i][f][c] = 0.f;
        }
    }
  };
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int ktiles = K / kBK, tiles_per_block = kblock / kBK;
  fetch(0);
  store(0);
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const bool more = kt + 1 < ktiles;
    if (more) fetch(kt + 1);
    const uint32_t st = sbase + (kt & 1) * kStageElems * 2;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[MF][4], al[MF][4];
#pragma unroll
      for (int i = 0; i < MF; ++i) {
        const int r = wm * WM + i * 16 + (lane & 15);
        ldsm_x4(af[i], st + (r * kRow + kk + (lane >> 4) * 8) * 2);
        if (!kGateUp) ldsm_x4(al[i], st + ((BM + r) * kRow + kk + (lane >> 4) * 8) * 2);
      }
#pragma unroll
      for (int f = 0; f < NF; f += 2) {
        uint32_t bfr[4];
        const int r = kARows + brow(f) + (lane & 7) + ((lane >> 4) << 3);
        ldsm_x4(bfr, st + (r * kRow + kk + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
        for (int i = 0; i < MF; ++i) {
          mma_bf16(part[i][f], af[i], bfr[0], bfr[1]);
          mma_bf16(part[i][f + 1], af[i], bfr[2], bfr[3]);
          if (!kGateUp) {
            mma_bf16(part[i][f], al[i], bfr[0], bfr[1]);
            mma_bf16(part[i][f + 1], al[i], bfr[2], bfr[3]);
          }
        }
      }
    }
    if ((kt + 1) % tiles_per_block == 0) fold(kt / tiles_per_block);
    if (more) store((kt + 1) & 1);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < MF; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = wm * WM + i * 16 + g + h * 8;
      if (kGateUp) {
        float* dst = inter + static_cast<int64_t>(tile * BM + m) * N + n0;
#pragma unroll
        for (int f = 0; f < NF / 2; ++f) {
          const int col = wn * (WN / 2) + f * 8 + q * 2;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float gt = acc[i][f][h * 2 + c], up = acc[i][f + NF / 2][h * 2 + c];
            v[c] = gt / (1.f + expf(-gt)) * up;
          }
          *reinterpret_cast<float2*>(dst + col) = make_float2(v[0], v[1]);
        }
      } else {
        const int p = pair_of[m];
        if (p >= pairs) continue;
        const float wt = __ldg(topk_w + p);
        float* dst = acc_out + static_cast<int64_t>(p / top_k) * H + n0;
#pragma unroll
        for (int f = 0; f < NF; ++f) {
          const int col = wn * WN + f * 8 + q * 2;
          atomicAdd(dst + col, wt * acc[i][f][h * 2]);
          atomicAdd(dst + col + 1, wt * acc[i][f][h * 2 + 1]);
        }
      }
    }
  }
}

// out = e4m3(sum): nearest even; out-of-range values become NaN (no saturation), as torch.
__global__ void cast_kernel(const float* __restrict__ sum, __nv_fp8_storage_t* __restrict__ out,
                            int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __nv_cvt_float_to_fp8(sum[i], __NV_NOSAT, __NV_E4M3);
}

// Device workspace, grown (never shrunk) on a call that needs more; the first call of a shape
// is not captured into a graph, so the allocation never happens under capture.
struct Workspace {
  void* p = nullptr;
  size_t bytes = 0;
};
Workspace g_ws;

struct Problem {
  const uint8_t *x, *w1, *w2;
  const float *tw, *as, *s1, *s2;
  const int32_t* ids;
  uint8_t* out;
  int64_t T, H, N, E, k, bn, bk;
};

template <int BM>
int run(const Problem& P, cudaStream_t s) {
  const int64_t pairs = P.T * P.k;
  const int64_t max_len = pairs + P.E * (BM - 1);
  const int64_t tiles = (max_len + BM - 1) / BM;
  const size_t ids_bytes = static_cast<size_t>((max_len + tiles + 1 + 63) / 64 * 64) * 4;
  const size_t sum_bytes = static_cast<size_t>((P.T * P.H + 63) / 64 * 64) * sizeof(float);
  const size_t need = ids_bytes + sum_bytes + static_cast<size_t>(tiles * BM) * P.N * sizeof(float);
  if (need > g_ws.bytes) {
    if (g_ws.p) cudaFree(g_ws.p);
    g_ws = Workspace{};
    if (cudaMalloc(&g_ws.p, need) != cudaSuccess)
      return fail("fp8_blockscale_fused_moe: cannot allocate %zu bytes of workspace", need);
    g_ws.bytes = need;
  }
  auto* sorted = static_cast<int32_t*>(g_ws.p);
  int32_t* run_expert = sorted + max_len;
  int32_t* len = run_expert + tiles;
  auto* sum = reinterpret_cast<float*>(static_cast<char*>(g_ws.p) + ids_bytes);
  auto* inter = reinterpret_cast<float*>(static_cast<char*>(g_ws.p) + ids_bytes + sum_bytes);
  cudaMemsetAsync(sum, 0, static_cast<size_t>(P.T * P.H) * sizeof(float), s);
  align_kernel<<<1, kAlignThreads, 0, s>>>(P.ids, sorted, run_expert, len, static_cast<int>(pairs),
                                           static_cast<int>(P.E), BM);
  const int h = static_cast<int>(P.H), n = static_cast<int>(P.N), kk = static_cast<int>(P.k),
            pr = static_cast<int>(pairs), bn = static_cast<int>(P.bn), bk = static_cast<int>(P.bk);
  gemm_kernel<BM, true><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(P.N / (kBN / 2))),
                          kThreads, 0, s>>>(P.x, P.as, nullptr, P.w1, P.s1, sorted, run_expert, len,
                                            P.tw, inter, sum, h, 2 * n, n, h, kk, pr, bn, bk);
  gemm_kernel<BM, false><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(P.H / kBN)),
                           kThreads, 0, s>>>(nullptr, nullptr, inter, P.w2, P.s2, sorted, run_expert,
                                             len, P.tw, inter, sum, n, h, n, h, kk, pr, bn, bk);
  const int64_t total = P.T * P.H;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 132 * 16);
  cast_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(
      sum, reinterpret_cast<__nv_fp8_storage_t*>(P.out), total);
  return 0;
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, H] e4m3 with a_scale [T, H/bk], w1 [E, 2N, H] e4m3 with fc1_scale
// [E, 2N/bn, H/bk], w2 [E, H, N] e4m3 with fc2_scale [E, H/bk, N/bn], topk_weights [T, k] fp32,
// topk_ids [T, k] int32 -> out [T, H] e4m3 = fp8(sum_j w[t, j] * W2 . (silu(W1g . x) * (W1u . x)))
// on the dequantised operands.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fp8_blockscale_fused_moe");
  const DLTensor* x = ts.input("hidden_states", kFP8E4M3, 2);
  const DLTensor* w1 = ts.input("w1", kFP8E4M3, 3);
  const DLTensor* w2 = ts.input("w2", kFP8E4M3, 3);
  const DLTensor* tw = ts.input("topk_weights", kF32, 2);
  const DLTensor* ids = ts.input("topk_ids", kI32, 2);
  const DLTensor* as = ts.input("a_scale", kF32, 2);
  const DLTensor* s1 = ts.input("fc1_scale", kF32, 3);
  const DLTensor* s2 = ts.input("fc2_scale", kF32, 3);
  const DLTensor* out = ts.output("out", kFP8E4M3, 2);
  ts.same_dims(tw, ids);
  ts.same_dims(x, out);
  if (!ts.ok()) return ts.failed();
  Problem P{static_cast<const uint8_t*>(x->data), static_cast<const uint8_t*>(w1->data),
            static_cast<const uint8_t*>(w2->data), static_cast<const float*>(tw->data),
            static_cast<const float*>(as->data), static_cast<const float*>(s1->data),
            static_cast<const float*>(s2->data), static_cast<const int32_t*>(ids->data),
            static_cast<uint8_t*>(out->data), x->shape[0], x->shape[1], w1->shape[1] / 2,
            w1->shape[0], ids->shape[1], atrex_param_int(launch, "scale_block_n", 128),
            atrex_param_int(launch, "scale_block_k", 128)};
  const int64_t T = P.T, H = P.H, N = P.N, E = P.E, bn = P.bn, bk = P.bk;
  if (bn < 32 || bk < 32 || bn % kBK != 0 || bk % kBK != 0 || H % bk != 0 || N % bn != 0 ||
      w1->shape[2] != H || w2->shape[0] != E || w2->shape[1] != H || w2->shape[2] != N ||
      w1->shape[1] != 2 * N || ids->shape[0] != T || as->shape[1] != H / bk ||
      s1->shape[1] != 2 * N / bn || s1->shape[2] != H / bk || s2->shape[1] != H / bk ||
      s2->shape[2] != N / bn)
    return fail("fp8_blockscale_fused_moe: inconsistent dims or scale blocks (bn %lld, bk %lld; "
                "this template needs multiples of %d)", static_cast<long long>(bn),
                static_cast<long long>(bk), kBK);
  if (H % kBN != 0 || N % (kBN / 2) != 0 || E > kMaxExperts || T * P.k > 0x3fffffff)
    return fail("fp8_blockscale_fused_moe: this template needs hidden_size %% %d == 0, "
                "intermediate_size %% %d == 0 and at most %d experts", kBN, kBN / 2, kMaxExperts);
  if (!aligned(x->data, 16) || !aligned(w1->data, 16) || !aligned(w2->data, 16))
    return fail("fp8_blockscale_fused_moe: hidden_states, w1 and w2 must be 16-byte aligned");
  if (T == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const bool small = T * P.k <= int64_t{SMALL_ROWS} * E;
  const int rc = small ? run<16>(P, s) : run<64>(P, s);
  if (rc) return rc;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("fp8_blockscale_fused_moe: %s", cudaGetErrorString(err));
}
