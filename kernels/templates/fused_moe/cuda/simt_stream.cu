// atrex-template: simt_stream
// atrex-description: weight streaming without tensor cores, for few routed rows per expert: one block aligns the (token, expert) pairs into per-expert runs of MT rows (shared histogram and scan), the gate-up kernel stages a run's MT hidden rows in shared memory and gives each warp gate/up row pairs of the expert, read once with 16-byte loads while 2 * MT fp32 FMA chains run per lane (warp-shuffle sums), silu(gate) * up stored as fp32; the down kernel gives each warp output columns of w2, reads the run's intermediate rows through L1 and adds topk_weight * y into out with fp32 atomics
// atrex-param: MT = 8 | 4, 8
#ifndef MT
#define MT 8
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(MT == 1 || MT == 2 || MT == 4 || MT == 8, "MT");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kI32;

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 2;  // gate-up rows (or output columns) per warp
constexpr int kAlignThreads = 1024;
constexpr int kMaxExperts = 4 * kAlignThreads;
constexpr int kMaxHidden = 8192;  // MT * H bf16 of staged hidden rows: 128 KiB at MT 8

__device__ __forceinline__ int block_exclusive_scan(int v, int* sums, int* total) {
  constexpr int w_count = kAlignThreads / 32;
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
    const int w = lane < w_count ? sums[lane] : 0;
    int s = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    if (lane < w_count) sums[lane] = s - w;
    if (lane == 31) sums[w_count] = s;
  }
  __syncthreads();
  *total = sums[w_count];
  return sums[warp] + x - v;
}

__global__ void __launch_bounds__(kAlignThreads)
    align_kernel(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                 int32_t* __restrict__ run_expert, int32_t* __restrict__ len_out, int pairs,
                 int experts) {
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
    local += (c[i] + MT - 1) / MT * MT;
  }
  int total;
  int start = block_exclusive_scan(local, sums, &total);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = t * 4 + i;
    if (e >= experts) break;
    const int end = start + (c[i] + MT - 1) / MT * MT;
    cursor[e] = start;
    for (int j = start + c[i]; j < end; ++j) sorted[j] = pairs;
    for (int q = start / MT; q < end / MT; ++q) run_expert[q] = e;
    start = end;
  }
  if (t == 0) *len_out = total;
  __syncthreads();
  for (int j = t; j < pairs; j += kAlignThreads) {
    const unsigned x = static_cast<unsigned>(__ldg(ids + j));
    if (x < static_cast<unsigned>(experts)) sorted[atomicAdd(&cursor[x], 1)] = j;
  }
}

__device__ __forceinline__ void fma8(float& acc, const uint4& w, const uint4& x) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// inter[tile * MT + m][n] = silu(w1[e][n] . x[tok_m]) * (w1[e][N + n] . x[tok_m]), fp32.
__global__ void __launch_bounds__(kThreads)
    gateup_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w1,
                  const int32_t* __restrict__ sorted, const int32_t* __restrict__ run_expert,
                  const int32_t* __restrict__ len_ptr, float* __restrict__ inter, int H, int N,
                  int top_k, int pairs) {
  extern __shared__ uint4 xs[];  // MT rows of H bf16
  const int tile = blockIdx.x;
  if (tile * MT >= *len_ptr) return;
  const int e = run_expert[tile];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int chunks = H / 8;  // uint4 per row
  for (int c = t; c < MT * chunks; c += kThreads) {
    const int m = c / chunks, i = c % chunks;
    const int p = sorted[tile * MT + m];
    xs[c] = p < pairs ? __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(p / top_k) * H) + i)
                      : make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  const int n_base = (blockIdx.y * kWarps + warp) * kRowsPerWarp;
  const bf16* we = w1 + static_cast<int64_t>(e) * 2 * N * H;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int n = n_base + r;
    if (n >= N) break;
    const uint4* g = reinterpret_cast<const uint4*>(we + static_cast<int64_t>(n) * H);
    const uint4* u = reinterpret_cast<const uint4*>(we + static_cast<int64_t>(N + n) * H);
    float ag[MT], au[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) ag[m] = au[m] = 0.f;
    for (int i = lane; i < chunks; i += 32) {
      const uint4 gw = __ldg(g + i), uw = __ldg(u + i);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const uint4 xv = xs[m * chunks + i];
        fma8(ag[m], gw, xv);
        fma8(au[m], uw, xv);
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float gt = warp_sum(ag[m]), up = warp_sum(au[m]);
      if (lane == 0) inter[static_cast<int64_t>(tile * MT + m) * N + n] = gt / (1.f + __expf(-gt)) * up;
    }
  }
}

