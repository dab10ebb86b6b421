// atrex-template: block_simt
// atrex-description: one block per (batch, chunk, v head): the chunk's q, k and v and g are staged once in padded fp32 shared memory; the masked, decayed, bf16-rounded attention block A = q k^T is built there (each warp WARP_ROWS rows apart, lanes over keys), then each thread accumulates a register tile of rows x (dv / 32) strided columns: q h_c with h_c streamed through shared memory in HT-row tiles (read from global once per block), scaled by exp(g_t), plus A v; one bf16 store per output
// atrex-param: HT = 32 | 16, 32, 64
#ifndef HT
#define HT 32
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cmath>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxC = 64;    // fast path: chunk_size <= 64
constexpr int kMaxDv = 128;  // and value_dim <= 128, key_dim <= 128
constexpr int kMaxDk = 128;
constexpr int kRows = kMaxC / kWarps;  // rows per warp: r = warp + kWarps * i
constexpr int kCols = kMaxDv / 32;     // columns per lane: j = lane + 32 * i
static_assert(HT >= 1 && HT <= 64, "HT");

struct Params {
  const uint16_t *q, *k, *v, *h;
  const float* g;
  uint16_t* out;
  int64_t tokens, hq, hv, dk, dv, chunks, cs, per;
  float scale;
};

__device__ __forceinline__ float bf2f(uint16_t x) {
  return __uint_as_float(static_cast<uint32_t>(x) << 16);
}
__device__ __forceinline__ float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}

struct Smem {
  float q[kMaxC][kMaxDk + 1];
  float k[kMaxC][kMaxDk + 1];
  float v[kMaxC][kMaxDv];
  float a[kMaxC][kMaxC + 1];
  float h[HT][kMaxDv];
  float g[kMaxC];
};

// grid (hv, chunks, batch). Requires cs <= 64, dk <= 128, dv <= 128 (checked by the host).
__global__ void __launch_bounds__(kThreads) chunk_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int64_t head = blockIdx.x, c = blockIdx.y, b = blockIdx.z;
  const int64_t qh = head / p.per < p.hq - 1 ? head / p.per : p.hq - 1;
  const int64_t t0 = c * p.cs;
  const int n = static_cast<int>(p.tokens - t0 < p.cs ? p.tokens - t0 : p.cs);
  const int dk = static_cast<int>(p.dk), dv = static_cast<int>(p.dv);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Stage q, k (padded rows), v, g; rows past n are zero.
  for (int i = tid; i < kMaxC * dk; i += kThreads) {
    const int r = i / dk, d = i % dk;
    const int64_t off = ((b * p.tokens + t0 + r) * p.hq + qh) * p.dk + d;
    sm.q[r][d] = r < n ? bf2f(__ldg(p.q + off)) : 0.f;
    sm.k[r][d] = r < n ? bf2f(__ldg(p.k + off)) : 0.f;
  }
  for (int i = tid; i < kMaxC * dv; i += kThreads) {
    const int r = i / dv, j = i % dv;
    sm.v[r][j] = r < n ? bf2f(__ldg(p.v + ((b * p.tokens + t0 + r) * p.hv + head) * p.dv + j)) : 0.f;
  }
  if (tid < kMaxC) sm.g[tid] = tid < n ? __ldg(p.g + (b * p.tokens + t0 + tid) * p.hv + head) : 0.f;
  __syncthreads();
  // A[r][s] = bf16(q_r . k_s exp(g_r - g_s)) where s <= r and g_r - g_s <= 0, else 0.
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + kWarps * i;
#pragma unroll
    for (int m = 0; m < kMaxC / 32; ++m) {
      const int s = lane + 32 * m;
      float dot = 0.f;
      for (int d = 0; d < dk; ++d) dot = fmaf(sm.q[r][d], sm.k[s][d], dot);
      const float gd = sm.g[r] - sm.g[s];
      sm.a[r][s] = (s <= r && r < n && gd <= 0.f) ? round_bf16(dot * expf(gd)) : 0.f;
    }
  }
  // acc = q h_c over HT-row tiles of h_c.
  float acc[kRows][kCols];
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) acc[i][jj] = 0.f;
  const uint16_t* hc = p.h + ((b * p.chunks + c) * p.hv + head) * p.dk * p.dv;
  for (int d0 = 0; d0 < dk; d0 += HT) {
    const int db = dk - d0 < HT ? dk - d0 : HT;
    __syncthreads();  // the previous tile is consumed (and, the first time, A is complete)
    for (int i = tid; i < db * dv; i += kThreads) sm.h[i / dv][i % dv] = bf2f(__ldg(hc + static_cast<int64_t>(d0) * dv + i));
    __syncthreads();
    for (int d = 0; d < db; ++d) {
      float hv[kCols];
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) hv[jj] = lane + 32 * jj < dv ? sm.h[d][lane + 32 * jj] : 0.f;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float qv = sm.q[warp + kWarps * i][d0 + d];
#pragma unroll
        for (int jj = 0; jj < kCols; ++jj) acc[i][jj] = fmaf(qv, hv[jj], acc[i][jj]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float eg = expf(sm.g[warp + kWarps * i]);
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) acc[i][jj] *= eg;
  }
  // + A v (A is zero past each row's diagonal and past n).
  for (int s = 0; s < n; ++s) {
    float vv[kCols];
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) vv[jj] = lane + 32 * jj < dv ? sm.v[s][lane + 32 * jj] : 0.f;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float av = sm.a[warp + kWarps * i][s];
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) acc[i][jj] = fmaf(av, vv[jj], acc[i][jj]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + kWarps * i;
    if (r >= n) continue;
    uint16_t* orow = p.out + ((b * p.tokens + t0 + r) * p.hv + head) * p.dv;
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj)
      if (lane + 32 * jj < dv) orow[lane + 32 * jj] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[i][jj] * p.scale));
  }
}

