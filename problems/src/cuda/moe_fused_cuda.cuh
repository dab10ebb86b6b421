// Tiled CUDA references of fused_moe and fp8_blockscale_fused_moe (included by moe_gemm_cuda.cu
// after its Scratch<CudaExec>). Same definition as moe_gemm_fused.h (expert-major routing, GEMM 1,
// silu(gate) * up, GEMM 2, weighted combine), but each GEMM is a grouped 64 x 64 shared-memory
// tile per (expert, 64 routed slots, 64 columns) with fp32 accumulation instead of one thread per
// output with fp64 sums: results differ from the functor in the last bits of fp32 (each operand
// is still dequantised in fp32 as torch does), far inside the operators' tolerances.
#pragma once

#include "../ops/moe_gemm_fused.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

inline constexpr int kMoeTile = 64;   // slots and columns per tile
inline constexpr int kMoeTileK = 32;  // reduction step

// The slot tile `tile` of the expert-major routing: expert e's slots [offset[e], offset[e+1])
// in tiles of 64, experts in order. False past the last tile (the grid is an upper bound:
// ceil(slots / 64) + E tiles, so no host round trip is needed for the counts).
__device__ inline bool moe_slot_tile(const int64_t* offset, int64_t experts, int64_t tile,
                                     int64_t& e, int64_t& s0, int64_t& s1) {
  int64_t first = 0;
  for (e = 0; e < experts; ++e) {
    const int64_t n = (offset[e + 1] - offset[e] + kMoeTile - 1) / kMoeTile;
    if (tile < first + n) {
      s0 = offset[e] + (tile - first) * kMoeTile;
      s1 = offset[e + 1];
      return true;
    }
    first += n;
  }
  return false;
}

// GEMM 1's rows: slot -> its token's row of x, dequantised in fp32.
template <class Op>
struct MoeTokenRows {
  Op x;
  const int64_t* pair_at;
  int64_t top_k;
  __device__ float load(int64_t slot, int64_t k) const {
    const int64_t t = pair_at[slot] / top_k;
    return x.raw(t, k) * x.scale(t, k);
  }
};
// GEMM 2's rows: the activation of the slot.
struct MoeActRows {
  const float* act;
  int64_t cols;
  __device__ float load(int64_t slot, int64_t k) const { return act[slot * cols + k]; }
};
// The weight rows of expert e (stacked [E * rows_per_expert, K]), dequantised in fp32.
template <class Op>
struct MoeExpertRows {
  Op w;
  int64_t rows_per_expert;
  __device__ float load(int64_t e, int64_t j, int64_t k) const {
    const int64_t r = e * rows_per_expert + j;
    return w.raw(r, k) * w.scale(r, k);
  }
};

// c[slot, col] = sum_k a(slot, k) * b(e, col, k) over the slot tiles (blockIdx.x) and 64-column
// tiles (blockIdx.y); 256 threads, 4 x 4 outputs each.
template <class A, class B>
__global__ void __launch_bounds__(256)
    moe_grouped_gemm_kernel(const int64_t* offset, int64_t experts, A a, B b, int64_t kdim,
                            int64_t ncols, float* c) {
  __shared__ float as[kMoeTileK][kMoeTile + 1];
  __shared__ float bs[kMoeTileK][kMoeTile + 1];
  int64_t e, s0, s1;
  if (!moe_slot_tile(offset, experts, blockIdx.x, e, s0, s1)) return;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kMoeTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < kdim; k0 += kMoeTileK) {
    for (int i = threadIdx.x; i < kMoeTile * kMoeTileK; i += 256) {
      const int r = i / kMoeTileK, kk = i % kMoeTileK;
      const int64_t k = k0 + kk;
      as[kk][r] = (s0 + r < s1 && k < kdim) ? a.load(s0 + r, k) : 0.0f;
      bs[kk][r] = (col0 + r < ncols && k < kdim) ? b.load(e, col0 + r, k) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kMoeTileK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i], bv[i] = bs[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t slot = s0 + ty * 4 + i;
    if (slot >= s1) continue;
    for (int j = 0; j < 4; ++j) {
      const int64_t col = col0 + tx * 4 + j;
      if (col < ncols) c[slot * ncols + col] = acc[i][j];
    }
  }
}

