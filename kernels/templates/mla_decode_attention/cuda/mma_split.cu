// atrex-template: mma_split
// atrex-description: absorbed-MLA decode on bf16 tensor cores in one launch: a block per (sequence, 16 query heads, split), the 16 heads are the M dimension of mma.sync m16n8k16 (fp32 accumulators) for Q K^T over the whole latent + rope key (the WARPS warps share the key dim, partial scores added in shared memory) and for P V (each warp 512 / WARPS of the latent value columns); each block loads KEY_TILE latent rows per burst (16-byte cp.async, every load of a tile in flight at once) and takes every split-th tile of the sequence (any seq_lens), the splits of a (sequence, head run) form a thread-block cluster (up to MAX_SPLITS blocks) that merges the (max, sum, accumulator) partials through distributed shared memory (sm_90 DSMEM); no workspace, no second kernel
// atrex-param: KEY_TILE = 32 | 16, 32, 64
// atrex-param: WARPS = 4 | 4, 8
#ifndef KEY_TILE
#define KEY_TILE 32
#endif
// Blocks per cluster at most: 8 (portable) or 16 (non-portable cluster size). Not a search
// parameter (each listed one adds compile corners to CI); a rendering may still set it.
#ifndef MAX_SPLITS
#define MAX_SPLITS 8
#endif
#ifndef WARPS
#define WARPS 4
#endif
// 1 (not yet run on a GPU): the block's first tile is loaded before seq_lens arrives, at the
// rows it has when every sequence holds rows / batch of them (the common case); it is used only
// when seq_lens confirm that (same first row, same length), else reloaded. Saves the round trip
// of the lens. 0: load after the lens (as measured on the H200). Not a search parameter.
#ifndef SPECULATE
#define SPECULATE 0
#endif

#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(KEY_TILE == 16 || KEY_TILE == 32 || KEY_TILE == 64, "KEY_TILE: 16, 32 or 64 keys");
static_assert(MAX_SPLITS == 8 || MAX_SPLITS == 16,
              "MAX_SPLITS: a portable (8) or non-portable (16) cluster");
static_assert(WARPS == 4 || WARPS == 8,
              "WARPS: 4 or 8 (each a quarter or an eighth of the value dim)");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kI32;
using atrex::cand::Tensors;

constexpr int kWarps = WARPS, kThreads = 32 * kWarps, kHeads = 16;
constexpr int kMaxDk = 576, kMaxDv = 512;
// Shared-memory rows: the key dim padded to 576 + 8 bf16 (16-byte skew: the 8 rows of an
// ldmatrix 8x8 load fall in distinct banks).
constexpr int kRow = kMaxDk + 8;
constexpr int kPRow = KEY_TILE + 8;       // probabilities [16][KEY_TILE] bf16, same skew
constexpr int kDvWarp = kMaxDv / kWarps;  // value dims per warp in P V
constexpr int kNT = KEY_TILE / 8;         // n8 tiles of the scores
constexpr size_t kQBytes = size_t(kHeads) * kRow * 2;
constexpr size_t kKvBytes = size_t(KEY_TILE) * kRow * 2;
constexpr size_t kAccBytes = size_t(kHeads) * kMaxDv * 4;  // the merge's accumulators (fp32)
constexpr size_t kTileBytes = kKvBytes > kAccBytes ? kKvBytes : kAccBytes;  // acc reuses it
constexpr size_t kSpBytes = size_t(kWarps) * kHeads * KEY_TILE * 4;
constexpr size_t kPBytes = size_t(kHeads) * kPRow * 2;
constexpr size_t kSmem = kQBytes + kTileBytes + kSpBytes + kPBytes + 3 * kHeads * 4 + 16 * 4;

