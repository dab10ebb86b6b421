// Tiled CUDA reference of block_scaled_mm, bit-identical to the definition
// ops::BlockScaledMmElement
// (../ops/moe_gemm_block_mm.h, after alibaba/atrex-bench data/block_scaled_mm/reference.py), which
// runs one thread per output element and takes ~15 s per call on an H200 for the largest shapes.
// Included by moe_gemm_cuda.cu only: everything here has internal linkage.
//
// Layout: a [M, K] and b [N, K] fp8 e4m3 bytes, row-major; a_scales [M, K/gk] and
// b_scales [N/gn, K/gk] fp32; out [M, N] fp32. A block of 256 threads computes a 64 x 64 tile of
// out (8 warps, each a 16 x 32 sub-tile, each thread 4 x 4 outputs). K is walked in chunks of at
// most 32 that never cross a K-group; a chunk of a and b is decoded to doubles in shared memory,
// k-major (tile[k][row]), while the next chunk's bytes are loaded into registers.
//
// Exactness: the definition sums a group's products as int64 counts of 2^-18,
// fp8_units(a) * fp8_units(b), and converts the sum to double. Here every byte is decoded to the
// double fp8_units(byte), an integer with |units| <= 245760 (< 2^18, NaN bytes included), so each
// product is an integer below 2^36, exact in double, and every partial sum of a group is an integer
// of magnitude <= group_k * 245760^2 < 2^53 for group_k <= 2^17, exact as well. The order of the
// fused multiply-adds therefore does not matter and the group's double equals double(int64 sum); a
// zero sum is +0.0 in both, as fma(x, y, +0.0) of an exact -0.0 product rounds to +0.0. The scaling
// and the fp64 sum over K-groups repeat the definition's expressions in its order kb = 0, 1, ...,
// so out is bit-identical. A larger group_k (never in the suite) runs the definition itself.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../ops/moe_gemm_block_mm.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {
namespace {

constexpr int kBsmmTile = 64;    // rows of a and of b per block tile (out tile 64 x 64)
constexpr int kBsmmChunkK = 32;  // k values staged per pair of __syncthreads
constexpr int kBsmmThreads = 256;
constexpr int64_t kBsmmMaxExactGroupK = int64_t{1} << 17;  // 2^17 * 245760^2 < 2^53
// The thread mappings below are written for these sizes.
static_assert(kBsmmTile == 64 && kBsmmChunkK == 32 && kBsmmThreads == 256);

struct BsmmArgs {
  const uint8_t* a;
  const uint8_t* b;
  const float* a_scales;
  const float* b_scales;
  float* out;
  int64_t m, n, k, group_n, group_k;
  int64_t groups;  // k / group_k
};

// One K-chunk of both operands: tile[k][row] = fp8_units(byte) as a double, 0 beyond the matrix.
struct BsmmStaging {
  __align__(16) double a[kBsmmChunkK][kBsmmTile];
  __align__(16) double b[kBsmmChunkK][kBsmmTile];
};

// The chunk in flight: group kb, bytes [kb * group_k + offset, + len()) of each row.
struct BsmmCursor {
  int64_t kb = 0;
  int64_t offset = 0;
  __device__ int64_t k0(const BsmmArgs& p) const { return kb * p.group_k + offset; }
  __device__ int len(const BsmmArgs& p) const {
    return static_cast<int>(p.group_k - offset < kBsmmChunkK ? p.group_k - offset : kBsmmChunkK);
  }
  __device__ bool ends_group(const BsmmArgs& p) const { return offset + kBsmmChunkK >= p.group_k; }
  __device__ bool done(const BsmmArgs& p) const { return kb >= p.groups; }
  __device__ void advance(const BsmmArgs& p) {
    offset += kBsmmChunkK;
    if (offset >= p.group_k) {
      offset = 0;
      ++kb;
    }
  }
};

// Threads 0-127 stage the a tile, 128-255 the b tile: 16 bytes each, bytes [16 * half, + 16) of
// one row's chunk, so a warp reads 16 rows x 32 contiguous bytes and its shared stores (16 rows,
// both halves) hit every bank exactly twice.
struct BsmmLoader {
  const uint8_t* row_bytes;  // this thread's row of a or b; nullptr beyond M or N
  int row;
  int half;
  bool stages_a;
  uint32_t words[4];

  __device__ BsmmLoader(const BsmmArgs& p, int64_t m0, int64_t n0, int thread) {
    stages_a = thread < kBsmmThreads / 2;
    row = (thread % (kBsmmThreads / 2)) / 2;
    half = thread % 2;
    const int64_t r = (stages_a ? m0 : n0) + row;
    row_bytes = r < (stages_a ? p.m : p.n) ? (stages_a ? p.a : p.b) + r * p.k : nullptr;
  }
  __device__ void load(const BsmmArgs& p, const BsmmCursor& c) {
    const int64_t k0 = c.k0(p);
    const int len = c.len(p);  // a multiple of 4: group_k is (resolve checks)
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int at = 16 * half + 4 * w;
      words[w] = row_bytes && at < len ? ops::load_u32(row_bytes + k0 + at) : 0u;
    }
  }
  __device__ void store(BsmmStaging& s) const {
    double(*tile)[kBsmmTile] = stages_a ? s.a : s.b;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const auto byte = static_cast<uint8_t>(words[w] >> (8 * q));
        tile[16 * half + 4 * w + q][row] = static_cast<double>(ops::fp8_units(byte));
      }
    }
  }
};