// Any chunk size and dims (<= 256): one thread per (token, head, column), the reference's loops.
__global__ void scalar_kernel(Params p, int64_t batch) {
  const int64_t total = batch * p.tokens * p.hv * p.dv;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = o % p.dv, head = (o / p.dv) % p.hv, t = (o / (p.dv * p.hv)) % p.tokens,
                  b = o / (p.dv * p.hv * p.tokens);
    const int64_t qh = head / p.per < p.hq - 1 ? head / p.per : p.hq - 1;
    const int64_t c = t / p.cs, start = c * p.cs;
    const uint16_t* qrow = p.q + ((b * p.tokens + t) * p.hq + qh) * p.dk;
    const float gt = p.g[(b * p.tokens + t) * p.hv + head];
    const uint16_t* hc = p.h + ((b * p.chunks + c) * p.hv + head) * p.dk * p.dv;
    float acc = 0.f;
    for (int64_t d = 0; d < p.dk; ++d) acc = fmaf(bf2f(qrow[d]), bf2f(hc[d * p.dv + j]), acc);
    acc *= expf(gt);
    for (int64_t s = start; s <= t; ++s) {
      const uint16_t* krow = p.k + ((b * p.tokens + s) * p.hq + qh) * p.dk;
      float dot = 0.f;
      for (int64_t d = 0; d < p.dk; ++d) dot = fmaf(bf2f(qrow[d]), bf2f(krow[d]), dot);
      const float gd = gt - p.g[(b * p.tokens + s) * p.hv + head];
      const float a = gd <= 0.f ? round_bf16(dot * expf(gd)) : 0.f;
      acc = fmaf(a, bf2f(p.v[((b * p.tokens + s) * p.hv + head) * p.dv + j]), acc);
    }
    p.out[o] = __bfloat16_as_ushort(__float2bfloat16_rn(acc * p.scale));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// q, k [B, T, Hq, dk], v [B, T, Hv, dv], h [B, C, Hv, dk, dv] (bf16), g [B, T, Hv] f32 ->
// out [B, T, Hv, dv] bf16 with C = ceil(T / chunk_size).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "chunk_delta_rule_output");
  const DLTensor* q = ts.input("q", kBF16, 4);
  const DLTensor* k = ts.input("k", kBF16, 4);
  const DLTensor* v = ts.input("v", kBF16, 4);
  const DLTensor* h = ts.input("h", kBF16, 5);
  const DLTensor* g = ts.input("g", kF32, 3);
  const DLTensor* out = ts.output("out", kBF16, 4);
  ts.same_dims(q, k);
  ts.same_dims(v, out);
  if (!ts.ok()) return ts.failed();
  Params p{};
  const int64_t batch = q->shape[0];
  p.tokens = q->shape[1];
  p.hq = q->shape[2];
  p.dk = q->shape[3];
  p.hv = v->shape[2];
  p.dv = v->shape[3];
  p.chunks = h->shape[1];
  p.cs = atrex_param_int(launch, "chunk_size", 64);
  if (p.cs < 1 || p.cs > 256) return fail("chunk_delta_rule_output: chunk_size %lld is not in 1..256", (long long)p.cs);
  if (p.chunks != (p.tokens + p.cs - 1) / p.cs || h->shape[2] != p.hv || h->shape[3] != p.dk || h->shape[4] != p.dv)
    return fail("chunk_delta_rule_output: h must be [B, ceil(T / chunk_size), Hv, dk, dv]");
  if (p.hq < 1) return fail("chunk_delta_rule_output: no q heads");
  if (batch == 0 || p.tokens == 0 || p.hv == 0 || p.dv == 0) return 0;
  p.per = p.hv / p.hq > 1 ? p.hv / p.hq : 1;
  p.q = static_cast<const uint16_t*>(q->data);
  p.k = static_cast<const uint16_t*>(k->data);
  p.v = static_cast<const uint16_t*>(v->data);
  p.h = static_cast<const uint16_t*>(h->data);
  p.g = static_cast<const float*>(g->data);
  p.out = static_cast<uint16_t*>(out->data);
  p.scale = static_cast<float>(atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(p.dk))));
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  if (p.cs <= kMaxC && p.dk <= kMaxDk && p.dv <= kMaxDv && p.hv <= 0x7fffffff && p.chunks <= 65535 &&
      batch <= 65535) {
    const int bytes = static_cast<int>(sizeof(Smem));
    static bool attr_set = false;
    if (!attr_set) {
      const cudaError_t e = cudaFuncSetAttribute(chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (e != cudaSuccess) return fail("chunk_delta_rule_output: %s", cudaGetErrorString(e));
      attr_set = true;
    }
    const dim3 grid(static_cast<unsigned>(p.hv), static_cast<unsigned>(p.chunks), static_cast<unsigned>(batch));
    chunk_kernel<<<grid, kThreads, bytes, s>>>(p);
  } else {
    const int64_t total = batch * p.tokens * p.hv * p.dv, blocks = (total + 255) / 256;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16)), 256, 0, s>>>(p, batch);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("chunk_delta_rule_output: %s", cudaGetErrorString(err));
}
