// atrex-template: mma_chunk
// atrex-description: bf16 tensor cores (mma.sync m16n8k16 -> f32), one block of 4 warps per (batch, 64-token chunk, v head), each warp 16 query rows: q, k, v and h_c are copied by cp.async into XOR-swizzled shared memory (q and k first, so S = q k^T starts while v and h_c land when OVERLAP), the S fragments are masked, decayed and rounded to bf16 in registers and reused directly as the A operand of S v (no shared-memory round trip), q h_c and S v read their row-major operands with ldmatrix.trans and share one accumulator scaled by exp(g_t) in between; only the key blocks at or below each warp's diagonal are multiplied
// atrex-param: OVERLAP = 1 | 0, 1
// atrex-param: MIN_BLOCKS = 2 | 1, 2
#ifndef OVERLAP
#define OVERLAP 1
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cmath>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;

constexpr int kC = 64, kDk = 128, kDv = 128;  // the tensor-core path's chunk and head dims
constexpr int kThreads = 128;                 // 4 warps x 16 rows
constexpr int kRowBytes = 256;                // one 128-element bf16 row
constexpr int kQBytes = kC * kRowBytes, kKBytes = kC * kRowBytes, kVBytes = kC * kRowBytes;
constexpr int kHBytes = kDk * kRowBytes;
constexpr int kSmemBytes = kQBytes + kKBytes + kVBytes + kHBytes + kC * 4;

struct Params {
  const uint16_t *q, *k, *v, *h;
  const float* g;
  uint16_t* out;
  int64_t tokens, hq, hv, dk, dv, chunks, cs, per;
  float scale;
};

// Byte offset of 16-byte chunk `chunk` (0..15) of row `row` in a tile of 256-byte rows, the low
// 3 bits of the chunk index XORed with the row's: ldmatrix's 8 rows per phase hit 8 bank groups.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // src-size 0 zero-fills (rows past the chunk's last token)
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
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&b);
}
__device__ __forceinline__ float bf2f(uint16_t x) {
  return __uint_as_float(static_cast<uint32_t>(x) << 16);
}
__device__ __forceinline__ float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}

// rows x 16 chunks of a [rows, 128] bf16 tile from global rows `stride` elements apart.
template <int kRowsT>
__device__ __forceinline__ void copy_tile(uint32_t dst, const uint16_t* src, int64_t stride, int valid_rows) {
#pragma unroll
  for (int i = 0; i < kRowsT * 16 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx >> 4, chunk = idx & 15;
    const bool ok = row < valid_rows;
    cp_async16(dst + swz(row, chunk), src + (ok ? row : 0) * stride + chunk * 8, ok);
  }
}

// grid (hv, chunks, batch); requires chunk_size 64, dk = dv = 128, 16-byte aligned rows.
__global__ void __launch_bounds__(kThreads, MIN_BLOCKS) mma_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sq = base, sk = sq + kQBytes, sv = sk + kKBytes, sh = sv + kVBytes;
  float* sg = reinterpret_cast<float*>(smem + kQBytes + kKBytes + kVBytes + kHBytes);
  const int64_t head = blockIdx.x, c = blockIdx.y, b = blockIdx.z;
  const int64_t qh = head / p.per < p.hq - 1 ? head / p.per : p.hq - 1;
  const int64_t t0 = c * kC;
  const int n = static_cast<int>(p.tokens - t0 < kC ? p.tokens - t0 : kC);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;

  copy_tile<kC>(sq, p.q + ((b * p.tokens + t0) * p.hq + qh) * kDk, p.hq * kDk, n);
  copy_tile<kC>(sk, p.k + ((b * p.tokens + t0) * p.hq + qh) * kDk, p.hq * kDk, n);
  cp_commit();
  copy_tile<kC>(sv, p.v + ((b * p.tokens + t0) * p.hv + head) * kDv, p.hv * kDv, n);
  copy_tile<kDk>(sh, p.h + ((b * p.chunks + c) * p.hv + head) * kDk * kDv, kDv, kDk);
  cp_commit();
  if (threadIdx.x < kC)
    sg[threadIdx.x] = threadIdx.x < n ? __ldg(p.g + (b * p.tokens + t0 + threadIdx.x) * p.hv + head) : 0.f;
#if OVERLAP
  cp_wait<1>();
#else
  cp_wait<0>();
