// atrex-template: mma_state
// atrex-description: bf16 tensor cores (mma.sync m16n8k16 -> f32) with the fp32 state slice (128 key rows x BV value columns) living in the mma accumulators of 4 warps across all chunks: per chunk w and k arrive by cp.async into padded shared memory while the slice's bf16 copy is written to h[c] and to shared memory, v = u - w bf16(slice) is one m64 x BV x 128 product (u read and v_new written as bf16 pairs from the fragments), the decayed bf16 v' goes to shared memory, and slice = slice exp(g_last) + k^T v' is an m128 x BV x 64 product whose k^T operand comes from ldmatrix.trans of k as stored
// atrex-param: BV = 32 | 32, 64
#ifndef BV
#define BV 32
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

constexpr int kThreads = 128;  // 4 warps
constexpr int kC = 64;         // tokens per chunk staged (chunk_size <= 64)
constexpr int kDk = 128;       // key_dim of the tensor-core path
constexpr int kNT = BV / 8;    // n8 tiles per warp
// Padded row strides (bytes): +16 so the 8 rows of one ldmatrix phase hit 8 bank groups.
constexpr int kWStride = kDk * 2 + 16;  // w, k: [t][d]
constexpr int kSStride = BV * 2 + 16;   // bf16 slice [d][j], v' [t][j]
constexpr int kWBytes = kC * kWStride, kKBytes = kC * kWStride;
constexpr int kSbBytes = kDk * kSStride, kVsBytes = kC * kSStride;
constexpr int kSmemBytes = kWBytes + kKBytes + kSbBytes + kVsBytes + kC * 4;
static_assert(BV % 16 == 0 && BV <= 64, "BV");

struct Params {
  const uint16_t *k, *w, *u;
  const float* g;
  const int32_t* idx;
  uint16_t *h, *v_new;
  float* state;
  int64_t tokens, hk, hv, dk, dv, chunks, cs, per, slots;
};

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // src-size 0 zero-fills (tokens past the chunk's end)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
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