// A thread's outputs: rows row0 + {0, 1, 8, 9} and columns col0 + {0, 1, 16, 17} of the tile, so
// each operand comes from shared memory as two double2 reads, broadcast within the warp.
// Loops over these four are unrolled, so that dot and acc stay in registers.
__device__ constexpr int bsmm_row_step(int i) { return i % 2 + 8 * (i / 2); }
__device__ constexpr int bsmm_col_step(int j) { return j % 2 + 16 * (j / 2); }

__device__ void bsmm_multiply_chunk(const BsmmStaging& s, int len, int row0, int col0,
                                    double (&dot)[4][4]) {
  for (int kk = 0; kk < len; kk += 4) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const double* a_row = s.a[kk + q];
      const double* b_row = s.b[kk + q];
      const double2 a01 = *reinterpret_cast<const double2*>(a_row + row0);
      const double2 a89 = *reinterpret_cast<const double2*>(a_row + row0 + 8);
      const double2 b01 = *reinterpret_cast<const double2*>(b_row + col0);
      const double2 b16 = *reinterpret_cast<const double2*>(b_row + col0 + 16);
      const double av[4] = {a01.x, a01.y, a89.x, a89.y};
      const double bv[4] = {b01.x, b01.y, b16.x, b16.y};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) dot[i][j] = fma(av[i], bv[j], dot[i][j]);  // exact (header)
      }
    }
  }
}

// The definition's step for K-group kb, the same expressions in the same types; resets dot.
__device__ void bsmm_apply_group(const BsmmArgs& p, int64_t kb, const int64_t (&m)[4],
                                 const float* const (&bs)[4], double (&dot)[4][4],
                                 double (&acc)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a_scale = p.a_scales[m[i] * p.groups + kb];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float d = static_cast<float>(dot[i][j] * 3.814697265625e-06);  // 2^-18
      acc[i][j] += (d * a_scale) * bs[j][kb];
      dot[i][j] = 0;
    }
  }
}

__global__ void __launch_bounds__(kBsmmThreads, 2) block_scaled_mm_kernel(BsmmArgs p) {
  __shared__ BsmmStaging s;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 = 16 * (warp % 4) + 2 * (lane / 8), col0 = 32 * (warp / 4) + 2 * (lane % 8);
  const int64_t tiles_n = (p.n + kBsmmTile - 1) / kBsmmTile;
  const int64_t tiles = (p.m + kBsmmTile - 1) / kBsmmTile * tiles_n;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t m0 = tile / tiles_n * kBsmmTile, n0 = tile % tiles_n * kBsmmTile;
    int64_t m[4];  // scale rows, clamped into the matrix (outputs beyond it are not stored)
    const float* bs[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      m[i] = std::min(m0 + row0 + bsmm_row_step(i), p.m - 1);
      bs[i] = p.b_scales + std::min(n0 + col0 + bsmm_col_step(i), p.n - 1) / p.group_n * p.groups;
    }
    double dot[4][4] = {}, acc[4][4] = {};
    BsmmLoader loader(p, m0, n0, static_cast<int>(threadIdx.x));
    BsmmCursor chunk;
    if (!chunk.done(p)) loader.load(p, chunk);
    while (!chunk.done(p)) {
      __syncthreads();  // the previous chunk (or tile) is no longer read
      loader.store(s);
      __syncthreads();
      BsmmCursor next = chunk;
      next.advance(p);
      if (!next.done(p)) loader.load(p, next);
      bsmm_multiply_chunk(s, chunk.len(p), row0, col0, dot);
      if (chunk.ends_group(p)) bsmm_apply_group(p, chunk.kb, m, bs, dot, acc);
      chunk = next;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t r = m0 + row0 + bsmm_row_step(i), c = n0 + col0 + bsmm_col_step(j);
        if (r < p.m && c < p.n) p.out[r * p.n + c] = static_cast<float>(acc[i][j]);
      }
    }
  }
}

// The CudaRefFn of block_scaled_mm; a launch error stays pending for the caller.
void block_scaled_mm_cuda(const CudaExec& ex, const ResolvedShape& s, const void* const* in,
                          void* const* out) {
  const BsmmArgs p{static_cast<const uint8_t*>(in[0]),
                   static_cast<const uint8_t*>(in[1]),
                   static_cast<const float*>(in[2]),
                   static_cast<const float*>(in[3]),
                   static_cast<float*>(out[0]),
                   s.int_param("m"),
                   s.int_param("n"),
                   s.int_param("k"),
                   s.int_param("group_n"),
                   s.int_param("group_k"),
                   s.int_param("k") / s.int_param("group_k")};
  if (p.group_k > kBsmmMaxExactGroupK) {  // the double sums could round: run the definition
    ops::block_scaled_mm_reference(ex, s, in, out);
    return;
  }
  if (p.m <= 0 || p.n <= 0) return;
  const int64_t tiles = (p.m + kBsmmTile - 1) / kBsmmTile * ((p.n + kBsmmTile - 1) / kBsmmTile);
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{1} << 20));  // the kernel strides
  block_scaled_mm_kernel<<<blocks, kBsmmThreads, 0, ex.stream>>>(p);
}

}  // namespace
}  // namespace atrex::problems::cuda
