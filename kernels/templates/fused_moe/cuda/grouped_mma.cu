// atrex-template: grouped_mma
// atrex-description: grouped GEMMs over the routed tokens on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulators), three launches plus a memset: one block aligns the (token, expert) pairs into per-expert runs padded to the row tile (shared histogram and scan, as moe_align_block_size), the gate-up GEMM gathers each run's hidden rows (cp.async, 3-stage ring, ldmatrix) against the expert's gate and up rows in the same tile so silu(gate) * up is formed in registers and stored once as bf16, and the down GEMM multiplies that by the expert's w2 rows and adds topk_weight * y into out with fp32 atomics; the routing-size class picks the row tile: 16-row tiles (4 warps across N) when the average routed rows per expert is at most SMALL_ROWS, else 64-row tiles (2 x 2 warps); workspace (runs, ids, bf16 intermediate) grown on the first call of a larger shape
// atrex-param: SMALL_ROWS = 16 | 0, 16
#ifndef SMALL_ROWS
#define SMALL_ROWS 16
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kI32;

using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps
constexpr int kBN = 128;       // output columns per CTA (gate-up: 64 gate + 64 up)
constexpr int kBK = 32;        // K per stage
constexpr int kRow = kBK + 8;  // smem row stride (elements): 80 bytes, ldmatrix conflict-free
constexpr int kStages = 3;
constexpr int kAlignThreads = 1024;
constexpr int kMaxExperts = 4 * kAlignThreads;

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // src-size 0: zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
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

// C[BM, kBN] = A[BM, K] . B[kBN, K]^T for one row tile of one expert run. kGateUp: B rows
// [0, 64) are gate rows n0 + i and [64, 128) up rows N + n0 + i - 64, the epilogue writes
// silu(gate) * up as bf16 into inter; else B rows are n0 + i and the epilogue adds
// topk_weight * C into out.
template <int BM, bool kGateUp>
__global__ void __launch_bounds__(kThreads)
    gemm_kernel(const bf16* __restrict__ a_base, const bf16* __restrict__ w,
                const int32_t* __restrict__ sorted, const int32_t* __restrict__ run_expert,
                const int32_t* __restrict__ len_ptr, const float* __restrict__ topk_w,
                bf16* __restrict__ inter, float* __restrict__ out, int K, int b_rows, int N,
                int H, int top_k, int pairs) {
  constexpr int WARPS_M = BM >= 64 ? 2 : 1, WARPS_N = 4 / WARPS_M;
  constexpr int WM = BM / WARPS_M, MF = WM / 16;
  constexpr int WN = kBN / WARPS_N, NF = WN / 8;
  constexpr int kStageElems = (BM + kBN) * kRow;
  static_assert(MF >= 1 && NF % 4 == 0 || (!kGateUp && NF % 2 == 0), "warp tile");
  __shared__ alignas(128) bf16 smem[kStages * kStageElems];
  __shared__ const bf16* arow[BM];
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
    if (kGateUp)
      arow[m] = p < pairs ? a_base + static_cast<int64_t>(p / top_k) * K : nullptr;
    else
      arow[m] = a_base + static_cast<int64_t>(tile * BM + m) * K;
  }
  __syncthreads();
  const bf16* wb = w + static_cast<int64_t>(e) * b_rows * K;
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto load = [&](int stage, int kt) {
    const uint32_t st = sbase + stage * kStageElems * 2;
    for (int c = t; c < BM * 4; c += kThreads) {
      const int r = c >> 2, ch = c & 3;
      const bf16* src = arow[r];
      cp_async16(st + (r * kRow + ch * 8) * 2, src ? src + kt * kBK + ch * 8 : a_base, src != nullptr);
    }
#pragma unroll
    for (int c = t; c < kBN * 4; c += kThreads) {
      const int r = c >> 2, ch = c & 3;
      const int g = kGateUp ? (r < kBN / 2 ? n0 + r : N + n0 + r - kBN / 2) : n0 + r;
      cp_async16(st + ((BM + r) * kRow + ch * 8) * 2, wb + static_cast<int64_t>(g) * K + kt * kBK + ch * 8,
                 true);
    }
  };
  float acc[MF][NF][4];
