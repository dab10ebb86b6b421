// atrex-template: flash_mma
// atrex-description: FlashAttention-2 on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulators) for varlen prefill without a mask: a CTA per (BLOCK_M query rows of one sequence, head), found on the device from cu_seqlens_q (no host sync); BLOCK_N-key tiles of K and V of the sequence (cu_seqlens_k) by 16-byte cp.async into a STAGES-deep shared-memory ring, ldmatrix fragments, online softmax in registers with exp2, the tail mask only on a sequence's last tile; when the grid is far below the SM count each CTA's key range is split in up to MAX_SPLITS parts whose (max, sum, partial output) a second kernel merges
// atrex-param: BLOCK_M = 64 | 16, 32, 64, 128
// atrex-param: BLOCK_N = 64 | 16, 32, 64, 128
// atrex-param: WARP_ROWS = 16 | 16, 32
// atrex-param: STAGES = 2 | 1, 2, 3
// atrex-param: MAX_SPLITS = 8 | 1, 2, 4, 8, 16
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef WARP_ROWS
#define WARP_ROWS 16
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef MAX_SPLITS
#define MAX_SPLITS 8
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_M % 16 == 0 && BLOCK_M >= 16 && BLOCK_M <= 256, "BLOCK_M: whole warps of 16 rows");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "BLOCK_N: pairs of 8-key mma tiles");
static_assert(WARP_ROWS == 16 || WARP_ROWS == 32, "WARP_ROWS: one or two m16 tiles per warp");
static_assert(STAGES >= 1 && STAGES <= 4, "STAGES");
static_assert(MAX_SPLITS >= 1 && MAX_SPLITS <= 64, "MAX_SPLITS");