// act[slot, n] = silu(h1[slot, n]) * h1[slot, N + n] (the functor's fp32 activation).
struct MoeSiluMul {
  const float* h1;  // [slots, 2N]
  int64_t inter;
  float* act;  // [slots, N]
  __device__ void operator()(int64_t i) const {
    const int64_t slot = i / inter, n = i % inter;
    act[i] = ops::silu_f32(h1[slot * 2 * inter + n]) * h1[slot * 2 * inter + inter + n];
  }
};

template <class Op>
void fused_moe_tiled(const CudaExec& ex, Op x, Op w1, Op w2, const float* weights,
                     const int32_t* ids, int64_t tokens, int64_t hidden, int64_t inter,
                     int64_t experts, int64_t top_k, float* out_f32, uint8_t* out_fp8) {
  const int64_t slots = tokens * top_k;
  ops::Routing<CudaExec> route(ex, ids, slots, experts);
  ops::ScratchBuffer<CudaExec> h1(
      ex, static_cast<size_t>(slots) * static_cast<size_t>(2 * inter) * sizeof(float));
  ops::ScratchBuffer<CudaExec> act(
      ex, static_cast<size_t>(slots) * static_cast<size_t>(inter) * sizeof(float));
  ops::ScratchBuffer<CudaExec> y(
      ex, static_cast<size_t>(slots) * static_cast<size_t>(hidden) * sizeof(float));
  if (!route.buf || !h1 || !act || !y) return;
  const auto tiles = static_cast<unsigned>((slots + kMoeTile - 1) / kMoeTile + experts);
  if (slots > 0) {
    const dim3 g1(tiles, static_cast<unsigned>((2 * inter + kMoeTile - 1) / kMoeTile));
    moe_grouped_gemm_kernel<<<g1, 256, 0, ex.stream>>>(
        route.offset, experts, MoeTokenRows<Op>{x, route.pair_at, top_k},
        MoeExpertRows<Op>{w1, 2 * inter}, hidden, 2 * inter, h1.as<float>());
    ex.for_each(slots * inter, MoeSiluMul{h1.as<float>(), inter, act.as<float>()});
    const dim3 g2(tiles, static_cast<unsigned>((hidden + kMoeTile - 1) / kMoeTile));
    moe_grouped_gemm_kernel<<<g2, 256, 0, ex.stream>>>(
        route.offset, experts, MoeActRows{act.as<float>(), inter}, MoeExpertRows<Op>{w2, hidden},
        inter, hidden, y.as<float>());
  }
  ex.for_each(tokens * hidden, ops::MoeCombine{y.as<float>(), weights, route.slot_of, top_k, hidden,
                                               out_f32, out_fp8});
}

inline void fused_moe_cuda(const CudaExec& ex, const ResolvedShape& s, const void* const* in,
                           void* const* out) {
  const int64_t hidden = s.int_param("hidden_size"), inter = s.int_param("intermediate_size");
  fused_moe_tiled(ex, ops::Bf16Operand{static_cast<const uint16_t*>(in[0]), hidden, hidden},
                  ops::Bf16Operand{static_cast<const uint16_t*>(in[1]), hidden, hidden},
                  ops::Bf16Operand{static_cast<const uint16_t*>(in[2]), inter, inter},
                  static_cast<const float*>(in[3]), static_cast<const int32_t*>(in[4]),
                  s.int_param("token_count"), hidden, inter, s.int_param("num_experts"),
                  s.int_param("top_k"), static_cast<float*>(out[0]), nullptr);
}

inline void fp8_blockscale_fused_moe_cuda(const CudaExec& ex, const ResolvedShape& s,
                                          const void* const* in, void* const* out) {
  const int64_t hidden = s.int_param("hidden_size"), inter = s.int_param("intermediate_size");
  const int64_t bn = s.int_param("scale_block_n"), bk = s.int_param("scale_block_k");
  const ops::Fp8BlockOperand x{static_cast<const uint8_t*>(in[0]), static_cast<const float*>(in[5]),
                               hidden, bk, 1};
  const ops::Fp8BlockOperand w1{static_cast<const uint8_t*>(in[1]),
                                static_cast<const float*>(in[6]), hidden, bk, bn};
  const ops::Fp8BlockOperand w2{static_cast<const uint8_t*>(in[2]),
                                static_cast<const float*>(in[7]), inter, bn, bk};
  fused_moe_tiled(ex, x, w1, w2, static_cast<const float*>(in[3]),
                  static_cast<const int32_t*>(in[4]), s.int_param("token_count"), hidden, inter,
                  s.int_param("num_experts"), s.int_param("top_k"), nullptr,
                  static_cast<uint8_t*>(out[0]));
}

}  // namespace atrex::problems::cuda