#pragma unroll
  for (int i = 0; i < MF; ++i)
#pragma unroll
    for (int j = 0; j < NF; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
  const int ktiles = K / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load(s, s);
    cp_commit();
  }
  // B smem row of this warp's n8 tile f.
  auto brow = [&](int f) {
    if (kGateUp)
      return f < NF / 2 ? wn * (WN / 2) + f * 8 : kBN / 2 + wn * (WN / 2) + (f - NF / 2) * 8;
    return wn * WN + f * 8;
  };
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < ktiles) load((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_commit();
    const uint32_t st = sbase + (kt % kStages) * kStageElems * 2;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[MF][4];
#pragma unroll
      for (int i = 0; i < MF; ++i) {
        const int r = wm * WM + i * 16 + (lane & 15);
        ldsm_x4(af[i], st + (r * kRow + kk + (lane >> 4) * 8) * 2);
      }
#pragma unroll
      for (int f = 0; f < NF; f += 2) {
        uint32_t bfr[4];
        const int r = BM + brow(f) + (lane & 7) + ((lane >> 4) << 3);
        ldsm_x4(bfr, st + (r * kRow + kk + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
        for (int i = 0; i < MF; ++i) {
          mma_bf16(acc[i][f], af[i], bfr[0], bfr[1]);
          mma_bf16(acc[i][f + 1], af[i], bfr[2], bfr[3]);
        }
      }
    }
  }
  cp_wait<0>();
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < MF; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = wm * WM + i * 16 + g + h * 8;
      if (kGateUp) {
        bf16* dst = inter + static_cast<int64_t>(tile * BM + m) * N + n0;
#pragma unroll
        for (int f = 0; f < NF / 2; ++f) {
          const int col = wn * (WN / 2) + f * 8 + q * 2;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float gt = acc[i][f][h * 2 + c], up = acc[i][f + NF / 2][h * 2 + c];
            v[c] = gt / (1.f + __expf(-gt)) * up;
          }
          *reinterpret_cast<__nv_bfloat162*>(dst + col) = __floats2bfloat162_rn(v[0], v[1]);
        }
      } else {
        const int p = pair_of[m];
        if (p >= pairs) continue;
        const float wt = __ldg(topk_w + p);
        float* dst = out + static_cast<int64_t>(p / top_k) * H + n0;
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

// Device workspace, grown (never shrunk) on a call that needs more; the first call of a shape
// is not captured into a graph, so the allocation never happens under capture.
struct Workspace {
  void* p = nullptr;
  size_t bytes = 0;
};
Workspace g_ws;

template <int BM>
int run(const bf16* x, const bf16* w1, const bf16* w2, const float* tw, const int32_t* ids,
        float* out, int64_t T, int64_t H, int64_t N, int64_t E, int64_t k, cudaStream_t s) {
  const int64_t pairs = T * k;
  const int64_t max_len = pairs + E * (BM - 1);
  const int64_t tiles = (max_len + BM - 1) / BM;
  const size_t ids_bytes = static_cast<size_t>((max_len + tiles + 1 + 63) / 64 * 64) * 4;
  const size_t need = ids_bytes + static_cast<size_t>(tiles * BM) * N * sizeof(bf16);
  if (need > g_ws.bytes) {
    if (g_ws.p) cudaFree(g_ws.p);
    g_ws = Workspace{};
    if (cudaMalloc(&g_ws.p, need) != cudaSuccess)
      return fail("fused_moe: cannot allocate %zu bytes of workspace", need);
    g_ws.bytes = need;
  }
  auto* sorted = static_cast<int32_t*>(g_ws.p);
  int32_t* run_expert = sorted + max_len;
  int32_t* len = run_expert + tiles;
  auto* inter = reinterpret_cast<bf16*>(static_cast<char*>(g_ws.p) + ids_bytes);
  cudaMemsetAsync(out, 0, static_cast<size_t>(T * H) * sizeof(float), s);
  align_kernel<<<1, kAlignThreads, 0, s>>>(ids, sorted, run_expert, len, static_cast<int>(pairs),
                                           static_cast<int>(E), BM);
  const int h = static_cast<int>(H), n = static_cast<int>(N), kk = static_cast<int>(k),
            pr = static_cast<int>(pairs);
  gemm_kernel<BM, true><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(N / (kBN / 2))),
                          kThreads, 0, s>>>(x, w1, sorted, run_expert, len, tw, inter, out, h,
                                            2 * n, n, h, kk, pr);
  gemm_kernel<BM, false><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(H / kBN)),
                           kThreads, 0, s>>>(inter, w2, sorted, run_expert, len, tw, inter, out,
                                             n, h, n, h, kk, pr);
  return 0;
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, H] bf16, w1 [E, 2N, H] bf16 (gate rows then up rows), w2 [E, H, N] bf16,
// topk_weights [T, k] fp32, topk_ids [T, k] int32 -> out [T, H] fp32 =
// sum_j topk_weights[t, j] * w2[e] . (silu(w1_gate[e] . x[t]) * (w1_up[e] . x[t])).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fused_moe");
  const DLTensor* x = ts.input("hidden_states", kBF16, 2);
  const DLTensor* w1 = ts.input("w1", kBF16, 3);
  const DLTensor* w2 = ts.input("w2", kBF16, 3);
  const DLTensor* tw = ts.input("topk_weights", kF32, 2);
  const DLTensor* ids = ts.input("topk_ids", kI32, 2);
  const DLTensor* out = ts.output("out", kF32, 2);
  ts.same_dims(tw, ids);
  if (!ts.ok()) return ts.failed();
  const int64_t T = x->shape[0], H = x->shape[1], E = w1->shape[0], N = w1->shape[1] / 2;
  const int64_t k = ids->shape[1];
  if (w1->shape[2] != H || w2->shape[0] != E || w2->shape[1] != H || w2->shape[2] != N ||
      ids->shape[0] != T || out->shape[0] != T || out->shape[1] != H || w1->shape[1] != 2 * N)
    return fail("fused_moe: inconsistent dims (hidden_states [T, H], w1 [E, 2N, H], w2 [E, H, N])");
  if (H % kBN != 0 || N % (kBN / 2) != 0 || E > kMaxExperts || T * k > 0x3fffffff)
    return fail("fused_moe: this template needs hidden_size %% %d == 0, intermediate_size %% %d == 0 "
                "and at most %d experts", kBN, kBN / 2, kMaxExperts);
  if (!aligned(x->data, 16) || !aligned(w1->data, 16) || !aligned(w2->data, 16))
    return fail("fused_moe: hidden_states, w1 and w2 must be 16-byte aligned");
  if (T == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const auto* xp = static_cast<const bf16*>(x->data);
  const auto* w1p = static_cast<const bf16*>(w1->data);
  const auto* w2p = static_cast<const bf16*>(w2->data);
  const auto* twp = static_cast<const float*>(tw->data);
  const auto* idp = static_cast<const int32_t*>(ids->data);
  auto* op = static_cast<float*>(out->data);
  const bool small = T * k <= int64_t{SMALL_ROWS} * E;
  const int rc = small ? run<16>(xp, w1p, w2p, twp, idp, op, T, H, N, E, k, s)
                       : run<64>(xp, w1p, w2p, twp, idp, op, T, H, N, E, k, s);
  if (rc) return rc;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("fused_moe: %s", cudaGetErrorString(err));
}