namespace {

using atrex::cand::Tensors;
using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kI32;

// Rows per warp: WARP_ROWS (two m16 tiles reuse every K/V fragment twice) where the
// accumulators fit in registers (head dims up to 128) and BLOCK_M allows, else 16.
__host__ __device__ constexpr int mtiles_for(int d) {
  return WARP_ROWS == 32 && d <= 128 && BLOCK_M % 32 == 0 ? 2 : 1;
}
__host__ __device__ constexpr int threads_for(int d) { return BLOCK_M / (16 * mtiles_for(d)) * 32; }
// Q's mma fragments stay in registers for the whole key loop when they are few.
__host__ __device__ constexpr bool q_in_registers(int d) { return mtiles_for(d) * d <= 128; }
constexpr size_t kSmemLimit = 227 * 1024;

// Shared memory rows hold D (the head dim padded to 16) + 8 bf16: the 16-byte skew puts the 8
// rows of an ldmatrix 8x8 load in different banks.
__host__ __device__ constexpr size_t smem_bytes(int d, int stages) {
  return (size_t(BLOCK_M) + size_t(2) * stages * BLOCK_N) * (d + 8) * 2;
}
// The deepest pipeline up to STAGES that fits the shared memory of an SM.
__host__ __device__ constexpr int stages_for(int d) {
  int s = STAGES;
  while (s > 1 && smem_bytes(d, s) > kSmemLimit) --s;
  return s;
}

struct Args {
  const __nv_bfloat16 *q, *k, *v;
  const int32_t *cu_q, *cu_k;
  __nv_bfloat16* out;
  float* part_o;   // [splits, T, Hq, d] unnormalised partial outputs (splits > 1)
  float2* part_ml; // [splits, T, Hq] (running max in log2 units, sum)
  int num_seqs, tokens, hq, dim, splits;
  float scale_log2;  // 1/sqrt(d) * log2(e)
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill the 16 bytes
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The sequence owning q block `bx`: sequence s's blocks start at cu_q[s] / BLOCK_M + s (each
// sequence gets ceil(q_len / BLOCK_M) blocks or one more), so the largest such s <= bx.
__device__ int find_sequence(const int32_t* cu_q, int n, int bx) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu_q[mid] / BLOCK_M + mid <= bx)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Tile `tile` of the sequence's keys into stage buffers ks/vs: row r is key k_start + tile *
// BLOCK_N + r of head h; chunks past the head dim and keys past n_keys are zero-filled (a zero
// key column times a zero q column stays 0, never NaN).
template <int D, int kThreads>
__device__ void load_kv(const Args& a, int k_start, int h, int tile, int n_keys,
                        __nv_bfloat16* ks, __nv_bfloat16* vs) {
  constexpr int kChunks = D / 8, kRow = D + 8;
  const int dchunks = a.dim / 8;
  for (int c = threadIdx.x; c < BLOCK_N * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const int j = tile * BLOCK_N + r;
    const bool valid = j < n_keys && ch < dchunks;
    int64_t off = 0;
    if (valid) off = (int64_t(k_start + j) * a.hq + h) * a.dim + ch * 8;
    cp_async16(ks + r * kRow + ch * 8, a.k + off, valid);
    cp_async16(vs + r * kRow + ch * 8, a.v + off, valid);
  }
}

template <int D>
__global__ void __launch_bounds__(threads_for(D)) forward_flash_kernel(Args a) {
  constexpr int S = stages_for(D), kRow = D + 8, kNT = BLOCK_N / 8, kDT = D / 8;
  constexpr int kMT = mtiles_for(D), kWarpRows = 16 * kMT, kThreads = threads_for(D);
  constexpr bool kQRegs = q_in_registers(D);
  extern __shared__ uint4 smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* ks = qs + BLOCK_M * kRow;
  __nv_bfloat16* vs = ks + S * BLOCK_N * kRow;

  const int s = find_sequence(a.cu_q, a.num_seqs, blockIdx.x);
  const int q_start = a.cu_q[s], q_len = a.cu_q[s + 1] - q_start;
  const int p0 = (blockIdx.x - (q_start / BLOCK_M + s)) * BLOCK_M;
  if (p0 >= q_len) return;
  const int h = blockIdx.y, split = blockIdx.z;
  const int k_start = a.cu_k[s], n_kv = max(a.cu_k[s + 1] - k_start, 0);
  const int rows = min(BLOCK_M, q_len - p0);
  const int key_end = n_kv;  // no mask: every query sees all keys of its sequence
  const int n_tiles = (key_end + BLOCK_N - 1) / BLOCK_N;
  const int per = (n_tiles + a.splits - 1) / a.splits;
  const int t_begin = min(split * per, n_tiles), t_end = min(t_begin + per, n_tiles);

  // Q tile: rows past the sequence and columns past the head dim are zeros.
  for (int c = threadIdx.x; c < BLOCK_M * kDT; c += kThreads) {
    const int r = c / kDT, ch = c % kDT;
    const bool valid = r < rows && ch < a.dim / 8;
    const int64_t off = valid ? (int64_t(q_start + p0 + r) * a.hq + h) * a.dim + ch * 8 : 0;
    cp_async16(qs + r * kRow + ch * 8, a.q + off, valid);
  }
  cp_async_commit();
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (t_begin + i < t_end)
      load_kv<D, kThreads>(a, k_start, h, t_begin + i, key_end, ks + i * BLOCK_N * kRow,
                           vs + i * BLOCK_N * kRow);
    cp_async_commit();
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  // This warp's rows: warp * kWarpRows + mt * 16 + {g, g + 8} of the tile, mt < kMT.
  const int wrow = warp * kWarpRows;
  float o[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < kDT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
  // Q fragments kept in registers when they fit (small head dims), else re-read per tile.
  uint32_t qreg[kQRegs ? kMT : 1][kQRegs ? D / 16 : 1][4];

  for (int t = t_begin; t < t_end; ++t) {
    const int pre = t + S - 1;
    if (S > 1 && pre < t_end) {
      const int st = (pre - t_begin) % S;
      load_kv<D, kThreads>(a, k_start, h, pre, key_end, ks + st * BLOCK_N * kRow,
                           vs + st * BLOCK_N * kRow);
    } else if (S == 1) {
      load_kv<D, kThreads>(a, k_start, h, t, key_end, ks, vs);
    }
    cp_async_commit();
    cp_async_wait<S - 1>();
    __syncthreads();
    if constexpr (kQRegs) {
      if (t == t_begin) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk)
            ldmatrix_x4(qreg[mt][kk], qs + (wrow + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) *
                                               kRow + kk * 16 + (lane >> 4) * 8);
      }
    }
    const int k0 = t * BLOCK_N;
    {
      const int st = (t - t_begin) % S;
      const __nv_bfloat16* kt = ks + st * BLOCK_N * kRow;
      const __nv_bfloat16* vt = vs + st * BLOCK_N * kRow;

      // S = Q K^T for this warp's rows and the tile's BLOCK_N keys.
      float sc[kMT][kNT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int i = 0; i < kNT; ++i) sc[mt][i][0] = sc[mt][i][1] = sc[mt][i][2] = sc[mt][i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qa[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          if constexpr (kQRegs) {
#pragma unroll
            for (int e = 0; e < 4; ++e) qa[mt][e] = qreg[mt][kk][e];
          } else {
            ldmatrix_x4(qa[mt], qs + (wrow + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRow +
                                    kk * 16 + (lane >> 4) * 8);
          }
        }
#pragma unroll
        for (int nn = 0; nn < BLOCK_N / 16; ++nn) {
          uint32_t kb[4];
          ldmatrix_x4(kb, kt + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * kRow + kk * 16 +
                              ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma16816(sc[mt][2 * nn], qa[mt], kb[0], kb[1]);
            mma16816(sc[mt][2 * nn + 1], qa[mt], kb[2], kb[3]);
          }
        }
      }
      // The tail mask: keys past the sequence, only on its last tile.
      const bool need_mask = k0 + BLOCK_N > key_end;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int i = 0; i < kNT; ++i) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = sc[mt][i][e] * a.scale_log2;
            if (need_mask) {
              const int j = k0 + i * 8 + 2 * tq + (e & 1);
              if (j >= key_end) x = -INFINITY;
            }
            sc[mt][i][e] = x;
          }
        }
        // Online softmax per row (rows g and g + 8 of the m tile; a row's 4 threads are a quad).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int i = 0; i < kNT; ++i)
            mx = fmaxf(mx, fmaxf(sc[mt][i][2 * r], sc[mt][i][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m[mt][r], mx);
          const float base = m_new == -INFINITY ? 0.f : m_new;  // a row masked so far stays 0
          const float alpha = exp2f(m[mt][r] - base);
          float sum = 0.f;
#pragma unroll
          for (int i = 0; i < kNT; ++i) {
            sc[mt][i][2 * r] = exp2f(sc[mt][i][2 * r] - base);
            sc[mt][i][2 * r + 1] = exp2f(sc[mt][i][2 * r + 1] - base);
            sum += sc[mt][i][2 * r] + sc[mt][i][2 * r + 1];
          }
          // This thread's part of the row sum; the quad adds its parts at the end.
          l[mt][r] = l[mt][r] * alpha + sum;
          m[mt][r] = m_new;
#pragma unroll
          for (int i = 0; i < kDT; ++i) {
            o[mt][i][2 * r] *= alpha;
            o[mt][i][2 * r + 1] *= alpha;
          }
        }
      }
      // O += P V: P's accumulator layout is the A fragment layout of the next mma.
#pragma unroll
      for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        uint32_t pa[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          pa[mt][0] = pack_bf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
          pa[mt][1] = pack_bf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
          pa[mt][2] = pack_bf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
          pa[mt][3] = pack_bf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRow +
                                    dn * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma16816(o[mt][2 * dn], pa[mt], vb[0], vb[1]);
            mma16816(o[mt][2 * dn + 1], pa[mt], vb[2], vb[3]);
          }
        }
      }
    }
    __syncthreads();  // the stage is refilled next iteration
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      const int pr = wrow + mt * 16 + g + r * 8;
      if (pr >= rows) continue;
      const int64_t row = int64_t(q_start + p0 + pr) * a.hq + h;
      if (a.splits == 1) {
        const float inv = lr > 0.f ? 1.f / lr : 0.f;  // no keys: zeros, as the reference
        __nv_bfloat16* dst = a.out + row * a.dim;
#pragma unroll
        for (int i = 0; i < kDT; ++i) {
          const int col = i * 8 + 2 * tq;
          if (col < a.dim)
            *reinterpret_cast<__nv_bfloat162*>(dst + col) =
                __floats2bfloat162_rn(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
        }
      } else {
        const int64_t prow = int64_t(split) * a.tokens * a.hq + row;
        float* dst = a.part_o + prow * a.dim;
#pragma unroll
        for (int i = 0; i < kDT; ++i) {
          const int col = i * 8 + 2 * tq;
          if (col < a.dim)
            *reinterpret_cast<float2*>(dst + col) = make_float2(o[mt][i][2 * r], o[mt][i][2 * r + 1]);
        }
        if (tq == 0) a.part_ml[prow] = make_float2(m[mt][r], lr);
      }
    }
  }
}