struct Args {
  const __nv_bfloat16* q;   // [B, H, dk]
  const __nv_bfloat16* kv;  // [rows, 1, dk]
  const int32_t* lens;      // [B]
  __nv_bfloat16* out;       // [B, H, dv]
  int batch, heads, dk, dv, rows;
  int mean;          // rows / batch: the length every sequence has when all are equal
  float scale_log2;  // 1/sqrt(dk) * log2(e)
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill the 16 bytes, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
// c += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Rows row .. row + nt - 1 of kv_cache into the tile buffer (16-byte words up to kc, zeros past
// the key dim and for the slots nt .. KEY_TILE - 1). Each thread writes the same shared-memory
// words on every call (so its own cp.async.wait orders a reload after an earlier copy).
__device__ __forceinline__ void load_rows(const Args& a, __nv_bfloat16* kvs, int64_t row, int nt,
                                          int kc, int dk8) {
  for (int it = threadIdx.x; it < KEY_TILE * kc; it += kThreads) {
    const int t = it / kc, ch = it % kc;
    const bool valid = t < nt && ch < dk8 && row + t < a.rows;
    const __nv_bfloat16* src = valid ? a.kv + (row + t) * a.dk + ch * 8 : a.kv;
    cp_async16(kvs + t * kRow + ch * 8, src, valid);
  }
}

// Block (split `rank`, head run ht, sequence b): key tiles rank, rank + splits, ... of the
// sequence (rows row0 + j of kv_cache, row0 = sum(seq_lens[:b])), online softmax across them;
// the unnormalised partial (m, l, acc) of every block of the cluster is merged after a cluster
// barrier:  M = max_r m_r, out = sum_r acc_r 2^(m_r - M) / sum_r l_r 2^(m_r - M) (0: no keys).
// Fragment layouts (m16n8k16): a thread (g = lane / 4, tq = lane % 4) holds accumulator
// elements e of rows g + 8 * (e / 2), columns 2 * tq + e % 2 of each n8 tile.
__global__ void __launch_bounds__(kThreads) mla_mma_kernel(Args a, int splits) {
  namespace cg = cooperative_groups;
  extern __shared__ uint4 smem_raw[];
  char* base = reinterpret_cast<char*>(smem_raw);
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(base);
  __nv_bfloat16* kvs = reinterpret_cast<__nv_bfloat16*>(base + kQBytes);
  float* accs = reinterpret_cast<float*>(base + kQBytes);             // after the last tile only
  float* sp = reinterpret_cast<float*>(base + kQBytes + kTileBytes);  // [warp][16][KEY_TILE]
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(base + kQBytes + kTileBytes + kSpBytes);
  float* ms = reinterpret_cast<float*>(base + kQBytes + kTileBytes + kSpBytes + kPBytes);
  float* ls = ms + kHeads;
  float* alphas = ls + kHeads;
  int* red = reinterpret_cast<int*>(alphas + kHeads);  // [kWarps] the warps' parts of row0

  const int rank = static_cast<int>(blockIdx.x), ht = blockIdx.y, b = blockIdx.z;
  const int h0 = ht * kHeads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int dk8 = a.dk / 8, kc = (a.dk + 15) / 16 * 2;  // 16-byte words: real, padded to k16
  const int ksteps = kc / 2;

  // Issued together: the 16 q rows (zeros past the heads and the key dim), seq_lens.
  for (int it = threadIdx.x; it < kHeads * kc; it += kThreads) {
    const int r = it / kc, ch = it % kc;
    const bool valid = h0 + r < a.heads && ch < dk8;
    const __nv_bfloat16* src = valid ? a.q + (int64_t(b) * a.heads + h0 + r) * a.dk + ch * 8 : a.q;
    cp_async16(qs + r * kRow + ch * 8, src, valid);
  }
  // The speculative first tile (tile `rank`, rows b * mean + ...), issued with q.
  const int64_t spec_row0 = int64_t(b) * a.mean;
  const bool spec = SPECULATE && rank * KEY_TILE < a.mean;
  if (spec) {
    const int nt = min(KEY_TILE, a.mean - rank * KEY_TILE);
    load_rows(a, kvs, spec_row0 + int64_t(rank) * KEY_TILE, nt, kc, dk8);
  }
  int part = 0;
  for (int i = threadIdx.x; i < b; i += kThreads) part += max(a.lens[i], 0);
  int n = max(a.lens[b], 0);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
  if (lane == 0) red[warp] = part;
  for (int r = threadIdx.x; r < kHeads; r += kThreads) {
    ms[r] = -INFINITY;
    ls[r] = 0.f;
  }
  __syncthreads();
  int64_t row0 = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) row0 += red[w];
  // Rows past the cache (inconsistent seq_lens) are never read.
  if (row0 + n > a.rows) n = a.rows > row0 ? static_cast<int>(a.rows - row0) : 0;

