// atrex-template: simt_stream
// atrex-description: weight streaming without tensor cores, for few routed rows per expert: one block aligns the (token, expert) pairs into per-expert runs of MT rows (shared histogram and scan), the gate-up kernel stages a run's MT hidden rows dequantised (a_scale) as fp32 in shared memory (the reference's own products) and gives each warp gate/up row pairs of the expert, read once as 16 e4m3 per 16-byte load and scaled by fc1_scale per 16 values while 2 * MT fp32 FMA chains run per lane (warp-shuffle sums), silu(gate) * up stored as fp32; the down kernel gives each warp output columns of w2 (fc2_scale), reads the run's intermediate rows through L1 and adds topk_weight * y into an fp32 sum with atomics; a last pass casts the sum to e4m3
// atrex-param: MT = 8 | 4, 8
#ifndef MT
#define MT 8
#endif

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>

#include "atrex/candidate_util.h"

static_assert(MT == 1 || MT == 2 || MT == 4 || MT == 8, "MT");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kFP8E4M3;
using atrex::cand::kF32;
using atrex::cand::kI32;


constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 2;  // gate-up rows (or output columns) per warp
constexpr int kAlignThreads = 1024;
constexpr int kMaxExperts = 4 * kAlignThreads;
// MT * H fp32 of staged hidden rows: 224 KiB at MT 8 (the opt-in limit is 227 KiB per block)
constexpr int kMaxHidden = 7168;

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

// 16 e4m3 values of one uint4 -> fp32 times scale.
__device__ __forceinline__ void decode16(const uint4& v, float scale, float (&f)[16]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw hr =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * h)), __NV_E4M3);
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&hr));
      f[i * 4 + h * 2] = p.x * scale;
      f[i * 4 + h * 2 + 1] = p.y * scale;
    }
}

// acc += w . x over 16 values; x: 4 float4 of the staged row.
__device__ __forceinline__ void fma16(float& acc, const float (&w)[16], const float4* x) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = x[i];
    acc = fmaf(w[4 * i], v.x, acc);
    acc = fmaf(w[4 * i + 1], v.y, acc);
    acc = fmaf(w[4 * i + 2], v.z, acc);
    acc = fmaf(w[4 * i + 3], v.w, acc);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// inter[tile * MT + m][n] = silu(W1g[n] . x_m) * (W1u[n] . x_m) on dequantised operands, fp32.
__global__ void __launch_bounds__(kThreads)
    gateup_kernel(const uint8_t* __restrict__ x, const float* __restrict__ a_scale,
                  const uint8_t* __restrict__ w1, const float* __restrict__ s1,
                  const int32_t* __restrict__ sorted, const int32_t* __restrict__ run_expert,
                  const int32_t* __restrict__ len_ptr, float* __restrict__ inter, int H, int N,
                  int top_k, int pairs, int bn, int bk) {
  // MT rows of H fp32, dequantised: fp32(x) * a_scale is the reference's own product (a bf16
  // copy would err by 2^-9 of each term, ~0.05 absolute on the outputs).
  extern __shared__ float4 xs[];
  const int tile = blockIdx.x;
  if (tile * MT >= *len_ptr) return;
  const int e = run_expert[tile];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int chunks = H / 16;  // 16 fp8 per load; 4 float4 in xs
  const int hb = H / bk;
  for (int c = t; c < MT * chunks; c += kThreads) {
    const int m = c / chunks, i = c % chunks;
    const int p = sorted[tile * MT + m];
    float f[16];
    if (p < pairs) {
      const int64_t tk = p / top_k;
      decode16(__ldg(reinterpret_cast<const uint4*>(x + tk * H) + i), __ldg(a_scale + tk * hb + i * 16 / bk), f);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) f[j] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) xs[4 * c + j] = make_float4(f[4 * j], f[4 * j + 1], f[4 * j + 2], f[4 * j + 3]);
  }
  __syncthreads();
  const int n_base = (blockIdx.y * kWarps + warp) * kRowsPerWarp;
  const uint8_t* we = w1 + static_cast<int64_t>(e) * 2 * N * H;
  const float* se = s1 + static_cast<int64_t>(e) * (2 * N / bn) * hb;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int n = n_base + r;
    if (n >= N) break;
    const uint4* g = reinterpret_cast<const uint4*>(we + static_cast<int64_t>(n) * H);
    const uint4* u = reinterpret_cast<const uint4*>(we + static_cast<int64_t>(N + n) * H);
    const float* sg = se + static_cast<int64_t>(n / bn) * hb;
    const float* su = se + static_cast<int64_t>((N + n) / bn) * hb;
    float ag[MT], au[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) ag[m] = au[m] = 0.f;
    for (int i = lane; i < chunks; i += 32) {
      float gw[16], uw[16];
      decode16(__ldg(g + i), __ldg(sg + i * 16 / bk), gw);
      decode16(__ldg(u + i), __ldg(su + i * 16 / bk), uw);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const float4* xr = xs + 4 * (m * chunks + i);
        fma16(ag[m], gw, xr);
        fma16(au[m], uw, xr);
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float gt = warp_sum(ag[m]), up = warp_sum(au[m]);
      if (lane == 0) inter[static_cast<int64_t>(tile * MT + m) * N + n] = gt / (1.f + expf(-gt)) * up;
    }
  }
}