// out[t, h] = sum_r o_r 2^(m_r - M) / sum_r l_r 2^(m_r - M), M = max_r m_r; zeros when no split
// saw a key. A block per (token, head) row, the tokens of every sequence (cu_q[0] .. cu_q[n]).
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

template <int D>
int launch(Args a, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes(D, stages_for(D));
  static_assert(smem <= kSmemLimit, "one stage must fit");
  static bool opted = false;
  if (!opted) {
    const cudaError_t e = cudaFuncSetAttribute(forward_flash_kernel<D>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess)
      return fail("attention_forward: %zu bytes of shared memory: %s", smem, cudaGetErrorString(e));
    opted = true;
  }
  const int64_t qblocks = int64_t(a.tokens) / BLOCK_M + a.num_seqs;
  // Split the key ranges when the CTAs cannot fill the GPU twice, never below one tile each.
  const int64_t ctas = qblocks * a.hq;
  int64_t splits = 1;
  if (MAX_SPLITS > 1 && ctas < 2 * int64_t(sm_count())) {
    splits = (2 * int64_t(sm_count()) + ctas - 1) / ctas;
    const int64_t tiles = (int64_t(a.tokens) + BLOCK_N - 1) / BLOCK_N;
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
  forward_flash_kernel<D><<<dim3(static_cast<unsigned>(qblocks), a.hq, a.splits),
                            threads_for(D), smem, stream>>>(a);
  if (a.splits > 1)
    merge_kernel<<<static_cast<unsigned>(int64_t(a.tokens) * a.hq), 128, 0, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("attention_forward: %s", cudaGetErrorString(err));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch_args) {
  Tensors ts(launch_args, "attention_forward");
  const DLTensor* q = ts.input("q", kBF16, 3);              // [T, H, d]
  const DLTensor* k = ts.input("k", kBF16, 3);              // [T, H, d]
  const DLTensor* v = ts.input("v", kBF16, 3);              // [T, H, d]
  const DLTensor* cu_q = ts.input("cu_seqlens_q", kI32, 1); // [num_seqs + 1]
  const DLTensor* cu_k = ts.input("cu_seqlens_k", kI32, 1); // [num_seqs + 1]
  const DLTensor* out = ts.output("out", kBF16, 3);         // [T, H, d]
  if (!ts.ok() || !ts.same_dims(q, out) || !ts.same_dims(k, v) || !ts.same_dims(cu_q, cu_k) ||
      !ts.dim_is(k, 1, q->shape[1]) || !ts.dim_is(k, 2, q->shape[2]))
    return ts.failed();
  const int64_t tokens = q->shape[0], heads = q->shape[1], dim = q->shape[2];
  const int64_t seqs = cu_q->shape[0] - 1;
  if (dim % 8 != 0 || dim > 256 || dim < 8)
    return fail("attention_forward: head dim %lld (needs a multiple of 8 up to 256)",
                static_cast<long long>(dim));
  if (seqs <= 0 || tokens == 0 || heads == 0) return 0;
  if (heads > 65535 || tokens > (int64_t(1) << 30) || k->shape[0] > (int64_t(1) << 30))
    return fail("attention_forward: too large for the grid");
  if (!aligned(q->data, 16) || !aligned(k->data, 16) || !aligned(v->data, 16) ||
      !aligned(out->data, 4))
    return fail("attention_forward: tensors not 16-byte aligned");
  Args a{};
  a.q = static_cast<const __nv_bfloat16*>(q->data);
  a.k = static_cast<const __nv_bfloat16*>(k->data);
  a.v = static_cast<const __nv_bfloat16*>(v->data);
  a.cu_q = static_cast<const int32_t*>(cu_q->data);
  a.cu_k = static_cast<const int32_t*>(cu_k->data);
  a.out = static_cast<__nv_bfloat16*>(out->data);
  a.num_seqs = static_cast<int>(seqs);
  a.tokens = static_cast<int>(tokens);
  a.hq = static_cast<int>(heads);
  a.dim = static_cast<int>(dim);
  a.splits = 1;
  a.scale_log2 = static_cast<float>(1.4426950408889634 / sqrt(static_cast<double>(dim)));
  cudaStream_t stream = static_cast<cudaStream_t>(launch_args->stream);
  // The head dim padded to a compiled tile width (multiples of 16 for the mma k steps).
  if (dim <= 64) return launch<64>(a, stream);
  if (dim <= 80) return launch<80>(a, stream);
  if (dim <= 128) return launch<128>(a, stream);
  if (dim <= 192) return launch<192>(a, stream);
  return launch<256>(a, stream);
}
