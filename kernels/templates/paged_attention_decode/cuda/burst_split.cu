// atrex-template: burst_split
// atrex-description: latency-first split-KV decode in one launch: a thread-block cluster of up to 8 blocks per (sequence, kv head) divides the context (at least MIN_SPLIT_KEYS keys per block, splits until the grid gives every SM two blocks); each block issues ALL of its keys' and values' 16-byte loads of the legacy paged layout at once (cp.async, up to KEY_TILE keys per burst, so a block waits for about two dependent memory round trips: the block table, then the cache) and computes scores (SUB_LANES lanes per dot product), softmax and P V for the whole GQA group from shared memory (K and V read once per group); the blocks merge their (max, sum, accumulator) partials through distributed shared memory (sm_90 DSMEM), each writing a slice of the outputs; no workspace, no second kernel
// atrex-param: BLOCK_THREADS = 128 | 128, 256, 512
// atrex-param: KEY_TILE = 64 | 32, 64
// atrex-param: SUB_LANES = 1 | 1, 4
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
#endif
#ifndef KEY_TILE
#define KEY_TILE 64
#endif
// Lanes per q.k dot product: 1 (a thread per (head, key)) or 4 (lanes i, i + 8, i + 16, i + 24
// of a warp share one, each every 4th 16-byte word, then two shuffles: a 4x shorter dependent
// FMA chain, for groups of several heads).
#ifndef SUB_LANES
#define SUB_LANES 1
#endif
// Fewest keys per block of a split (not a search parameter: 16, one cache block, measured best
// with the 8-block cluster on the suite's 128-key contexts).
#ifndef MIN_SPLIT_KEYS
#define MIN_SPLIT_KEYS 16
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
static_assert(KEY_TILE % 8 == 0 && KEY_TILE >= 8 && KEY_TILE <= 256, "KEY_TILE: runs of 8 keys");
static_assert(MIN_SPLIT_KEYS >= 8 && MIN_SPLIT_KEYS % 8 == 0, "MIN_SPLIT_KEYS: runs of 8 keys");
static_assert(SUB_LANES == 1 || SUB_LANES == 4,
              "SUB_LANES: 1 or 4 (a quarter warp per part keeps the item count whole)");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::kF16;
using atrex::cand::kI32;
using atrex::cand::Tensors;

constexpr int kWarps = BLOCK_THREADS / 32;
constexpr int kMaxSplits = 8;        // a portable cluster
constexpr int kSub = SUB_LANES;      // lanes per q.k dot product
constexpr int kSubSpan = 32 / kSub;  // lanes i, i + kSubSpan, ... share one

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
template <bool FP16>
__device__ __forceinline__ void unpack8(const uint4& w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    f[2 * e] = to_f<FP16>(static_cast<uint16_t>(u[e] & 0xffffu));
    f[2 * e + 1] = to_f<FP16>(static_cast<uint16_t>(u[e] >> 16));
  }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill the 16 bytes, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}

struct Args {
  const uint16_t *q, *k, *v;
  const int32_t *tables, *lens;
  uint16_t* out;
  int hq, hkv, group, dim, bs, max_blocks;
  int chunk;         // keys per block of the cluster (a multiple of 8)
  bool q_vec;        // query 16-byte aligned
  float scale_log2;  // 1/sqrt(d) * log2(e)
};

// Shared memory of one block (G = group, d = head dim, T = KEY_TILE):
//   ks [d/8][T][8] 16-bit  keys: the 16-byte word c of key t at (c * T + t) * 8
//   vs [T/8][d][8]         values: 8 consecutive keys of dim i at ((t / 8) * d + i) * 8
//   q  [G][d] 16-bit as stored, acc [G][d] fp32, p [G][T] fp32 scores then probabilities,
//   m, l, alpha [G] fp32 running max (log2 units), sum, this tile's rescale; tbl [T] int32 the
//   tile's block-table entries. Consecutive threads read consecutive 16-byte words of ks
//   (scores) and vs (values).
struct Smem {
  uint16_t *ks, *vs, *q;
  float *acc, *p, *m, *l, *alpha;
  int32_t* tbl;
  __device__ Smem(char* base, int g, int d) {
    ks = reinterpret_cast<uint16_t*>(base);
    vs = ks + size_t(KEY_TILE) * d;
    q = vs + size_t(KEY_TILE) * d;
    acc = reinterpret_cast<float*>(q + size_t(g) * d);  // d % 8 == 0: 16-byte aligned
    p = acc + g * d;
    m = p + g * KEY_TILE;
    l = m + g;
    alpha = l + g;
    tbl = reinterpret_cast<int32_t*>(alpha + g);
  }
};
size_t smem_bytes(int g, int d) {
  return size_t(KEY_TILE) * d * 2 * 2 + size_t(g) * d * 2 +
         (size_t(g) * d + size_t(g) * KEY_TILE + 3 * size_t(g) + KEY_TILE) * 4;
}

