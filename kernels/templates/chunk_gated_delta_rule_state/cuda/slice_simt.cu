// atrex-template: slice_simt
// atrex-description: one block per (batch, v head, BV-column slice of the state), the slice in registers across all chunks (thread (row group, column) holds dk / (256 / BV) rows); per chunk the slice's bf16 copy goes to h[c] and to shared memory, w, k (padded fp32), the u slice and g are staged, v = u - w bf16(slice) is a register-blocked product (each thread 64 * BV / 256 tokens of one column, w rows read as float4 broadcasts), v_new is written and the decayed bf16 v' kept in shared memory, then slice = slice exp(g_last) + k^T v' in registers
// atrex-param: BV = 32 | 16, 32
#ifndef BV
#define BV 32
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kI32;

constexpr int kThreads = 256;
constexpr int kC = 64;     // fast path: chunk_size <= 64
constexpr int kDk = 128;   // key_dim <= 128
constexpr int kGroups = kThreads / BV;         // row groups
constexpr int kRowsPer = kDk / kGroups;        // state rows per thread
constexpr int kTokPer = kC / kGroups;          // v rows per thread
constexpr int kPad = kDk + 4;                  // float4-aligned padded row
static_assert(kThreads % BV == 0 && kDk % kGroups == 0 && kC % kGroups == 0, "BV");

struct Params {
  const uint16_t *k, *w, *u;
  const float* g;
  const int32_t* idx;
  uint16_t *h, *v_new;
  float* state;
  int64_t tokens, hk, hv, dk, dv, chunks, cs, per, slots;
};

__device__ __forceinline__ float bf2f(uint16_t x) {
  return __uint_as_float(static_cast<uint32_t>(x) << 16);
}
__device__ __forceinline__ float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}

struct Smem {
  float w[kC][kPad];
  float k[kC][kPad];
  float hb[kDk][BV];  // bf16(slice) widened
  float vp[kC][BV];   // u slice, then bf16(v * f)
  float g[kC];
};

// grid (ceil(dv / BV), hv, batch). Thread (group rg, column j): state rows rg + kGroups * i.
__global__ void __launch_bounds__(kThreads) slice_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int64_t head = blockIdx.y, b = blockIdx.z, j0 = static_cast<int64_t>(blockIdx.x) * BV;
  const int tid = threadIdx.x, j = tid % BV, rg = tid / BV;
  const int64_t col = j0 + j;
  const bool live = col < p.dv;
  const int dk = static_cast<int>(p.dk);
  const int64_t kh = head / p.per < p.hk - 1 ? head / p.per : p.hk - 1;
  const int slot = p.idx[b];
  if (slot < 0 || slot >= p.slots) return;  // not a slot: nothing to advance
  float* st = p.state + (static_cast<int64_t>(slot) * p.hv + head) * p.dk * p.dv;
  float s[kRowsPer];