  float o[kDvWarp / 8][4];
#pragma unroll
  for (int i = 0; i < kDvWarp / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;

  for (int ti = rank; ti * KEY_TILE < n; ti += splits) {
    const int j0 = ti * KEY_TILE;
    const int nt = min(KEY_TILE, n - j0);
    // The speculative copy is the right one when the lens say what it assumed: then the same
    // rows (and the same zero rows past nt) are already on their way.
    if (!(spec && ti == rank && row0 == spec_row0 && n == a.mean)) {
      if (spec && ti == rank) cp_async_wait_all();  // the guess landed before it is overwritten
      load_rows(a, kvs, row0 + j0, nt, kc, dk8);
    }
    cp_async_wait_all();
    __syncthreads();  // q (first tile) and this tile are in place

    // Partial scores: warp w takes the k16 steps w, w + kWarps, ... of the key dim.
    float sc[kNT][4];
#pragma unroll
    for (int i = 0; i < kNT; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
    for (int kk = warp; kk < ksteps; kk += kWarps) {
      uint32_t qa[4];
      ldmatrix_x4(qa, qs + ((lane & 7) + ((lane >> 3) & 1) * 8) * kRow + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int nn = 0; nn < KEY_TILE / 16; ++nn) {
        uint32_t kb[4];
        ldmatrix_x4(kb, kvs + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * kRow + kk * 16 +
                            ((lane >> 3) & 1) * 8);
        mma16816(sc[2 * nn], qa, kb[0], kb[1]);
        mma16816(sc[2 * nn + 1], qa, kb[2], kb[3]);
      }
    }
    float* spw = sp + warp * kHeads * KEY_TILE;
#pragma unroll
    for (int i = 0; i < kNT; ++i) {
      const int col = i * 8 + 2 * tq;
      *reinterpret_cast<float2*>(spw + g * KEY_TILE + col) = make_float2(sc[i][0], sc[i][1]);
      *reinterpret_cast<float2*>(spw + (g + 8) * KEY_TILE + col) = make_float2(sc[i][2], sc[i][3]);
    }
    __syncthreads();
    // Online softmax, warp w on rows (16 / kWarps) w ..: add the warps' parts, mask keys past nt,
    // new max, p = 2^(s - m) as bf16 (the A operand of P V), rescale of the earlier tiles.
    for (int r = warp * (kHeads / kWarps); r < (warp + 1) * (kHeads / kWarps); ++r) {
      constexpr int kPer = (KEY_TILE + 31) / 32;
      float s[kPer];
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int c = lane + 32 * u;
        float x = -INFINITY;
        if (c < KEY_TILE && c < nt) {
          x = 0.f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) x += sp[(w * kHeads + r) * KEY_TILE + c];
          x *= a.scale_log2;
        }
        s[u] = x;
        mx = fmaxf(mx, x);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_old = ms[r];
      const float m_new = fmaxf(m_old, mx);  // finite: the tile has nt >= 1 keys
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int c = lane + 32 * u;
        if (c < KEY_TILE) {
          const float p = c < nt ? exp2f(s[u] - m_new) : 0.f;
          const __nv_bfloat16 pb = __float2bfloat16_rn(p);
          ps[r * kPRow + c] = pb;
          sum += __bfloat162float(pb);  // the sum of what P V adds
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.f : exp2f(m_old - m_new);
        alphas[r] = alpha;
        ls[r] = ls[r] * alpha + sum;
        ms[r] = m_new;
      }
    }
    __syncthreads();
    // O = O * alpha + P V on this warp's value dims [warp * kDvWarp, + kDvWarp).
    const float a0 = alphas[g], a1 = alphas[g + 8];
#pragma unroll
    for (int i = 0; i < kDvWarp / 8; ++i) {
      o[i][0] *= a0;
      o[i][1] *= a0;
      o[i][2] *= a1;
      o[i][3] *= a1;
    }
    const int dbase = warp * kDvWarp;
    if (dbase < a.dv) {
#pragma unroll
      for (int kk = 0; kk < KEY_TILE / 16; ++kk) {
        uint32_t pa[4];
        ldmatrix_x4(pa,
                    ps + ((lane & 7) + ((lane >> 3) & 1) * 8) * kPRow + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int dn = 0; dn < kDvWarp / 16; ++dn) {
          if (dbase + dn * 16 < kc * 8) {  // value columns that are in shared memory
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, kvs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRow +
                                      dbase + dn * 16 + (lane >> 4) * 8);
            mma16816(o[2 * dn], pa, vb[0], vb[1]);
            mma16816(o[2 * dn + 1], pa, vb[2], vb[3]);
          }
        }
      }
    }
    __syncthreads();  // the next tile overwrites kvs, sp, ps
  }
  // A block without tiles (or whose guess went unused) may still have copies in flight into q
  // and the tile buffer, which the merge below reuses: every thread waits, then all meet.
  cp_async_wait_all();
  __syncthreads();