// One burst: keys j0 .. j0 + nt - 1 of the sequence into ks / vs (their blocks are in sm.tbl),
// zeros for the slots up to the next multiple of 8 (their probability is 0, their values finite).
template <bool FP16>
__device__ void load_tile(const Args& a, const Smem& sm, int kvh, int j0, int nt) {
  const int chunks = a.dim / 8, nt8 = (nt + 7) / 8 * 8;
  const int64_t head_off = int64_t(kvh) * a.dim * a.bs;  // (block, kv head) tile start in a block
  // Keys: item (c, t), t fastest: a block's 8-element words of one c are contiguous in memory.
  for (int it = threadIdx.x; it < chunks * nt8; it += BLOCK_THREADS) {
    const int c = it / nt8, t = it % nt8;
    const bool valid = t < nt;
    const uint16_t* src = a.k;
    if (valid) {
      const int j = j0 + t;
      const int64_t blk = sm.tbl[t];
      src = a.k + (blk * a.hkv * a.dim * a.bs + head_off) + (int64_t(c) * a.bs + j % a.bs) * 8;
    }
    cp_async16(sm.ks + (size_t(c) * KEY_TILE + t) * 8, src, valid);
  }
  // Values [block, Hkv, d, bs]: the 8 keys of a run (j0 + 8r ..) are contiguous for one dim when
  // they lie in one block at a multiple-of-8 position (bs % 8 == 0; j0 is a multiple of 8). A
  // partial last run (nt % 8 != 0) is read element by element, zeros past nt.
  for (int it = threadIdx.x; it < (nt8 / 8) * a.dim; it += BLOCK_THREADS) {
    const int r = it / a.dim, i = it % a.dim, t = r * 8;
    uint16_t* dst = sm.vs + (size_t(r) * a.dim + i) * 8;
    if (a.bs % 8 == 0 && t + 8 <= nt) {
      const int j = j0 + t;
      const int64_t blk = sm.tbl[t];
      cp_async16(dst, a.v + (blk * a.hkv * a.dim * a.bs + head_off) + int64_t(i) * a.bs + j % a.bs,
                 true);
    } else {
      for (int e = 0; e < 8; ++e) {
        uint16_t x = 0;
        if (t + e < nt) {
          const int j = j0 + t + e;
          const int64_t blk = sm.tbl[t + e];
          x = a.v[(blk * a.hkv * a.dim * a.bs + head_off) + int64_t(i) * a.bs + j % a.bs];
        }
        dst[e] = x;
      }
    }
  }
  cp_async_wait_all();
}

// The blocks of keys j0 .. j0 + KEY_TILE - 1 (clamped to the table row) into sm.tbl, async.
__device__ __forceinline__ void load_table(const Args& a, const Smem& sm, const int32_t* table,
                                           int j0) {
  const int max_keys = a.max_blocks * a.bs;
  if (max_keys <= 0) return;
  for (int t = threadIdx.x; t < KEY_TILE; t += BLOCK_THREADS) {
    const int j = min(j0 + t, max_keys - 1);
    cp_async4(sm.tbl + t, table + j / a.bs);
  }
}

