// atrex-template: group_fma
// atrex-description: GQA-grouped flash attention on CUDA cores (fp32 FMA), the flash-decoding design: a CTA per (Q_TOKENS query tokens of one sequence, kv head) holds every query head of the group as rows (so each K/V byte of the paged cache is read once per group), THREADS_PER_ROW threads per row each owning an interleaved slice of the head dim; KEY_TILE keys per step gathered through the block table into shared memory by 16-byte loads, scores reduced across the row's threads by shuffles, online softmax in registers with exp2, causal mask per row; when the grid is far below the SM count (decode and short batches) each CTA's key range is split in up to MAX_SPLITS parts whose (max, sum, partial output) a second kernel merges
// atrex-param: THREADS_PER_ROW = 8 | 2, 4, 8, 16
// atrex-param: KEY_TILE = 32 | 16, 32, 64
// atrex-param: Q_TOKENS = 4 | 1, 2, 4, 8, 16
// atrex-param: MAX_SPLITS = 8 | 1, 4, 8, 16
#ifndef THREADS_PER_ROW
#define THREADS_PER_ROW 8
#endif
#ifndef KEY_TILE
#define KEY_TILE 32
#endif
#ifndef Q_TOKENS
#define Q_TOKENS 4
#endif
#ifndef MAX_SPLITS
#define MAX_SPLITS 8
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(THREADS_PER_ROW == 2 || THREADS_PER_ROW == 4 || THREADS_PER_ROW == 8 ||
                  THREADS_PER_ROW == 16,
              "THREADS_PER_ROW: a power of two dividing a warp");
static_assert(KEY_TILE >= 8 && KEY_TILE <= 64, "KEY_TILE: scores live in registers");
static_assert(Q_TOKENS >= 1 && Q_TOKENS <= 64, "Q_TOKENS");
static_assert(MAX_SPLITS >= 1 && MAX_SPLITS <= 64, "MAX_SPLITS");