  __nv_bfloat16* out = a.out + (int64_t(b) * a.heads + h0) * a.dv;
  if (splits == 1) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = g + rr * 8;
      if (h0 + r >= a.heads) continue;
      const float l = ls[r];
      const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
      for (int i = 0; i < kDvWarp / 8; ++i) {
        const int col = warp * kDvWarp + i * 8 + 2 * tq;
        if (col < a.dv)  // dv is even
          *reinterpret_cast<__nv_bfloat162*>(out + int64_t(r) * a.dv + col) =
              __floats2bfloat162_rn(o[i][2 * rr] * inv, o[i][2 * rr + 1] * inv);
      }
    }
    return;
  }
  // The partial accumulators into shared memory (the tile buffer is free: the loop ended with
  // a barrier), then the cluster merge.
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = g + rr * 8;
#pragma unroll
    for (int i = 0; i < kDvWarp / 8; ++i) {
      const int col = warp * kDvWarp + i * 8 + 2 * tq;
      *reinterpret_cast<float2*>(accs + r * kMaxDv + col) =
          make_float2(o[i][2 * rr], o[i][2 * rr + 1]);
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's (m, l, acc) complete and visible cluster-wide
  // Per row r and block k the weight 2^(m_k - M) / sum_k' l_k' 2^(m_k' - M), in this block's
  // (free) score buffer; then each block finishes every splits-th pair of output columns.
  float* wts = sp;  // [16][MAX_SPLITS]
  if (threadIdx.x < kHeads) {
    const int r = threadIdx.x;
    float mk[MAX_SPLITS], lk[MAX_SPLITS];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < MAX_SPLITS; ++k) {
      mk[k] = k < splits ? *cluster.map_shared_rank(ms + r, k) : -INFINITY;
      lk[k] = k < splits ? *cluster.map_shared_rank(ls + r, k) : 0.f;
      mx = fmaxf(mx, mk[k]);
    }
    float den = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int k = 0; k < MAX_SPLITS; ++k) den = fmaf(lk[k], exp2f(mk[k] - mx), den);  // 0: empty
    }
