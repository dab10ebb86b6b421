// atrex-template: group_block
// atrex-description: one thread block per (sequence, kv head) serving its whole GQA group of query heads, one launch; KEY_TILE keys per online-softmax step: scores by one thread per (key, HEADS_PER_THREAD heads) from 16-byte key loads of the legacy [d/8, bs, 8] layout, a warp per head for the softmax, then one thread per (head, dim) accumulating values from 16-byte loads of 8 positions; q, p, the accumulators and the running max/sum live in shared memory, fp32 throughout
// atrex-param: BLOCK_THREADS = 128 | 64, 128, 256, 512
// atrex-param: KEY_TILE = 64 | 16, 32, 64, 128, 256
// atrex-param: HEADS_PER_THREAD = 1 | 1, 2, 4, 8
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
#endif
#ifndef KEY_TILE
#define KEY_TILE 64
#endif
#ifndef HEADS_PER_THREAD
#define HEADS_PER_THREAD 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 32 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS");
static_assert(KEY_TILE % 8 == 0 && KEY_TILE >= 8, "KEY_TILE");
static_assert(HEADS_PER_THREAD >= 1 && HEADS_PER_THREAD <= 16, "HEADS_PER_THREAD");

namespace {

using atrex::cand::Tensors;
using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::kF16;
using atrex::cand::kI32;

constexpr int kWarps = BLOCK_THREADS / 32;

template <bool FP16>
__device__ __forceinline__ float to_f(uint16_t h) {
  if constexpr (FP16)
    return __half2float(__ushort_as_half(h));
  else
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
template <bool FP16>
__device__ __forceinline__ uint16_t from_f(float f) {
  if constexpr (FP16)
    return __half_as_ushort(__float2half_rn(f));
  else
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
// 8 consecutive elements of a 16-byte word as floats.
template <bool FP16>
__device__ __forceinline__ void unpack8(const uint4& w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    f[2 * e] = to_f<FP16>(static_cast<uint16_t>(u[e] & 0xffffu));
    f[2 * e + 1] = to_f<FP16>(static_cast<uint16_t>(u[e] >> 16));
  }
}

struct Args {
  const uint16_t *q, *k, *v;
  const int32_t *tables, *lens;
  uint16_t* out;
  int hq, hkv, group, dim, bs, max_blocks;
  float scale;
};

// Shared memory of one block: q and the accumulators [G, d], the tile's scores/probabilities
// [G, KEY_TILE], the tile's (block, kv head) base offsets and positions, the running max, sum
// and this tile's rescale per head.
struct Smem {
  float *q, *acc, *p, *m, *l, *alpha;
  int64_t* base;
  int* pos;
  __device__ Smem(float* s, int g, int d) {
    q = s;
    acc = q + g * d;
    p = acc + g * d;
    m = p + g * KEY_TILE;
    l = m + g;
    alpha = l + g;
    // 8-byte alignment for base: the float count before it is rounded up to even.
    base = reinterpret_cast<int64_t*>(alpha + g + ((2 * g * d + g * KEY_TILE + 3 * g) & 1));
    pos = reinterpret_cast<int*>(base + KEY_TILE);
  }
};
size_t smem_bytes(int g, int d) {
  const size_t floats = 2 * size_t(g) * d + size_t(g) * KEY_TILE + 3 * size_t(g);
  return (floats + (floats & 1)) * 4 + KEY_TILE * (8 + 4);
}

// Scores of keys j0 .. j0 + nt - 1 for every head of the group: one thread per (key t, run of
// HEADS_PER_THREAD heads); consecutive threads take consecutive keys, so a warp's 16-byte loads
// of one d/8 chunk row are contiguous. The thread with the first run also records the key's
// cache offsets for the value pass.
template <bool FP16>
__device__ void tile_scores(const Args& a, const Smem& sm, const int32_t* table, int kvh,
                            int64_t j0, int nt) {
  const int runs = (a.group + HEADS_PER_THREAD - 1) / HEADS_PER_THREAD;
  for (int item = threadIdx.x; item < runs * nt; item += BLOCK_THREADS) {
    const int t = item % nt, g0 = (item / nt) * HEADS_PER_THREAD;
    const int64_t j = j0 + t;
    const int pos = static_cast<int>(j % a.bs);
    const int64_t base =
        (static_cast<int64_t>(table[j / a.bs]) * a.hkv + kvh) * a.dim * a.bs;
    if (g0 == 0) {
      sm.base[t] = base;
      sm.pos[t] = pos;
    }
    const uint4* kp = reinterpret_cast<const uint4*>(a.k + base) + pos;
    float dot[HEADS_PER_THREAD];
#pragma unroll
    for (int h = 0; h < HEADS_PER_THREAD; ++h) dot[h] = 0.f;
#pragma unroll 4
    for (int c = 0; c < a.dim / 8; ++c) {
      float kf[8];
      unpack8<FP16>(__ldg(kp + static_cast<int64_t>(c) * a.bs), kf);
#pragma unroll
      for (int h = 0; h < HEADS_PER_THREAD; ++h) {
        if (g0 + h < a.group) {
          const float* qr = sm.q + (g0 + h) * a.dim + c * 8;
#pragma unroll
          for (int e = 0; e < 8; ++e) dot[h] = fmaf(qr[e], kf[e], dot[h]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < HEADS_PER_THREAD; ++h)
      if (g0 + h < a.group) sm.p[(g0 + h) * KEY_TILE + t] = dot[h] * a.scale;
  }
}

// Online softmax step per head (a warp per head): new running max, the rescale of what came
// before (0 on the first tile, where the max is -inf), p = exp(s - max), running sum.
__device__ void tile_softmax(const Args& a, const Smem& sm, int nt) {
  const int lane = threadIdx.x & 31;
  for (int g = threadIdx.x >> 5; g < a.group; g += kWarps) {
    float* p = sm.p + g * KEY_TILE;
    float mx = -INFINITY;
    for (int t = lane; t < nt; t += 32) mx = fmaxf(mx, p[t]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float m_new = fmaxf(sm.m[g], mx);
    float sum = 0.f;
    for (int t = lane; t < nt; t += 32) {
      const float e = expf(p[t] - m_new);
      p[t] = e;
      sum += e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
      const float alpha = expf(sm.m[g] - m_new);
      sm.alpha[g] = alpha;
      sm.l[g] = sm.l[g] * alpha + sum;
      sm.m[g] = m_new;
    }
  }
}

// acc[g, i] = acc[g, i] * alpha[g] + sum_t p[g, t] * v(t, i): one thread per (head, dim),
// consecutive threads on consecutive dims. v_cache [blocks, Hkv, d, bs] holds a dim's positions
// contiguously, so 8 keys at a multiple-of-8 position of one block are one 16-byte load; the
// tile starts at a multiple of 8 keys, so with bs % 8 == 0 every full run of 8 qualifies.
template <bool FP16>
__device__ void tile_values(const Args& a, const Smem& sm, int nt, bool vec) {
  const int full = vec ? nt / 8 * 8 : 0;
  for (int item = threadIdx.x; item < a.group * a.dim; item += BLOCK_THREADS) {
    const int g = item / a.dim, i = item % a.dim;
    const float* p = sm.p + g * KEY_TILE;
    float acc = sm.acc[item] * sm.alpha[g];
    for (int t = 0; t < full; t += 8) {
      float vf[8];
      unpack8<FP16>(__ldg(reinterpret_cast<const uint4*>(a.v + sm.base[t] + int64_t(i) * a.bs +
                                                         sm.pos[t])),
                    vf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = fmaf(p[t + e], vf[e], acc);
    }
    for (int t = full; t < nt; ++t)
      acc = fmaf(p[t], to_f<FP16>(__ldg(a.v + sm.base[t] + int64_t(i) * a.bs + sm.pos[t])), acc);
    sm.acc[item] = acc;
  }
}

template <bool FP16>
__global__ void __launch_bounds__(BLOCK_THREADS) paged_decode_kernel(Args a) {
  extern __shared__ float4 smem_raw[];
  const Smem sm(reinterpret_cast<float*>(smem_raw), a.group, a.dim);
  const int kvh = blockIdx.x, s = blockIdx.y;
  int64_t n = a.lens[s] > 0 ? a.lens[s] : 0;
  if (n > int64_t(a.max_blocks) * a.bs) n = int64_t(a.max_blocks) * a.bs;
  const int64_t head0 = int64_t(s) * a.hq + int64_t(kvh) * a.group;
  const uint16_t* q = a.q + head0 * a.dim;
  for (int i = threadIdx.x; i < a.group * a.dim; i += BLOCK_THREADS) {
    sm.q[i] = to_f<FP16>(q[i]);
    sm.acc[i] = 0.f;
  }
  for (int g = threadIdx.x; g < a.group; g += BLOCK_THREADS) {
    sm.m[g] = -INFINITY;
    sm.l[g] = 0.f;
  }
  __syncthreads();
  const int32_t* table = a.tables + int64_t(s) * a.max_blocks;
  const bool vec = a.bs % 8 == 0;
  for (int64_t j0 = 0; j0 < n; j0 += KEY_TILE) {
    const int nt = static_cast<int>(n - j0 < KEY_TILE ? n - j0 : KEY_TILE);
    tile_scores<FP16>(a, sm, table, kvh, j0, nt);
    __syncthreads();
    tile_softmax(a, sm, nt);
    __syncthreads();
    tile_values<FP16>(a, sm, nt, vec);
    __syncthreads();
  }
  uint16_t* out = a.out + head0 * a.dim;
  for (int i = threadIdx.x; i < a.group * a.dim; i += BLOCK_THREADS) {
    const int g = i / a.dim;
    out[i] = from_f<FP16>(n > 0 ? sm.acc[i] / sm.l[g] : 0.f);
  }
}

template <bool FP16>
int run_kernel(const Args& a, int seqs, cudaStream_t s) {
  const size_t smem = smem_bytes(a.group, a.dim);
  // Opt in once per kernel to more than 48 KiB of dynamic shared memory (the first call is never
  // under stream capture: it is a correctness call).
  static size_t opted_in = 48 * 1024;
  if (smem > opted_in) {
    const cudaError_t e = cudaFuncSetAttribute(
        paged_decode_kernel<FP16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(smem));
    if (e != cudaSuccess)
      return fail("paged_attention_decode: %zu bytes of shared memory for a group of %d heads: %s",
                  smem, a.group, cudaGetErrorString(e));
    opted_in = smem;
  }
  paged_decode_kernel<FP16><<<dim3(a.hkv, seqs), BLOCK_THREADS, smem, s>>>(a);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("paged_attention_decode: %s", cudaGetErrorString(err));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* query = atrex_input(launch, "query");
  const bool fp16 = is(query, kF16);
  const auto dt = fp16 ? kF16 : kBF16;
  Tensors ts(launch, "paged_attention_decode");
  query = ts.input("query", dt, 3);                            // [B, Hq, d]
  const DLTensor* kc = ts.input("k_cache", dt, 5);             // [blocks, Hkv, d/8, bs, 8]
  const DLTensor* vc = ts.input("v_cache", dt, 4);             // [blocks, Hkv, d, bs]
  const DLTensor* tables = ts.input("block_tables", kI32, 2);  // [B, max_blocks]
  const DLTensor* lens = ts.input("seq_lens", kI32, 1);        // [B]
  const DLTensor* out = ts.output("out", dt, 3);               // [B, Hq, d]
  if (!ts.ok() || !ts.same_dims(query, out) || !ts.dim_is(kc, 4, 8) ||
      !ts.dim_is(kc, 2, query->shape[2] / 8) || !ts.dim_is(vc, 2, query->shape[2]) ||
      !ts.dim_is(tables, 0, query->shape[0]) || !ts.dim_is(lens, 0, query->shape[0]))
    return ts.failed();
  const int64_t seqs = query->shape[0], hq = query->shape[1], hkv = vc->shape[1],
                dim = query->shape[2];
  if (hkv < 1 || hq % hkv != 0 || dim % 8 != 0 || dim > 4096)
    return fail("paged_attention_decode: %lld query heads over %lld kv heads, head dim %lld",
                static_cast<long long>(hq), static_cast<long long>(hkv),
                static_cast<long long>(dim));
  if (seqs == 0 || hq == 0) return 0;
  if (seqs > 65535 || hkv > 0x7fffffff)
    return fail("paged_attention_decode: %lld sequences is too many for the grid",
                static_cast<long long>(seqs));
  if (!aligned(kc->data, 16) || !aligned(vc->data, 16))
    return fail("paged_attention_decode: caches not 16-byte aligned");
  Args a{static_cast<const uint16_t*>(query->data),
         static_cast<const uint16_t*>(kc->data),
         static_cast<const uint16_t*>(vc->data),
         static_cast<const int32_t*>(tables->data),
         static_cast<const int32_t*>(lens->data),
         static_cast<uint16_t*>(out->data),
         static_cast<int>(hq),
         static_cast<int>(hkv),
         static_cast<int>(hq / hkv),
         static_cast<int>(dim),
         static_cast<int>(vc->shape[3]),
         static_cast<int>(tables->shape[1]),
         static_cast<float>(1.0 / sqrt(static_cast<double>(dim)))};
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  return fp16 ? run_kernel<true>(a, static_cast<int>(seqs), s)
              : run_kernel<false>(a, static_cast<int>(seqs), s);
}