namespace {

using atrex::cand::Tensors;
using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kI32;

constexpr int kTpr = THREADS_PER_ROW;
constexpr int kMaxThreads = 512;
constexpr int kMaxRows = kMaxThreads / kTpr;

// A compiled head-dim width padded so that every thread of a row owns whole bf16 pairs.
__host__ __device__ constexpr int padded(int d) { return (d + 2 * kTpr - 1) / (2 * kTpr) * (2 * kTpr); }

struct Args {
  const __nv_bfloat16 *q, *k, *v;
  const int32_t *cu_q, *used_k, *table;
  __nv_bfloat16* out;
  float* part_o;    // [splits, T, Hq, d] unnormalised partial outputs (splits > 1)
  float2* part_ml;  // [splits, T, Hq] (running max in log2 units, sum)
  int num_seqs, tokens, hq, hkv, group, dim, bs, max_blocks, splits;
  int qblocks;  // q blocks in the grid: T / rows per block + num_seqs
  int q_tokens, heads_per_cta, head_blocks;  // a CTA's rows: q_tokens x heads_per_cta
  float scale_log2;                          // 1/sqrt(d) * log2(e)
};

// The sequence owning q block bx: sequence s's blocks start at cu_q[s] / qt + s.
__device__ int find_sequence(const int32_t* cu_q, int n, int bx, int qt) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu_q[mid] / qt + mid <= bx)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <int DT>
__global__ void __launch_bounds__(kMaxThreads) group_fma_kernel(Args a) {
  constexpr int D = padded(DT), kPairs = D / 2 / kTpr, kChunks = D / 8;
  extern __shared__ uint4 smem_raw[];
  __nv_bfloat162* kt = reinterpret_cast<__nv_bfloat162*>(smem_raw);  // [KEY_TILE][D / 2]
  __nv_bfloat162* vt = kt + KEY_TILE * D / 2;

  // blockIdx.x = (q block, kv head, head block) with the heads fastest; q blocks in reverse, so
  // the longest causal blocks start first.
  const int hy = a.hkv * a.head_blocks;
  const int qb = a.qblocks - 1 - static_cast<int>(blockIdx.x / hy);
  const int kvh = static_cast<int>(blockIdx.x % hy) / a.head_blocks;
  const int hb = static_cast<int>(blockIdx.x % hy) % a.head_blocks, split = blockIdx.y;
  const int s = find_sequence(a.cu_q, a.num_seqs, qb, a.q_tokens);
  const int q_start = a.cu_q[s], q_len = a.cu_q[s + 1] - q_start;
  const int p0 = (qb - (q_start / a.q_tokens + s)) * a.q_tokens;
  if (p0 >= q_len) return;
  const int used = a.used_k[s];
  const int n_kv = min(max(used, 0), a.max_blocks * a.bs);
  const bool causal = q_len == used;  // the reference's is_causal = (q_len == kv_len)
  const int n_q = min(a.q_tokens, q_len - p0);
  const int key_end = causal ? min(n_kv, p0 + n_q) : n_kv;
  const int n_tiles = (key_end + KEY_TILE - 1) / KEY_TILE;
  const int per = (n_tiles + a.splits - 1) / a.splits;
  const int t_begin = min(split * per, n_tiles), t_end = min(t_begin + per, n_tiles);
  const int32_t* table = a.table + int64_t(s) * a.max_blocks;

  // This thread's row: token p0 + i, query head kvh * G + g; lane u of the row's kTpr threads.
  const int row = threadIdx.x / kTpr, u = threadIdx.x % kTpr;
  const int i = row / a.heads_per_cta, g = hb * a.heads_per_cta + row % a.heads_per_cta;
  const bool live = i < n_q && g < a.group;
  const int pos = p0 + i;
  const int64_t out_row = int64_t(q_start + pos) * a.hq + int64_t(kvh) * a.group + g;
  float2 qv[kPairs], acc[kPairs];
#pragma unroll
  for (int c = 0; c < kPairs; ++c) {
    const int e = 2 * (u + kTpr * c);
    qv[c] = make_float2(0.f, 0.f);
    if (live && e < a.dim) {
      const float2 f = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(a.q + out_row * a.dim + e));
      qv[c] = make_float2(f.x * a.scale_log2, f.y * a.scale_log2);
    }
    acc[c] = make_float2(0.f, 0.f);
  }
  float m = -INFINITY, l = 0.f;

  for (int t = t_begin; t < t_end; ++t) {
    const int k0 = t * KEY_TILE;
    __syncthreads();  // the previous tile is consumed
    for (int c = threadIdx.x; c < KEY_TILE * kChunks; c += blockDim.x) {
      const int r = c / kChunks, ch = c % kChunks, j = k0 + r;
      uint4 kw = make_uint4(0, 0, 0, 0), vw = kw;
      if (j < key_end && ch * 8 < a.dim) {
        const int64_t slot = int64_t(table[j / a.bs]) * a.bs + j % a.bs;
        const int64_t off = (slot * a.hkv + kvh) * a.dim + ch * 8;
        kw = __ldg(reinterpret_cast<const uint4*>(a.k + off));
        vw = __ldg(reinterpret_cast<const uint4*>(a.v + off));
      }
      reinterpret_cast<uint4*>(kt)[r * kChunks + ch] = kw;
      reinterpret_cast<uint4*>(vt)[r * kChunks + ch] = vw;
    }
    __syncthreads();
    float sc[KEY_TILE];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < KEY_TILE; ++j) {
      float dot = 0.f;
#pragma unroll
      for (int c = 0; c < kPairs; ++c) {
        const float2 kf = __bfloat1622float2(kt[j * (D / 2) + u + kTpr * c]);
        dot = fmaf(qv[c].x, kf.x, fmaf(qv[c].y, kf.y, dot));
      }
#pragma unroll
      for (int o = kTpr / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const int key = k0 + j;
      sc[j] = key < key_end && (!causal || key <= pos) ? dot : -INFINITY;
      mx = fmaxf(mx, sc[j]);
    }
    const float m_new = fmaxf(m, mx);
    const float base = m_new == -INFINITY ? 0.f : m_new;  // a row masked so far stays 0
    const float alpha = exp2f(m - base);
    l *= alpha;
#pragma unroll
    for (int c = 0; c < kPairs; ++c) {
      acc[c].x *= alpha;
      acc[c].y *= alpha;
    }
#pragma unroll
    for (int j = 0; j < KEY_TILE; ++j) {
      const float p = exp2f(sc[j] - base);
      l += p;
#pragma unroll
      for (int c = 0; c < kPairs; ++c) {
        const float2 vf = __bfloat1622float2(vt[j * (D / 2) + u + kTpr * c]);
        acc[c].x = fmaf(p, vf.x, acc[c].x);
        acc[c].y = fmaf(p, vf.y, acc[c].y);
      }
    }
    m = m_new;
  }
  if (!live) return;
  if (a.splits == 1) {
    const float inv = l > 0.f ? 1.f / l : 0.f;  // no keys: zeros, as the reference
#pragma unroll
    for (int c = 0; c < kPairs; ++c) {
      const int e = 2 * (u + kTpr * c);
      if (e < a.dim)
        *reinterpret_cast<__nv_bfloat162*>(a.out + out_row * a.dim + e) =
            __floats2bfloat162_rn(acc[c].x * inv, acc[c].y * inv);
    }
  } else {
    const int64_t prow = int64_t(split) * a.tokens * a.hq + out_row;
#pragma unroll
    for (int c = 0; c < kPairs; ++c) {
      const int e = 2 * (u + kTpr * c);
      if (e < a.dim) *reinterpret_cast<float2*>(a.part_o + prow * a.dim + e) = acc[c];
    }
    if (u == 0) a.part_ml[prow] = make_float2(m, l);
  }
}