#pragma unroll
    for (int k = 0; k < MAX_SPLITS; ++k)
      wts[r * MAX_SPLITS + k] = mx != -INFINITY && den > 0.f ? exp2f(mk[k] - mx) / den : 0.f;
  }
  __syncthreads();
  const int rows_here = min(kHeads, a.heads - h0), pairs = a.dv / 2;
  for (int it = rank * kThreads + threadIdx.x; it < rows_here * pairs; it += splits * kThreads) {
    const int r = it / pairs, col = (it % pairs) * 2;
    float2 acc = make_float2(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < MAX_SPLITS; ++k) {
      if (k < splits) {
        const float w = wts[r * MAX_SPLITS + k];
        const float2 v =
            *cluster.map_shared_rank(reinterpret_cast<float2*>(accs + r * kMaxDv + col), k);
        acc.x = fmaf(v.x, w, acc.x);
        acc.y = fmaf(v.y, w, acc.y);
      }
    }
    *reinterpret_cast<__nv_bfloat162*>(out + int64_t(r) * a.dv + col) =
        __floats2bfloat162_rn(acc.x, acc.y);
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

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors ts(launch, "mla_decode_attention");
  const DLTensor* q = ts.input("q", kBF16, 3);           // [B, H, r + rope]
  const DLTensor* kv = ts.input("kv_cache", kBF16, 3);   // [sum(seq_lens), 1, r + rope]
  const DLTensor* lens = ts.input("seq_lens", kI32, 1);  // [B]
  const DLTensor* out = ts.output("out", kBF16, 3);      // [B, H, r]
  if (!ts.ok() || !ts.dim_is(kv, 2, q->shape[2]) || !ts.dim_is(kv, 1, 1) ||
      !ts.dim_is(lens, 0, q->shape[0]) || !ts.dim_is(out, 0, q->shape[0]) ||
      !ts.dim_is(out, 1, q->shape[1]))
    return ts.failed();
  const int64_t batch = q->shape[0], heads = q->shape[1], dk = q->shape[2], dv = out->shape[2];
  if (dk % 8 != 0 || dk > kMaxDk || dv % 2 != 0 || dv > kMaxDv || dv > dk || dv < 2)
    return fail(
        "mla_decode_attention: key dim %lld (a multiple of 8 up to %d expected), value "
        "dim %lld (even, up to %d and the key dim)",
        static_cast<long long>(dk), kMaxDk, static_cast<long long>(dv), kMaxDv);
  if (batch == 0 || heads == 0) return 0;
  const int64_t runs = (heads + kHeads - 1) / kHeads;
  if (batch > 65535 || runs > 65535 || kv->shape[0] > 0x7fffffff)
    return fail("mla_decode_attention: batch %lld x %lld heads is too large for the grid",
                static_cast<long long>(batch), static_cast<long long>(heads));
  if (!aligned(q->data, 16) || !aligned(kv->data, 16) || !aligned(out->data, 4))
    return fail("mla_decode_attention: q / kv_cache not 16-byte aligned");
  Args a{};
  a.q = static_cast<const __nv_bfloat16*>(q->data);
  a.kv = static_cast<const __nv_bfloat16*>(kv->data);
  a.lens = static_cast<const int32_t*>(lens->data);
  a.out = static_cast<__nv_bfloat16*>(out->data);
  a.batch = static_cast<int>(batch);
  a.heads = static_cast<int>(heads);
  a.dk = static_cast<int>(dk);
  a.dv = static_cast<int>(dv);
  a.rows = static_cast<int>(kv->shape[0]);
  a.mean = static_cast<int>(kv->shape[0] / batch);
  a.scale_log2 = static_cast<float>(1.4426950408889634 / sqrt(static_cast<double>(dk)));
  // Opt in once to more than 48 KiB of dynamic shared memory (and, for 16-block clusters, the
  // non-portable cluster size); the first call is never under stream capture.
  static bool opted = false;
  if (!opted) {
    cudaError_t e = cudaFuncSetAttribute(
        mla_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
    if (e == cudaSuccess && MAX_SPLITS > 8)
      e = cudaFuncSetAttribute(mla_mma_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess)
      return fail("mla_decode_attention: %zu bytes of shared memory: %s", kSmem,
                  cudaGetErrorString(e));
    opted = true;
  }
  // Splits per (sequence, head run): one per KEY_TILE keys of the mean context (the host does not
  // read seq_lens; any lengths are covered, every block looping over its tiles), at most
  // MAX_SPLITS, and no more than it takes to give every SM about two blocks.
  const int64_t groups = runs * batch;
  const int64_t mean = (kv->shape[0] + batch - 1) / batch;
  int64_t splits = (mean + KEY_TILE - 1) / KEY_TILE;
  const int64_t fill = (2 * int64_t(sm_count()) + groups - 1) / groups;
  splits = splits > fill ? fill : splits;
  splits = splits > MAX_SPLITS ? MAX_SPLITS : splits;
  splits = splits < 1 ? 1 : splits;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(splits), static_cast<unsigned>(runs),
                     static_cast<unsigned>(batch));
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = static_cast<cudaStream_t>(launch->stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t err = cudaLaunchKernelEx(&cfg, mla_mma_kernel, a, static_cast<int>(splits));
  if (err == cudaSuccess) err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("mla_decode_attention: %s", cudaGetErrorString(err));
}