#endif
  __syncthreads();

  const int r0 = warp * 16;
  // ldmatrix lane roles. A (row-major [r][k]): rows 0-15 x k chunks 0|1. B from [n][k] storage:
  // (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15). B from [k][n] storage
  // (.trans): (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
  const int a_row = lane & 15, a_chunk = lane >> 4;
  const int bn_row = (lane & 7) + ((lane >> 4) << 3), bn_chunk = (lane >> 3) & 1;
  const int bt_row = (lane & 7) + (((lane >> 3) & 1) << 3), bt_chunk = lane >> 4;

  // S = q k^T for this warp's 16 rows and the key blocks at or below its diagonal.
  float s_acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s_acc[j][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kDk / 16; ++kk) {
    uint32_t af[4];
    ldsm_x4(af, sq + swz(r0 + a_row, kk * 2 + a_chunk));
#pragma unroll
    for (int jp = 0; jp < 4; ++jp) {
      if (jp > warp) continue;  // keys past this warp's rows are masked anyway
      uint32_t bf[4];
      ldsm_x4(bf, sk + swz(jp * 16 + bn_row, kk * 2 + bn_chunk));
      mma_bf16(s_acc[2 * jp], af, bf[0], bf[1]);
      mma_bf16(s_acc[2 * jp + 1], af, bf[2], bf[3]);
    }
  }
  // Mask, decay, round: element (r, s) = bf16(S exp(g_r - g_s)) where s <= r < n, s < n and
  // g_r - g_s <= 0, else 0; then packed as A-operand fragments of S v (k = s).
  const int ra = r0 + gq, rb = ra + 8;
  const float ga = sg[ra], gb = sg[rb];
  uint32_t pf[4][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float e[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int r = x < 2 ? ra : rb, s = j * 8 + tq * 2 + (x & 1);
      const float gd = (x < 2 ? ga : gb) - sg[s];
      e[x] = (s <= r && r < n && s < n && gd <= 0.f) ? round_bf16(s_acc[j][x] * expf(gd)) : 0.f;
    }
    pf[j >> 1][(j & 1) * 2] = pack_bf16(e[0], e[1]);
    pf[j >> 1][(j & 1) * 2 + 1] = pack_bf16(e[2], e[3]);
  }
  // pf[kk] as {a0, a1, a2, a3}: tile 2kk rows g / g+8 then tile 2kk+1 rows g / g+8.
  uint32_t afr[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    afr[kk][0] = pf[kk][0];
    afr[kk][1] = pf[kk][1];
    afr[kk][2] = pf[kk][2];
    afr[kk][3] = pf[kk][3];
  }

#if OVERLAP
  cp_wait<0>();
  __syncthreads();
#endif
  // o = (q h_c) exp(g_r) + S v, 16 rows x 128 columns per warp.
  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kDk / 16; ++kk) {
    uint32_t af[4];
    ldsm_x4(af, sq + swz(r0 + a_row, kk * 2 + a_chunk));
#pragma unroll
    for (int jp = 0; jp < 8; ++jp) {
      uint32_t bf[4];
      ldsm_x4_t(bf, sh + swz(kk * 16 + bt_row, jp * 2 + bt_chunk));
      mma_bf16(o[2 * jp], af, bf[0], bf[1]);
      mma_bf16(o[2 * jp + 1], af, bf[2], bf[3]);
    }
  }
  const float ea = expf(ga), eb = expf(gb);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    o[j][0] *= ea;
    o[j][1] *= ea;
    o[j][2] *= eb;
    o[j][3] *= eb;
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk > warp) continue;
#pragma unroll
    for (int jp = 0; jp < 8; ++jp) {
      uint32_t bf[4];
      ldsm_x4_t(bf, sv + swz(kk * 16 + bt_row, jp * 2 + bt_chunk));
      mma_bf16(o[2 * jp], afr[kk], bf[0], bf[1]);
      mma_bf16(o[2 * jp + 1], afr[kk], bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = hh ? rb : ra;
    if (r >= n) continue;
    uint16_t* orow = p.out + ((b * p.tokens + t0 + r) * p.hv + head) * kDv;
#pragma unroll
    for (int j = 0; j < 16; ++j)
      *reinterpret_cast<uint32_t*>(orow + j * 8 + tq * 2) =
          pack_bf16(o[j][hh * 2] * p.scale, o[j][hh * 2 + 1] * p.scale);
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
  const bool fast = p.cs == kC && p.dk == kDk && p.dv == kDv && aligned(p.q, 16) && aligned(p.k, 16) &&
                    aligned(p.v, 16) && aligned(p.h, 16) && aligned(p.out, 4) && p.chunks <= 65535 &&
                    batch <= 65535 && p.hv <= 0x7fffffff;
  if (fast) {
    static bool attr_set = false;
    if (!attr_set) {
      const cudaError_t e = cudaFuncSetAttribute(mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
      if (e != cudaSuccess) return fail("chunk_delta_rule_output: %s", cudaGetErrorString(e));
      attr_set = true;
    }
    const dim3 grid(static_cast<unsigned>(p.hv), static_cast<unsigned>(p.chunks), static_cast<unsigned>(batch));
    mma_kernel<<<grid, kThreads, kSmemBytes, s>>>(p);
  } else {
    const int64_t total = batch * p.tokens * p.hv * p.dv, blocks = (total + 255) / 256;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16)), 256, 0, s>>>(p, batch);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("chunk_delta_rule_output: %s", cudaGetErrorString(err));
}