// sum[tok_m][h] += topk_w[p_m] * (W2[h] . inter[tile * MT + m]) on the dequantised w2.
__global__ void __launch_bounds__(kThreads)
    down_kernel(const float* __restrict__ inter, const uint8_t* __restrict__ w2,
                const float* __restrict__ s2, const int32_t* __restrict__ sorted,
                const int32_t* __restrict__ run_expert, const int32_t* __restrict__ len_ptr,
                const float* __restrict__ topk_w, float* __restrict__ sum, int H, int N,
                int top_k, int pairs, int bn, int bk) {
  const int tile = blockIdx.x;
  if (tile * MT >= *len_ptr) return;
  const int e = run_expert[tile];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int chunks = N / 16, nb = N / bn;
  const int h_base = (blockIdx.y * kWarps + warp) * kRowsPerWarp;
  const uint8_t* we = w2 + static_cast<int64_t>(e) * H * N;
  const float* se = s2 + static_cast<int64_t>(e) * (H / bk) * nb;
  const float* ib = inter + static_cast<int64_t>(tile * MT) * N;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int h = h_base + r;
    if (h >= H) break;
    const uint4* wr = reinterpret_cast<const uint4*>(we + static_cast<int64_t>(h) * N);
    const float* sr = se + static_cast<int64_t>(h / bk) * nb;
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.f;
    for (int i = lane; i < chunks; i += 32) {
      float wf[16];
      decode16(__ldg(wr + i), __ldg(sr + i * 16 / bn), wf);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const float4* a = reinterpret_cast<const float4*>(ib + m * N) + 4 * i;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 v = __ldg(a + q);
          acc[m] = fmaf(wf[4 * q], v.x, fmaf(wf[4 * q + 1], v.y, fmaf(wf[4 * q + 2], v.z, fmaf(wf[4 * q + 3], v.w, acc[m]))));
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float y = warp_sum(acc[m]);
      const int p = sorted[tile * MT + m];
      if (lane == 0 && p < pairs)
        atomicAdd(sum + static_cast<int64_t>(p / top_k) * H + h, __ldg(topk_w + p) * y);
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

struct Workspace {
  void* p = nullptr;
  size_t bytes = 0;
};
Workspace g_ws;

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
  const int64_t T = x->shape[0], H = x->shape[1], E = w1->shape[0], N = w1->shape[1] / 2;
  const int64_t k = ids->shape[1];
  const int64_t bn = atrex_param_int(launch, "scale_block_n", 128);
  const int64_t bk = atrex_param_int(launch, "scale_block_k", 128);
  if (bn < 16 || bk < 16 || bn % 16 != 0 || bk % 16 != 0 || H % bk != 0 || N % bn != 0 ||
      w1->shape[2] != H || w2->shape[0] != E || w2->shape[1] != H || w2->shape[2] != N ||
      w1->shape[1] != 2 * N || ids->shape[0] != T || as->shape[1] != H / bk ||
      s1->shape[1] != 2 * N / bn || s1->shape[2] != H / bk || s2->shape[1] != H / bk ||
      s2->shape[2] != N / bn)
    return fail("fp8_blockscale_fused_moe: inconsistent dims or scale blocks (bn %lld, bk %lld; "
                "this template needs multiples of 16)", static_cast<long long>(bn),
                static_cast<long long>(bk));
  if (H > kMaxHidden || E > kMaxExperts || T * k > 0x3fffffff)
    return fail("fp8_blockscale_fused_moe: this template needs hidden_size <= %d and at most %d "
                "experts", kMaxHidden, kMaxExperts);
  if (!aligned(x->data, 16) || !aligned(w1->data, 16) || !aligned(w2->data, 16))
    return fail("fp8_blockscale_fused_moe: hidden_states, w1 and w2 must be 16-byte aligned");
  if (T == 0) return 0;
  const int64_t pairs = T * k, max_len = pairs + E * (MT - 1), tiles = (max_len + MT - 1) / MT;
  const size_t ids_bytes = static_cast<size_t>((max_len + tiles + 1 + 63) / 64 * 64) * 4;
  const size_t sum_bytes = static_cast<size_t>((T * H + 63) / 64 * 64) * sizeof(float);
  const size_t need = ids_bytes + sum_bytes + static_cast<size_t>(tiles * MT) * N * sizeof(float);
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
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int smem = static_cast<int>(MT * H * 4);
  static bool opted = false;  // once per process: the shared memory beyond 48 KiB
  if (!opted) {
    const cudaError_t e = cudaFuncSetAttribute(gateup_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(MT * kMaxHidden * 4));
    if (e != cudaSuccess) return fail("%s: %s", "fp8_blockscale_fused_moe", cudaGetErrorString(e));
    opted = true;
  }
  cudaMemsetAsync(sum, 0, static_cast<size_t>(T * H) * sizeof(float), s);
  align_kernel<<<1, kAlignThreads, 0, s>>>(static_cast<const int32_t*>(ids->data), sorted,
                                           run_expert, len, static_cast<int>(pairs),
                                           static_cast<int>(E));
  constexpr int kRowsPerCta = kWarps * kRowsPerWarp;
  const int h = static_cast<int>(H), n = static_cast<int>(N), kk = static_cast<int>(k),
            pr = static_cast<int>(pairs), ibn = static_cast<int>(bn), ibk = static_cast<int>(bk);
  gateup_kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>((N + kRowsPerCta - 1) / kRowsPerCta)),
                  kThreads, smem, s>>>(static_cast<const uint8_t*>(x->data),
                                       static_cast<const float*>(as->data),
                                       static_cast<const uint8_t*>(w1->data),
                                       static_cast<const float*>(s1->data), sorted, run_expert, len,
                                       inter, h, n, kk, pr, ibn, ibk);
  down_kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>((H + kRowsPerCta - 1) / kRowsPerCta)),
                kThreads, 0, s>>>(inter, static_cast<const uint8_t*>(w2->data),
                                  static_cast<const float*>(s2->data), sorted, run_expert, len,
                                  static_cast<const float*>(tw->data), sum, h, n, kk, pr, ibn, ibk);
  const int64_t total = T * H;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 132 * 16);
  cast_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(
      sum, static_cast<__nv_fp8_storage_t*>(out->data), total);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("fp8_blockscale_fused_moe: %s", cudaGetErrorString(err));
}