// out[tok_m][h] += topk_w[p_m] * (w2[e][h] . inter[tile * MT + m]).
__global__ void __launch_bounds__(kThreads)
    down_kernel(const float* __restrict__ inter, const bf16* __restrict__ w2,
                const int32_t* __restrict__ sorted, const int32_t* __restrict__ run_expert,
                const int32_t* __restrict__ len_ptr, const float* __restrict__ topk_w,
                float* __restrict__ out, int H, int N, int top_k, int pairs) {
  const int tile = blockIdx.x;
  if (tile * MT >= *len_ptr) return;
  const int e = run_expert[tile];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int chunks = N / 8;
  const int h_base = (blockIdx.y * kWarps + warp) * kRowsPerWarp;
  const bf16* we = w2 + static_cast<int64_t>(e) * H * N;
  const float* ib = inter + static_cast<int64_t>(tile * MT) * N;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int h = h_base + r;
    if (h >= H) break;
    const uint4* wr = reinterpret_cast<const uint4*>(we + static_cast<int64_t>(h) * N);
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.f;
    for (int i = lane; i < chunks; i += 32) {
      const uint4 wv = __ldg(wr + i);
      const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wv);
      float wf[8];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(wp[q]);
        wf[2 * q] = f.x;
        wf[2 * q + 1] = f.y;
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(ib + m * N) + 2 * i);
        const float4 b = __ldg(reinterpret_cast<const float4*>(ib + m * N) + 2 * i + 1);
        acc[m] = fmaf(wf[0], a.x, fmaf(wf[1], a.y, fmaf(wf[2], a.z, fmaf(wf[3], a.w, acc[m]))));
        acc[m] = fmaf(wf[4], b.x, fmaf(wf[5], b.y, fmaf(wf[6], b.z, fmaf(wf[7], b.w, acc[m]))));
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float y = warp_sum(acc[m]);
      const int p = sorted[tile * MT + m];
      if (lane == 0 && p < pairs)
        atomicAdd(out + static_cast<int64_t>(p / top_k) * H + h, __ldg(topk_w + p) * y);
    }
  }
}

struct Workspace {
  void* p = nullptr;
  size_t bytes = 0;
};
Workspace g_ws;

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
  if (H % 8 != 0 || N % 8 != 0 || H > kMaxHidden || E > kMaxExperts || T * k > 0x3fffffff)
    return fail("fused_moe: this template needs hidden_size <= %d, both sizes %% 8 == 0, at most "
                "%d experts", kMaxHidden, kMaxExperts);
  if (!aligned(x->data, 16) || !aligned(w1->data, 16) || !aligned(w2->data, 16))
    return fail("fused_moe: hidden_states, w1 and w2 must be 16-byte aligned");
  if (T == 0) return 0;
  const int64_t pairs = T * k, max_len = pairs + E * (MT - 1), tiles = (max_len + MT - 1) / MT;
  const size_t ids_bytes = static_cast<size_t>((max_len + tiles + 1 + 63) / 64 * 64) * 4;
  const size_t need = ids_bytes + static_cast<size_t>(tiles * MT) * N * sizeof(float);
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
  auto* inter = reinterpret_cast<float*>(static_cast<char*>(g_ws.p) + ids_bytes);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  auto* op = static_cast<float*>(out->data);
  const int smem = static_cast<int>(MT * H * sizeof(bf16));
  static bool opted = false;  // once per process: the shared memory beyond 48 KiB
  if (!opted) {
    const cudaError_t e = cudaFuncSetAttribute(gateup_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(MT * kMaxHidden * 2));
    if (e != cudaSuccess) return fail("%s: %s", "fused_moe", cudaGetErrorString(e));
    opted = true;
  }
  cudaMemsetAsync(op, 0, static_cast<size_t>(T * H) * sizeof(float), s);
  align_kernel<<<1, kAlignThreads, 0, s>>>(static_cast<const int32_t*>(ids->data), sorted,
                                           run_expert, len, static_cast<int>(pairs),
                                           static_cast<int>(E));
  constexpr int kRowsPerCta = kWarps * kRowsPerWarp;
  gateup_kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>((N + kRowsPerCta - 1) / kRowsPerCta)),
                  kThreads, smem, s>>>(static_cast<const bf16*>(x->data),
                                       static_cast<const bf16*>(w1->data), sorted, run_expert, len,
                                       inter, static_cast<int>(H), static_cast<int>(N),
                                       static_cast<int>(k), static_cast<int>(pairs));
  down_kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>((H + kRowsPerCta - 1) / kRowsPerCta)),
                kThreads, 0, s>>>(inter, static_cast<const bf16*>(w2->data), sorted, run_expert,
                                  len, static_cast<const float*>(tw->data), op,
                                  static_cast<int>(H), static_cast<int>(N), static_cast<int>(k),
                                  static_cast<int>(pairs));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("fused_moe: %s", cudaGetErrorString(err));
}