// grid (dv / BV, hv, batch); requires dk = 128, chunk_size <= 64, dv % BV == 0, aligned rows.
__global__ void __launch_bounds__(kThreads) mma_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sw = base, sk = sw + kWBytes, ssb = sk + kKBytes, svs = ssb + kSbBytes;
  unsigned char* sb_ptr = smem + kWBytes + kKBytes;
  unsigned char* vs_ptr = sb_ptr + kSbBytes;
  float* sg = reinterpret_cast<float*>(vs_ptr + kVsBytes);
  const int64_t head = blockIdx.y, b = blockIdx.z, j0 = static_cast<int64_t>(blockIdx.x) * BV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  const int64_t kh = head / p.per < p.hk - 1 ? head / p.per : p.hk - 1;
  const int slot = p.idx[b];
  if (slot < 0 || slot >= p.slots) return;  // not a slot: nothing to advance
  float* st = p.state + (static_cast<int64_t>(slot) * p.hv + head) * kDk * p.dv;
  // ldmatrix lane roles: A row-major (rows 0-15, k chunk 0|1); B or A^T from k-major storage
  // (.trans): stored rows k 0-7 | 8-15 x column chunks 0 | 1 in the fragment orders.
  const int a_row = lane & 15, a_chunk = lane >> 4;
  const int bt_row = (lane & 7) + (((lane >> 3) & 1) << 3), bt_chunk = lane >> 4;
  const int at_row = (lane & 7) + ((lane >> 4) << 3), at_chunk = (lane >> 3) & 1;

  // The slice: warp w holds key rows 32w .. 32w + 31 as 2 m16 tiles x kNT n8 tiles.
  float s[2][kNT][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int d = warp * 32 + mt * 16 + gq + (x >> 1) * 8;
        const int64_t col = j0 + nt * 8 + tq * 2 + (x & 1);
        s[mt][nt][x] = st[static_cast<int64_t>(d) * p.dv + col];
      }

  for (int64_t c = 0; c < p.chunks; ++c) {
    const int64_t t0 = c * p.cs;
    const int n = static_cast<int>(p.tokens - t0 < p.cs ? p.tokens - t0 : p.cs);
    __syncthreads();  // the previous chunk's shared tiles are consumed
#pragma unroll
    for (int i = 0; i < kC * 16 / kThreads; ++i) {
      const int idx = threadIdx.x + i * kThreads, row = idx >> 4, chunk = idx & 15;
      const bool ok = row < n;
      const int64_t tr = b * p.tokens + t0 + (ok ? row : 0);
      cp_async16(sw + row * kWStride + chunk * 16, p.w + (tr * p.hv + head) * kDk + chunk * 8, ok);
      cp_async16(sk + row * kWStride + chunk * 16, p.k + (tr * p.hk + kh) * kDk + chunk * 8, ok);
    }
    cp_commit();
    if (threadIdx.x < kC) sg[threadIdx.x] = threadIdx.x < n ? __ldg(p.g + (b * p.tokens + t0 + threadIdx.x) * p.hv + head) : 0.f;
    // h[c] = bf16(slice), to global and to shared memory ([d][j] bf16).
    uint16_t* hc = p.h + ((b * p.chunks + c) * p.hv + head) * kDk * p.dv;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int d = warp * 32 + mt * 16 + gq + hh * 8;
          const int jl = nt * 8 + tq * 2;
          const uint32_t v2 = pack_bf16(s[mt][nt][hh * 2], s[mt][nt][hh * 2 + 1]);
          *reinterpret_cast<uint32_t*>(hc + static_cast<int64_t>(d) * p.dv + j0 + jl) = v2;
          *reinterpret_cast<uint32_t*>(sb_ptr + d * kSStride + jl * 2) = v2;
        }
    cp_wait_all();
    __syncthreads();
    const float g_last = sg[n - 1];
    // v = u - w bf16(slice): warp w, token rows 16w .. 16w + 15.
    float acc[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[nt][x] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kDk / 16; ++ks) {
      uint32_t af[4];
      ldsm_x4(af, sw + (warp * 16 + a_row) * kWStride + (ks * 2 + a_chunk) * 16);
#pragma unroll
      for (int jp = 0; jp < kNT / 2; ++jp) {
        uint32_t bf[4];
        ldsm_x4_t(bf, ssb + (ks * 16 + bt_row) * kSStride + (jp * 2 + bt_chunk) * 16);
        mma_bf16(acc[2 * jp], af, bf[0], bf[1]);
        mma_bf16(acc[2 * jp + 1], af, bf[2], bf[3]);
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = warp * 16 + gq + hh * 8;
      const bool live = r < n;
      const float gd = g_last - sg[r];
      const float f = (live && gd <= 0.f) ? expf(gd) : 0.f;
      const int64_t row = ((b * p.tokens + t0 + (live ? r : 0)) * p.hv + head) * p.dv;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int jl = nt * 8 + tq * 2;
        float v0 = 0.f, v1 = 0.f;
        if (live) {
          const __nv_bfloat162 uu = *reinterpret_cast<const __nv_bfloat162*>(p.u + row + j0 + jl);
          v0 = __low2float(uu) - acc[nt][hh * 2];
          v1 = __high2float(uu) - acc[nt][hh * 2 + 1];
          *reinterpret_cast<uint32_t*>(p.v_new + row + j0 + jl) = pack_bf16(v0, v1);
        }
        *reinterpret_cast<uint32_t*>(vs_ptr + r * kSStride + jl * 2) =
            pack_bf16(round_bf16(v0 * f), round_bf16(v1 * f));
      }
    }
    __syncthreads();
    // slice = slice exp(g_last) + k^T v'.
    const float decay = expf(g_last);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) s[mt][nt][x] *= decay;
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      if (ks * 16 >= n) break;  // zero rows past the chunk's end add nothing
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldsm_x4_t(af[mt], sk + (ks * 16 + at_row) * kWStride + ((warp * 32 + mt * 16) / 8 + at_chunk) * 16);
#pragma unroll
      for (int jp = 0; jp < kNT / 2; ++jp) {
        uint32_t bf[4];
        ldsm_x4_t(bf, svs + (ks * 16 + bt_row) * kSStride + (jp * 2 + bt_chunk) * 16);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(s[mt][2 * jp], af[mt], bf[0], bf[1]);
          mma_bf16(s[mt][2 * jp + 1], af[mt], bf[2], bf[3]);
        }
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int d = warp * 32 + mt * 16 + gq + (x >> 1) * 8;
        const int64_t col = j0 + nt * 8 + tq * 2 + (x & 1);
        st[static_cast<int64_t>(d) * p.dv + col] = s[mt][nt][x];
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
  const bool fast = p.dk == kDk && p.cs <= kC && p.dv % BV == 0 && aligned(p.k, 16) && aligned(p.w, 16) &&
                    aligned(p.u, 4) && aligned(p.h, 4) && aligned(p.v_new, 4) && batch <= 65535 &&
                    p.hv <= 65535;
  if (fast) {
    static bool attr_set = false;
    if (!attr_set) {
      const cudaError_t e = cudaFuncSetAttribute(mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
      if (e != cudaSuccess) return fail("chunk_gated_delta_rule_state: %s", cudaGetErrorString(e));
      attr_set = true;
    }
    const dim3 grid(static_cast<unsigned>(p.dv / BV), static_cast<unsigned>(p.hv), static_cast<unsigned>(batch));
    mma_kernel<<<grid, kThreads, kSmemBytes, s>>>(p);
  } else {
    const int64_t total = batch * p.hv * p.dv, blocks = (total + 127) / 128;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16)), 128, 0, s>>>(p, batch);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("chunk_gated_delta_rule_state: %s", cudaGetErrorString(err));
}