#pragma unroll
  for (int i = 0; i < kRowsPer; ++i) {
    const int d = rg + kGroups * i;
    s[i] = (live && d < dk) ? st[static_cast<int64_t>(d) * p.dv + col] : 0.f;
  }
  for (int64_t c = 0; c < p.chunks; ++c) {
    const int64_t t0 = c * p.cs;
    const int n = static_cast<int>(p.tokens - t0 < p.cs ? p.tokens - t0 : p.cs);
    uint16_t* hc = p.h + ((b * p.chunks + c) * p.hv + head) * p.dk * p.dv;
    __syncthreads();  // the previous chunk's shared data is consumed
#pragma unroll
    for (int i = 0; i < kRowsPer; ++i) {
      const int d = rg + kGroups * i;
      const uint16_t hbits = __bfloat16_as_ushort(__float2bfloat16_rn(s[i]));
      sm.hb[d][j] = bf2f(hbits);
      if (live && d < dk) hc[static_cast<int64_t>(d) * p.dv + col] = hbits;
    }
    for (int i = tid; i < kC * kDk; i += kThreads) {
      const int r = i / kDk, d = i % kDk;
      const bool ok = r < n && d < dk;
      sm.w[r][d] = ok ? bf2f(__ldg(p.w + ((b * p.tokens + t0 + r) * p.hv + head) * p.dk + d)) : 0.f;
      sm.k[r][d] = ok ? bf2f(__ldg(p.k + ((b * p.tokens + t0 + r) * p.hk + kh) * p.dk + d)) : 0.f;
    }
    for (int i = tid; i < kC * BV; i += kThreads) {
      const int r = i / BV, jj = i % BV;
      sm.vp[r][jj] = (r < n && j0 + jj < p.dv) ? bf2f(__ldg(p.u + ((b * p.tokens + t0 + r) * p.hv + head) * p.dv + j0 + jj)) : 0.f;
    }
    if (tid < kC) sm.g[tid] = tid < n ? __ldg(p.g + (b * p.tokens + t0 + tid) * p.hv + head) : 0.f;
    __syncthreads();
    const float g_last = sm.g[n - 1];
    // v[t][j] = u[t][j] - w[t] . hb[:, j] for t = rg + kGroups * m.
    float acc[kTokPer];
#pragma unroll
    for (int m = 0; m < kTokPer; ++m) acc[m] = 0.f;
    for (int d = 0; d < kDk; d += 4) {
      const float h0 = sm.hb[d][j], h1 = sm.hb[d + 1][j], h2 = sm.hb[d + 2][j], h3 = sm.hb[d + 3][j];
#pragma unroll
      for (int m = 0; m < kTokPer; ++m) {
        const float4 wv = *reinterpret_cast<const float4*>(&sm.w[rg + kGroups * m][d]);
        acc[m] = fmaf(wv.x, h0, fmaf(wv.y, h1, fmaf(wv.z, h2, fmaf(wv.w, h3, acc[m]))));
      }
    }
    float vout[kTokPer];
#pragma unroll
    for (int m = 0; m < kTokPer; ++m) {
      const int r = rg + kGroups * m;
      vout[m] = sm.vp[r][j] - acc[m];
    }
    __syncthreads();  // every thread has read u from vp before vp is overwritten
#pragma unroll
    for (int m = 0; m < kTokPer; ++m) {
      const int r = rg + kGroups * m;
      const float gd = g_last - sm.g[r];
      const float f = (r < n && gd <= 0.f) ? expf(gd) : 0.f;
      sm.vp[r][j] = round_bf16(vout[m] * f);
      if (r < n && live)
        p.v_new[((b * p.tokens + t0 + r) * p.hv + head) * p.dv + col] =
            __bfloat16_as_ushort(__float2bfloat16_rn(vout[m]));
    }
    __syncthreads();
    const float decay = expf(g_last);
#pragma unroll
    for (int i = 0; i < kRowsPer; ++i) s[i] *= decay;
    for (int r = 0; r < n; ++r) {
      const float vv = sm.vp[r][j];
#pragma unroll
      for (int i = 0; i < kRowsPer; ++i) s[i] = fmaf(sm.k[r][rg + kGroups * i], vv, s[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPer; ++i) {
    const int d = rg + kGroups * i;
    if (live && d < dk) st[static_cast<int64_t>(d) * p.dv + col] = s[i];
  }
}

// Any chunk size and dims: one thread per (batch, head, column) walking the reference's loops.
__global__ void scalar_kernel(Params p, int64_t batch) {
  const int64_t total = batch * p.hv * p.dv;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = o % p.dv, head = (o / p.dv) % p.hv, b = o / (p.dv * p.hv);
    const int64_t kh = head / p.per < p.hk - 1 ? head / p.per : p.hk - 1;
    const int slot = p.idx[b];
    if (slot < 0 || slot >= p.slots) continue;
    float* st = p.state + (static_cast<int64_t>(slot) * p.hv + head) * p.dk * p.dv;
    for (int64_t c = 0; c < p.chunks; ++c) {
      const int64_t t0 = c * p.cs, t1 = t0 + p.cs < p.tokens ? t0 + p.cs : p.tokens;
      uint16_t* hc = p.h + ((b * p.chunks + c) * p.hv + head) * p.dk * p.dv;
      for (int64_t d = 0; d < p.dk; ++d) hc[d * p.dv + j] = __bfloat16_as_ushort(__float2bfloat16_rn(st[d * p.dv + j]));
      const float g_last = p.g[(b * p.tokens + t1 - 1) * p.hv + head];
      // v_new for every token of the chunk first (it reads the state before the update).
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = (b * p.tokens + t) * p.hv + head;
        float acc = 0.f;
        for (int64_t d = 0; d < p.dk; ++d) acc = fmaf(bf2f(p.w[row * p.dk + d]), bf2f(hc[d * p.dv + j]), acc);
        p.v_new[row * p.dv + j] = __bfloat16_as_ushort(__float2bfloat16_rn(bf2f(p.u[row * p.dv + j]) - acc));
      }
      const float decay = expf(g_last);
      for (int64_t d = 0; d < p.dk; ++d) st[d * p.dv + j] *= decay;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = (b * p.tokens + t) * p.hv + head;
        float acc = 0.f;
        for (int64_t d = 0; d < p.dk; ++d) acc = fmaf(bf2f(p.w[row * p.dk + d]), bf2f(hc[d * p.dv + j]), acc);
        const float v = bf2f(p.u[row * p.dv + j]) - acc;
        const float gd = g_last - p.g[row];
        const float vv = round_bf16(v * (gd <= 0.f ? expf(gd) : 0.f));
        const uint16_t* krow = p.k + ((b * p.tokens + t) * p.hk + kh) * p.dk;
        for (int64_t d = 0; d < p.dk; ++d) st[d * p.dv + j] = fmaf(bf2f(krow[d]), vv, st[d * p.dv + j]);
      }
    }
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// k [B, T, Hk, dk], w [B, T, Hv, dk], u [B, T, Hv, dv] (bf16), g [B, T, Hv] f32,
// initial_state_indices [B] i32 -> h [B, C, Hv, dk, dv] bf16, v_new [B, T, Hv, dv] bf16,
// final_state [S, Hv, dk, dv] f32 (holding initial_state on entry; the batch's slots advance).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "chunk_gated_delta_rule_state");
  const DLTensor* k = ts.input("k", kBF16, 4);
  const DLTensor* w = ts.input("w", kBF16, 4);
  const DLTensor* u = ts.input("u", kBF16, 4);
  const DLTensor* g = ts.input("g", kF32, 3);
  const DLTensor* idx = ts.input("initial_state_indices", kI32, 1);
  const DLTensor* h = ts.output("h", kBF16, 5);
  const DLTensor* vn = ts.output("v_new", kBF16, 4);
  const DLTensor* fin = ts.output("final_state", kF32, 4);
  ts.same_dims(u, vn);
  if (!ts.ok()) return ts.failed();
  Params p{};
  const int64_t batch = k->shape[0];
  p.tokens = k->shape[1];
  p.hk = k->shape[2];
  p.dk = k->shape[3];
  p.hv = u->shape[2];
  p.dv = u->shape[3];
  p.chunks = h->shape[1];
  p.slots = fin->shape[0];
  p.cs = atrex_param_int(launch, "chunk_size", 64);
  if (p.cs < 1 || p.cs > 256) return fail("chunk_gated_delta_rule_state: chunk_size %lld is not in 1..256", (long long)p.cs);
  if (p.chunks != (p.tokens + p.cs - 1) / p.cs || h->shape[2] != p.hv || h->shape[3] != p.dk || h->shape[4] != p.dv)
    return fail("chunk_gated_delta_rule_state: h must be [B, ceil(T / chunk_size), Hv, dk, dv]");
  if (fin->shape[1] != p.hv || fin->shape[2] != p.dk || fin->shape[3] != p.dv || w->shape[3] != p.dk)
    return fail("chunk_gated_delta_rule_state: final_state must be [S, Hv, dk, dv], w [B, T, Hv, dk]");
  if (p.hk < 1) return fail("chunk_gated_delta_rule_state: no k heads");
  if (batch == 0 || p.tokens == 0 || p.hv == 0 || p.dv == 0) return 0;
  p.per = p.hv / p.hk > 1 ? p.hv / p.hk : 1;
  p.k = static_cast<const uint16_t*>(k->data);
  p.w = static_cast<const uint16_t*>(w->data);
  p.u = static_cast<const uint16_t*>(u->data);
  p.g = static_cast<const float*>(g->data);
  p.idx = static_cast<const int32_t*>(idx->data);
  p.h = static_cast<uint16_t*>(h->data);
  p.v_new = static_cast<uint16_t*>(vn->data);
  p.state = static_cast<float*>(fin->data);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  if (p.cs <= kC && p.dk <= kDk && batch <= 65535 && p.hv <= 65535) {
    const int bytes = static_cast<int>(sizeof(Smem));
    static bool attr_set = false;
    if (!attr_set) {
      const cudaError_t e = cudaFuncSetAttribute(slice_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (e != cudaSuccess) return fail("chunk_gated_delta_rule_state: %s", cudaGetErrorString(e));
      attr_set = true;
    }
    const dim3 grid(static_cast<unsigned>((p.dv + BV - 1) / BV), static_cast<unsigned>(p.hv), static_cast<unsigned>(batch));
    slice_kernel<<<grid, kThreads, bytes, s>>>(p);
  } else {
    const int64_t total = batch * p.hv * p.dv, blocks = (total + 127) / 128;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16)), 128, 0, s>>>(p, batch);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("chunk_gated_delta_rule_state: %s", cudaGetErrorString(err));
}