// Block `rank` of the cluster of (sequence s, kv head kvh) takes keys [rank * chunk, + chunk),
// KEY_TILE at a time (online softmax across its tiles), leaves its unnormalised partial (m, l,
// acc) in shared memory; after the cluster barrier every block merges a slice of the group's
// G * d outputs from all blocks' shared memory:
//   M = max_r m_r, out = sum_r acc_r 2^(m_r - M) / sum_r l_r 2^(m_r - M)  (zeros when no keys).
// Dependent memory round trips before the math: one (q, the first tile's block-table entries
// and seq_lens together), then one for the tile's keys and values.
template <bool FP16>
__global__ void __launch_bounds__(BLOCK_THREADS) burst_decode_kernel(Args a, int splits) {
  namespace cg = cooperative_groups;
  extern __shared__ uint4 smem_raw[];
  const Smem sm(reinterpret_cast<char*>(smem_raw), a.group, a.dim);
  const int rank = static_cast<int>(blockIdx.x);  // the cluster spans gridDim.x == splits
  const int kvh = blockIdx.y, s = blockIdx.z;
  const int G = a.group, d = a.dim;
  const int64_t head0 = int64_t(s) * a.hq + int64_t(kvh) * G;
  const int32_t* table = a.tables + int64_t(s) * a.max_blocks;
  const int max_keys = a.max_blocks * a.bs;
  const int begin0 = min(rank * a.chunk, max_keys);

  // Issued together: the group's q rows (raw), the first tile's table entries, seq_lens[s].
  const uint16_t* q = a.q + head0 * d;
  if (a.q_vec) {
    for (int it = threadIdx.x; it < G * d / 8; it += BLOCK_THREADS)
      cp_async16(sm.q + it * 8, q + it * 8, true);
  } else {
    for (int it = threadIdx.x; it < G * d; it += BLOCK_THREADS) sm.q[it] = q[it];
  }
  load_table(a, sm, table, begin0);
  int n = a.lens[s];
  for (int it = threadIdx.x; it < G * d; it += BLOCK_THREADS) sm.acc[it] = 0.f;
  for (int g = threadIdx.x; g < G; g += BLOCK_THREADS) {
    sm.m[g] = -INFINITY;
    sm.l[g] = 0.f;
  }
  n = n < 0 ? 0 : (n > max_keys ? max_keys : n);
  const int begin = min(begin0, n), end = min(begin0 + a.chunk, n);
  cp_async_wait_all();
  __syncthreads();  // q, the table entries, acc and m / l are in place

  for (int j0 = begin; j0 < end; j0 += KEY_TILE) {
    const int nt = min(KEY_TILE, end - j0), nt8 = (nt + 7) / 8 * 8;
    if (j0 != begin0) {  // a later tile: its table entries first
      load_table(a, sm, table, j0);
      cp_async_wait_all();
      __syncthreads();
    }
    load_tile<FP16>(a, sm, kvh, j0, nt);
    __syncthreads();  // the tile is in place
    // Scores (log2 units) for (head g, key t), t fastest: kSub lanes share a dot product (each
    // every kSub-th 16-byte word, then log2(kSub) shuffles), so the dependent FMA chain is
    // d / kSub long; q rows broadcast. Slots past nt get -inf. The trip
    // count is the same for every lane of a warp (the shuffles need the whole warp).
    for (int base = 0; base < G * nt8 * kSub; base += BLOCK_THREADS) {
      // Lane kSubSpan * sub + i of a warp: key item kSubSpan * warp + i, words c = sub,
      // sub + kSub, ...: each run of kSubSpan lanes reads consecutive keys' words (contiguous
      // bytes, no bank conflict). kSub = 1: item = it, a thread per (head, key).
      const int it = base + threadIdx.x, sub = (it & 31) / kSubSpan;
      const int item = (it >> 5) * kSubSpan + (it & (kSubSpan - 1));
      const int g = item / nt8, t = item % nt8;
      const bool active = it < G * nt8 * kSub;
      float dot = 0.f;
      if (active && t < nt) {
        const uint16_t* qr = sm.q + g * d;
#pragma unroll 2
        for (int c = sub; c < d / 8; c += kSub) {
          float kf[8], qf[8];
          unpack8<FP16>(*reinterpret_cast<const uint4*>(sm.ks + (size_t(c) * KEY_TILE + t) * 8),
                        kf);
          unpack8<FP16>(*reinterpret_cast<const uint4*>(qr + c * 8), qf);
#pragma unroll
          for (int e = 0; e < 8; ++e) dot = fmaf(qf[e], kf[e], dot);
        }
      }
#pragma unroll
      for (int o = kSubSpan; o < 32; o <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (active && sub == 0) sm.p[g * KEY_TILE + t] = t < nt ? dot * a.scale_log2 : -INFINITY;
    }
    __syncthreads();
    // Online softmax step, a warp per head: new max, rescale of the earlier tiles, p = 2^(s - m).
    const int lane = threadIdx.x & 31;
    for (int g = threadIdx.x >> 5; g < G; g += kWarps) {
      float* p = sm.p + g * KEY_TILE;
      float mx = -INFINITY;
      for (int t = lane; t < nt; t += 32) mx = fmaxf(mx, p[t]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[g];
      const float m_new = fmaxf(m_old, mx);  // finite: the tile has nt >= 1 keys
      float sum = 0.f;
      for (int t = lane; t < nt8; t += 32) {
        const float e = t < nt ? exp2f(p[t] - m_new) : 0.f;
        p[t] = e;
        sum += e;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.f : exp2f(m_old - m_new);
        sm.alpha[g] = alpha;
        sm.l[g] = sm.l[g] * alpha + sum;
        sm.m[g] = m_new;
      }
    }
    __syncthreads();
    // acc[g, i] = acc[g, i] * alpha[g] + sum_t p[g, t] v(t, i), i fastest (vs words contiguous).
    for (int it = threadIdx.x; it < G * d; it += BLOCK_THREADS) {
      const int g = it / d, i = it % d;
      const float* p = sm.p + g * KEY_TILE;
      float acc = sm.acc[it] * sm.alpha[g];
      for (int r = 0; r < nt8 / 8; ++r) {
        float vf[8];
        unpack8<FP16>(*reinterpret_cast<const uint4*>(sm.vs + (size_t(r) * d + i) * 8), vf);
        const float4 p0 = *reinterpret_cast<const float4*>(p + r * 8);
        const float4 p1 = *reinterpret_cast<const float4*>(p + r * 8 + 4);
        acc = fmaf(p0.x, vf[0], acc);
        acc = fmaf(p0.y, vf[1], acc);
        acc = fmaf(p0.z, vf[2], acc);
        acc = fmaf(p0.w, vf[3], acc);
        acc = fmaf(p1.x, vf[4], acc);
        acc = fmaf(p1.y, vf[5], acc);
        acc = fmaf(p1.z, vf[6], acc);
        acc = fmaf(p1.w, vf[7], acc);
      }
      sm.acc[it] = acc;
    }
    __syncthreads();  // the next tile overwrites ks / vs / p / tbl
  }

  uint16_t* out = a.out + head0 * d;
  if (splits == 1) {
    for (int it = threadIdx.x; it < G * d; it += BLOCK_THREADS) {
      const float l = sm.l[it / d];
      out[it] = from_f<FP16>(l > 0.f ? sm.acc[it] / l : 0.f);
    }
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  // Every block's partial is complete and visible cluster-wide after this barrier.
  cluster.sync();
  for (int it = rank * BLOCK_THREADS + threadIdx.x; it < G * d; it += splits * BLOCK_THREADS) {
    const int g = it / d;
    float mr[kMaxSplits];
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r) {
      mr[r] = r < splits ? *cluster.map_shared_rank(sm.m + g, r) : -INFINITY;
      mx = fmaxf(mx, mr[r]);
    }
    float num = 0.f, den = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int r = 0; r < kMaxSplits; ++r) {
        if (r < splits) {
          const float w = exp2f(mr[r] - mx);  // 0 for an empty part (m = -inf)
          num = fmaf(*cluster.map_shared_rank(sm.acc + it, r), w, num);
          den = fmaf(*cluster.map_shared_rank(sm.l + g, r), w, den);
        }
      }
    }
    out[it] = from_f<FP16>(den > 0.f ? num / den : 0.f);
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

template <bool FP16>
int run_kernel(Args a, int seqs, cudaStream_t stream) {
  const size_t smem = smem_bytes(a.group, a.dim);
  if (smem > 227 * 1024)
    return fail(
        "paged_attention_decode: a group of %d heads of dim %d needs %zu bytes of shared "
        "memory (more than an SM has)",
        a.group, a.dim, smem);
  // Opt in once per kernel to more than 48 KiB of dynamic shared memory (the first call is never
  // under stream capture: it is a correctness call).
  static size_t opted_in = 48 * 1024;
  if (smem > opted_in) {
    const cudaError_t e =
        cudaFuncSetAttribute(burst_decode_kernel<FP16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
    if (e != cudaSuccess)
      return fail("paged_attention_decode: %zu bytes of shared memory: %s", smem,
                  cudaGetErrorString(e));
    opted_in = smem;
  }
  // Blocks per (sequence, kv head): each takes >= MIN_SPLIT_KEYS of the longest context the block
  // table allows, at most a portable cluster, and no more than it takes to give every SM about
  // two blocks (sequences x kv heads already do that on big batches).
  const int64_t groups = int64_t(seqs) * a.hkv, max_keys = int64_t(a.max_blocks) * a.bs;
  int64_t splits = (max_keys + MIN_SPLIT_KEYS - 1) / MIN_SPLIT_KEYS;
  const int64_t fill = (2 * int64_t(sm_count()) + groups - 1) / groups;
  splits = splits > fill ? fill : splits;
  splits = splits > kMaxSplits ? kMaxSplits : splits;
  splits = splits < 1 ? 1 : splits;
  const int64_t chunk = ((max_keys + splits - 1) / splits + 7) / 8 * 8;
  if (chunk > 0x3fffffff) return fail("paged_attention_decode: context too long");
  a.chunk = static_cast<int>(chunk);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(splits), static_cast<unsigned>(a.hkv),
                     static_cast<unsigned>(seqs));
  cfg.blockDim = dim3(BLOCK_THREADS, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t err =
      cudaLaunchKernelEx(&cfg, burst_decode_kernel<FP16>, a, static_cast<int>(splits));
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
      !ts.dim_is(kc, 3, vc->shape[3]) || !ts.dim_is(kc, 1, vc->shape[1]) ||
      !ts.dim_is(tables, 0, query->shape[0]) || !ts.dim_is(lens, 0, query->shape[0]))
    return ts.failed();
  const int64_t seqs = query->shape[0], hq = query->shape[1], hkv = vc->shape[1],
                dim = query->shape[2], bs = vc->shape[3], max_blocks = tables->shape[1];
  if (hkv < 1 || hq % hkv != 0 || dim % 8 != 0 || dim < 8 || dim > 1024)
    return fail("paged_attention_decode: %lld query heads over %lld kv heads, head dim %lld",
                static_cast<long long>(hq), static_cast<long long>(hkv),
                static_cast<long long>(dim));
  if (seqs == 0 || hq == 0) return 0;
  if (seqs > 65535 || hkv > 65535 || bs < 1 || max_blocks * bs > 0x3fffffff)
    return fail("paged_attention_decode: %lld sequences x %lld kv heads is too large for the grid",
                static_cast<long long>(seqs), static_cast<long long>(hkv));
  if (!aligned(kc->data, 16) || !aligned(vc->data, 16))
    return fail("paged_attention_decode: caches not 16-byte aligned");
  Args a{};
  a.q = static_cast<const uint16_t*>(query->data);
  a.k = static_cast<const uint16_t*>(kc->data);
  a.v = static_cast<const uint16_t*>(vc->data);
  a.tables = static_cast<const int32_t*>(tables->data);
  a.lens = static_cast<const int32_t*>(lens->data);
  a.out = static_cast<uint16_t*>(out->data);
  a.hq = static_cast<int>(hq);
  a.hkv = static_cast<int>(hkv);
  a.group = static_cast<int>(hq / hkv);
  a.dim = static_cast<int>(dim);
  a.bs = static_cast<int>(bs);
  a.max_blocks = static_cast<int>(max_blocks);
  a.q_vec = aligned(query->data, 16);
  a.scale_log2 = static_cast<float>(1.4426950408889634 / sqrt(static_cast<double>(dim)));
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  return fp16 ? run_kernel<true>(a, static_cast<int>(seqs), s)
              : run_kernel<false>(a, static_cast<int>(seqs), s);
}