// out[t, h] = sum_r o_r 2^(m_r - M) / sum_r l_r 2^(m_r - M), M = max_r m_r; zeros when no split
// saw a key. A block per (token, head) row of the tokens of every sequence.
__global__ void merge_kernel(Args a) {
  const int64_t row = int64_t(a.cu_q[0]) * a.hq + blockIdx.x;
  if (row >= int64_t(a.cu_q[a.num_seqs]) * a.hq) return;
  const int64_t stride = int64_t(a.tokens) * a.hq;
  float mx = -INFINITY;
  for (int r = 0; r < a.splits; ++r) mx = fmaxf(mx, a.part_ml[r * stride + row].x);
  float den = 0.f;
  if (mx != -INFINITY)
    for (int r = 0; r < a.splits; ++r) {
      const float2 ml = a.part_ml[r * stride + row];
      den += ml.y * exp2f(ml.x - mx);
    }
  for (int c = threadIdx.x; c < a.dim; c += blockDim.x) {
    float num = 0.f;
    if (mx != -INFINITY)
      for (int r = 0; r < a.splits; ++r)
        num += a.part_o[(r * stride + row) * a.dim + c] * exp2f(a.part_ml[r * stride + row].x - mx);
    a.out[row * a.dim + c] = __float2bfloat16_rn(den > 0.f ? num / den : 0.f);
  }
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

// Scratch for the split partials, grown on demand and kept for later calls (it holds nothing
// between calls: every entry the merge reads is written by the same call's first kernel).
void* workspace(size_t bytes) {
  static void* ptr = nullptr;
  static size_t size = 0;
  if (bytes > size) {
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    size = 0;
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    size = bytes;
  }
  return ptr;
}

template <int DT>
int launch(Args a, cudaStream_t stream) {
  constexpr size_t smem = size_t(2) * KEY_TILE * padded(DT) * 2;
  static bool opted = false;
  if (!opted && smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        group_fma_kernel<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess)
      return fail("unified_attention: %zu bytes of shared memory: %s", smem, cudaGetErrorString(e));
    opted = true;
  }
  // A CTA's rows: the group's heads (at most kMaxRows of them), then as many of Q_TOKENS tokens
  // as fit in kMaxRows rows.
  a.heads_per_cta = a.group < kMaxRows ? a.group : kMaxRows;
  a.head_blocks = (a.group + a.heads_per_cta - 1) / a.heads_per_cta;
  a.q_tokens = Q_TOKENS;
  while (a.q_tokens > 1 && a.q_tokens * a.heads_per_cta > kMaxRows) a.q_tokens /= 2;
  const int threads = (a.q_tokens * a.heads_per_cta * kTpr + 31) / 32 * 32;
  const int64_t qblocks = int64_t(a.tokens) / a.q_tokens + a.num_seqs;
  const int64_t ctas = qblocks * a.hkv * a.head_blocks;
  int64_t splits = 1;
  if (MAX_SPLITS > 1 && ctas < 2 * int64_t(sm_count())) {
    splits = (2 * int64_t(sm_count()) + ctas - 1) / ctas;
    const int64_t tiles = (int64_t(a.max_blocks) * a.bs + KEY_TILE - 1) / KEY_TILE;
    splits = splits > MAX_SPLITS ? MAX_SPLITS : splits;
    splits = splits > tiles ? tiles : splits;
    if (splits > 1) {
      const size_t rows = size_t(splits) * a.tokens * a.hq;
      char* ws = static_cast<char*>(workspace(rows * (size_t(a.dim) * 4 + 8)));
      if (ws) {
        a.part_ml = reinterpret_cast<float2*>(ws);
        a.part_o = reinterpret_cast<float*>(ws + rows * 8);
      } else {
        splits = 1;
      }
    }
    if (splits < 1) splits = 1;
  }
  a.splits = static_cast<int>(splits);
  a.qblocks = static_cast<int>(qblocks);
  if (qblocks * a.hkv * a.head_blocks > 0x7fffffff)
    return fail("unified_attention: too large for the grid");
  group_fma_kernel<DT><<<dim3(static_cast<unsigned>(qblocks * a.hkv * a.head_blocks), a.splits),
                         threads, smem, stream>>>(a);
  if (a.splits > 1)
    merge_kernel<<<static_cast<unsigned>(int64_t(a.tokens) * a.hq), 128, 0, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("unified_attention: %s", cudaGetErrorString(err));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch_args) {
  Tensors ts(launch_args, "unified_attention");
  const DLTensor* q = ts.input("q", kBF16, 3);               // [T, Hq, d]
  const DLTensor* kc = ts.input("k_cache", kBF16, 4);        // [blocks, bs, Hkv, d]
  const DLTensor* vc = ts.input("v_cache", kBF16, 4);        // [blocks, bs, Hkv, d]
  const DLTensor* cu = ts.input("cu_seqlens_q", kI32, 1);    // [num_seqs + 1]
  const DLTensor* used = ts.input("seqused_k", kI32, 1);     // [num_seqs]
  const DLTensor* table = ts.input("block_table", kI32, 2);  // [num_seqs, max_blocks]
  const DLTensor* out = ts.output("out", kBF16, 3);          // [T, Hq, d]
  if (!ts.ok() || !ts.same_dims(q, out) || !ts.same_dims(kc, vc) ||
      !ts.dim_is(kc, 3, q->shape[2]) || !ts.dim_is(used, 0, cu->shape[0] - 1) ||
      !ts.dim_is(table, 0, cu->shape[0] - 1))
    return ts.failed();
  const int64_t tokens = q->shape[0], hq = q->shape[1], dim = q->shape[2], hkv = kc->shape[2];
  const int64_t seqs = cu->shape[0] - 1;
  if (hkv < 1 || hq % hkv != 0 || dim % 8 != 0 || dim > 256 || dim < 8)
    return fail("unified_attention: %lld query heads over %lld kv heads, head dim %lld (needs a "
                "multiple of 8 up to 256)",
                static_cast<long long>(hq), static_cast<long long>(hkv),
                static_cast<long long>(dim));
  if (seqs <= 0 || tokens == 0 || hq == 0) return 0;
  if (tokens > (int64_t(1) << 30))
    return fail("unified_attention: too large for the grid");
  if (!aligned(q->data, 16) || !aligned(kc->data, 16) || !aligned(vc->data, 16) ||
      !aligned(out->data, 4))
    return fail("unified_attention: tensors not 16-byte aligned");
  Args a{};
  a.q = static_cast<const __nv_bfloat16*>(q->data);
  a.k = static_cast<const __nv_bfloat16*>(kc->data);
  a.v = static_cast<const __nv_bfloat16*>(vc->data);
  a.cu_q = static_cast<const int32_t*>(cu->data);
  a.used_k = static_cast<const int32_t*>(used->data);
  a.table = static_cast<const int32_t*>(table->data);
  a.out = static_cast<__nv_bfloat16*>(out->data);
  a.num_seqs = static_cast<int>(seqs);
  a.tokens = static_cast<int>(tokens);
  a.hq = static_cast<int>(hq);
  a.hkv = static_cast<int>(hkv);
  a.group = static_cast<int>(hq / hkv);
  a.dim = static_cast<int>(dim);
  a.bs = static_cast<int>(kc->shape[1]);
  a.max_blocks = static_cast<int>(table->shape[1]);
  a.splits = 1;
  a.scale_log2 = static_cast<float>(1.4426950408889634 / sqrt(static_cast<double>(dim)));
  cudaStream_t stream = static_cast<cudaStream_t>(launch_args->stream);
  if (dim <= 64) return launch<64>(a, stream);
  if (dim <= 80) return launch<80>(a, stream);
  if (dim <= 128) return launch<128>(a, stream);
  if (dim <= 192) return launch<192>(a, stream);
  return launch<256>(a, stream);
}
