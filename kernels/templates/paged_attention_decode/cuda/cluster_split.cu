// atrex-template: cluster_split
// atrex-description: split-KV (flash-decoding) in one launch: a thread-block cluster of up to SPLITS blocks per (sequence, kv head) divides the context (at least MIN_SPLIT_KEYS keys per block; no split when sequences x kv heads already fill the GPU), each block runs the online softmax over its part for the whole GQA group (16-byte key/value loads of the legacy paged layout, KEY_TILE keys per step), then the blocks merge their (max, sum, accumulator) partials through distributed shared memory (sm_90 DSMEM), every block finishing a slice of the outputs; no workspace, no second kernel
// atrex-param: BLOCK_THREADS = 128 | 64, 128, 256, 512
// atrex-param: KEY_TILE = 32 | 16, 32, 64, 128
// atrex-param: SPLITS = 8 | 2, 4, 8
// atrex-param: MIN_SPLIT_KEYS = 16 | 8, 16, 32, 64, 128
// atrex-param: HEADS_PER_THREAD = 1 | 1, 2, 4, 8
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
#endif
#ifndef KEY_TILE
#define KEY_TILE 32
#endif
#ifndef SPLITS
#define SPLITS 8
#endif
#ifndef MIN_SPLIT_KEYS
#define MIN_SPLIT_KEYS 16
#endif
#ifndef HEADS_PER_THREAD
#define HEADS_PER_THREAD 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 32 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS");
static_assert(KEY_TILE % 8 == 0 && KEY_TILE >= 8, "KEY_TILE");
static_assert(SPLITS >= 1 && SPLITS <= 8, "SPLITS: a portable cluster holds at most 8 blocks");
static_assert(MIN_SPLIT_KEYS >= 1, "MIN_SPLIT_KEYS");
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

// Block `rank` of the cluster of (sequence s, kv head kvh) takes keys [rank * chunk, + chunk)
// (chunk a multiple of 8, so every tile starts on a run of 8 positions), leaves its unnormalised
// partial (m, l, acc) in shared memory, and after the cluster barrier every block merges a slice
// of the group's G * d outputs from all blocks' shared memory:
//   M = max_r m_r, out = sum_r acc_r e^(m_r - M) / sum_r l_r e^(m_r - M)  (zeros when no keys).
template <bool FP16>
__global__ void __launch_bounds__(BLOCK_THREADS) paged_decode_kernel(Args a, int splits) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ float4 smem_raw[];
  const Smem sm(reinterpret_cast<float*>(smem_raw), a.group, a.dim);
  const int rank = static_cast<int>(cluster.block_rank());
  const int kvh = blockIdx.y, s = blockIdx.z;
  int64_t n = a.lens[s] > 0 ? a.lens[s] : 0;
  if (n > int64_t(a.max_blocks) * a.bs) n = int64_t(a.max_blocks) * a.bs;
  const int64_t chunk = ((n + splits - 1) / splits + 7) / 8 * 8;
  const int64_t begin = rank * chunk < n ? rank * chunk : n;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
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
  for (int64_t j0 = begin; j0 < end; j0 += KEY_TILE) {
    const int nt = static_cast<int>(end - j0 < KEY_TILE ? end - j0 : KEY_TILE);
    tile_scores<FP16>(a, sm, table, kvh, j0, nt);
    __syncthreads();
    tile_softmax(a, sm, nt);
    __syncthreads();
    tile_values<FP16>(a, sm, nt, vec);
    __syncthreads();
  }
  // Every block's partial is complete and visible cluster-wide after this barrier.
  cluster.sync();
  uint16_t* out = a.out + head0 * a.dim;
  for (int i = rank * BLOCK_THREADS + threadIdx.x; i < a.group * a.dim;
       i += splits * BLOCK_THREADS) {
    const int g = i / a.dim;
    float mx = -INFINITY;
    for (int r = 0; r < splits; ++r) mx = fmaxf(mx, *cluster.map_shared_rank(sm.m + g, r));
    float num = 0.f, den = 0.f;
    if (mx != -INFINITY) {
      for (int r = 0; r < splits; ++r) {
        const float w = expf(*cluster.map_shared_rank(sm.m + g, r) - mx);  // 0 for empty parts
        num = fmaf(*cluster.map_shared_rank(sm.acc + i, r), w, num);
        den = fmaf(*cluster.map_shared_rank(sm.l + g, r), w, den);
      }
    }
    out[i] = from_f<FP16>(mx != -INFINITY ? num / den : 0.f);
  }
  // No block may leave (and free its shared memory) while another still reads it.
  cluster.sync();
}

int sm_count() {
  static int count = 0;
  if (count == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        count <= 0)
      count = 132;
  }
  return count;
}

// Blocks per (sequence, kv head): enough that each takes >= MIN_SPLIT_KEYS of the longest
// context the block table allows, at most SPLITS, and no more than it takes to give the GPU
// about two blocks per SM (sequences x kv heads blocks already do that on big batches).
int pick_splits(int64_t groups, int64_t max_keys) {
  int64_t splits = (max_keys + MIN_SPLIT_KEYS - 1) / MIN_SPLIT_KEYS;
  if (splits > SPLITS) splits = SPLITS;
  const int64_t fill = (2 * int64_t{sm_count()} + groups - 1) / groups;
  if (splits > fill) splits = fill;
  return splits < 1 ? 1 : static_cast<int>(splits);
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
  const int splits = pick_splits(int64_t(seqs) * a.hkv, int64_t(a.max_blocks) * a.bs);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(splits), static_cast<unsigned>(a.hkv),
                     static_cast<unsigned>(seqs));
  cfg.blockDim = dim3(BLOCK_THREADS, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t err = cudaLaunchKernelEx(&cfg, paged_decode_kernel<FP16>, a, splits);
  if (err == cudaSuccess) err = cudaGetLastError();
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
  if (seqs > 65535 || hkv > 65535)
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
