// References of fused_moe (bf16 weights) and fp8_blockscale_fused_moe (fp8 e4m3 weights with
// [128, 128] block scales, fp8 activations with per-token-group scales), alibaba/atrex-bench
// data/<op>/reference.py (read 2026-12-01). Both compute, for every routed (token t, slot j)
// with expert e = topk_ids[t, j]:
//   act = silu(x_t . W1[e, n, :]) * (x_t . W1[e, N + n, :])     n < N       (fp32 in torch)
//   y   = act . W2[e, h, :]                                      h < H       (fp32 in torch)
//   out[t, h] = sum_j topk_weights[t, j] * y[t, j, h]
// in three parallel sweeps over the expert-major routing (moe_gemm_common.h), so a naive
// thread-per-output GEMM still reads each expert's weights once per 32 routed pairs. Dot products
// accumulate in fp64 and are rounded to fp32 where torch materialises an fp32 tensor.
#pragma once

#include <cstdint>

#include "atrex/problems/operator.h"
#include "moe_gemm_common.h"

namespace atrex::problems::ops {

// Element access of the two operand formats, in column blocks that share one scale:
// value(r, c) = fp32(raw(r, c) * scale(r, c0)) for c in [c0, c0 + block_c), the reference's
// dequantisation (torch multiplies in fp32). Bf16Operand: one block per row, scale 1 (exact).
struct Bf16Operand {
  const uint16_t* data;  // row-major [rows, cols]
  int64_t cols;
  int64_t block_c;  // = cols
  ATREX_HD float scale(int64_t, int64_t) const { return 1.0f; }
  ATREX_HD float raw(int64_t r, int64_t c) const { return num::bf16_to_float(data[r * cols + c]); }
};
struct Fp8BlockOperand {
  const uint8_t* data;  // row-major [rows, cols]
  const float* scales;  // [rows / block_r, cols / block_c]
  int64_t cols;
  int64_t block_c;
  int64_t block_r;
  ATREX_HD float scale(int64_t r, int64_t c0) const {
    return scales[(r / block_r) * (cols / block_c) + c0 / block_c];
  }
  ATREX_HD float raw(int64_t r, int64_t c) const { return fp8_value(data[r * cols + c]); }
};

// GEMM 1 + activation: act[slot, n] for every routed slot (expert-major order). x and w1 share
// their column blocking (the whole row for bf16, scale_block_k for fp8).
template <class Op>
struct MoeUpGate {
  Op x;   // [T, H]
  Op w1;  // [E * 2N, H] (expert e's rows start at e * 2N)
  const int32_t* ids;
  const int64_t* pair_at;
  int64_t top_k;
  int64_t hidden;
  int64_t inter;  // N
  SlotTile tile;  // slots x N
  float* act;     // [slots, N]
  ATREX_HD void operator()(int64_t i) const {
    int64_t slot, n;
    if (!tile.map(i, slot, n)) return;
    const int64_t pair = pair_at[slot], t = pair / top_k, e = ids[pair];
    const int64_t gate_row = e * 2 * inter + n, up_row = gate_row + inter;
    double gate = 0, up = 0;
    for (int64_t c0 = 0; c0 < hidden; c0 += w1.block_c) {
      const float sx = x.scale(t, c0), sg = w1.scale(gate_row, c0), su = w1.scale(up_row, c0);
      for (int64_t h = c0; h < c0 + w1.block_c; ++h) {
        const double xv = x.raw(t, h) * sx;
        gate += xv * static_cast<double>(w1.raw(gate_row, h) * sg);
        up += xv * static_cast<double>(w1.raw(up_row, h) * su);
      }
    }
    act[slot * inter + n] = silu_f32(static_cast<float>(gate)) * static_cast<float>(up);
  }
};

// GEMM 2: y[slot, h] = act[slot, :] . W2[e, h, :].
template <class Op>
struct MoeDown {
  Op w2;  // [E * H, N]
  const int32_t* ids;
  const int64_t* pair_at;
  const float* act;
  int64_t hidden;
  int64_t inter;
  SlotTile tile;  // slots x H
  float* y;       // [slots, H]
  ATREX_HD void operator()(int64_t i) const {
    int64_t slot, h;
    if (!tile.map(i, slot, h)) return;
    const int64_t row = static_cast<int64_t>(ids[pair_at[slot]]) * hidden + h;
    const float* a = act + slot * inter;
    double acc = 0;
    for (int64_t c0 = 0; c0 < inter; c0 += w2.block_c) {
      const float sw = w2.scale(row, c0);
      for (int64_t n = c0; n < c0 + w2.block_c; ++n)
        acc += static_cast<double>(a[n]) * (w2.raw(row, n) * sw);
    }
    y[slot * hidden + h] = static_cast<float>(acc);
  }
};

// out[t, h] = sum_j fp32(y * w) (torch multiplies in fp32, then adds; the sum is fp64 here).
// fused_moe writes fp32; fp8_blockscale_fused_moe casts to fp8 e4m3 (torch's c10 semantics:
// what rounds past 448, |x| > 464, becomes NaN; no saturation).
struct MoeCombine {
  const float* y;
  const float* weights;  // [T, k]
  const int64_t* slot_of;
  int64_t top_k;
  int64_t hidden;
  float* out_f32;
  uint8_t* out_fp8;
  ATREX_HD void operator()(int64_t i) const {
    const int64_t t = i / hidden, h = i % hidden;
    double acc = 0;
    for (int64_t j = 0; j < top_k; ++j) {
      acc += y[slot_of[t * top_k + j] * hidden + h] * weights[t * top_k + j];
    }
    if (out_f32) out_f32[i] = static_cast<float>(acc);
    if (out_fp8) out_fp8[i] = num::float_to_fp8e4m3(static_cast<float>(acc));
  }
};

template <class Exec, class Op>
void fused_moe_sweeps(const Exec& ex, Op x, Op w1, Op w2, const float* weights, const int32_t* ids,
                      int64_t tokens, int64_t hidden, int64_t inter, int64_t experts, int64_t top_k,
                      float* out_f32, uint8_t* out_fp8) {
  const int64_t slots = tokens * top_k;
  Routing<Exec> route(ex, ids, slots, experts);
  ScratchBuffer<Exec> act(ex,
                          static_cast<size_t>(slots) * static_cast<size_t>(inter) * sizeof(float));
  ScratchBuffer<Exec> y(ex,
                        static_cast<size_t>(slots) * static_cast<size_t>(hidden) * sizeof(float));
  if (!route.buf || !act || !y) return;
  const SlotTile up_tile{slots, inter}, down_tile{slots, hidden};
  ex.for_each(up_tile.total(), MoeUpGate<Op>{x, w1, ids, route.pair_at, top_k, hidden, inter,
                                             up_tile, act.template as<float>()});
  ex.for_each(down_tile.total(), MoeDown<Op>{w2, ids, route.pair_at, act.template as<float>(),
                                             hidden, inter, down_tile, y.template as<float>()});
  ex.for_each(tokens * hidden, MoeCombine{y.template as<float>(), weights, route.slot_of, top_k,
                                          hidden, out_f32, out_fp8});
}

// Inputs: hidden_states [T, H] bf16, w1 [E, 2N, H] bf16, w2 [E, H, N] bf16, topk_weights [T, k]
// fp32, topk_ids [T, k] int32. Output: out [T, H] fp32.
template <class Exec>
void fused_moe_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                         void* const* out) {
  const int64_t hidden = s.int_param("hidden_size"), inter = s.int_param("intermediate_size");
  fused_moe_sweeps(ex, Bf16Operand{static_cast<const uint16_t*>(in[0]), hidden, hidden},
                   Bf16Operand{static_cast<const uint16_t*>(in[1]), hidden, hidden},
                   Bf16Operand{static_cast<const uint16_t*>(in[2]), inter, inter},
                   static_cast<const float*>(in[3]), static_cast<const int32_t*>(in[4]),
                   s.int_param("token_count"), hidden, inter, s.int_param("num_experts"),
                   s.int_param("top_k"), static_cast<float*>(out[0]), nullptr);
}

// Inputs: hidden_states [T, H] fp8, w1 [E, 2N, H] fp8, w2 [E, H, N] fp8, topk_weights [T, k],
// topk_ids [T, k], a_scale [T, H/bk], fc1_scale [E, 2N/bn, H/bk], fc2_scale [E, H/bk, N/bn]
// (bn = scale_block_n, bk = scale_block_k). Output: out [T, H] fp8 e4m3.
template <class Exec>
void fp8_blockscale_fused_moe_reference(const Exec& ex, const ResolvedShape& s,
                                        const void* const* in, void* const* out) {
  const int64_t hidden = s.int_param("hidden_size"), inter = s.int_param("intermediate_size");
  const int64_t bn = s.int_param("scale_block_n"), bk = s.int_param("scale_block_k");
  const Fp8BlockOperand x{static_cast<const uint8_t*>(in[0]), static_cast<const float*>(in[5]),
                          hidden, bk, 1};
  // Expert-stacked weights as one [E * rows, cols] matrix: rows per expert are multiples of the
  // row block, so the flat block index is the reference's [e, row block, col block] index.
  const Fp8BlockOperand w1{static_cast<const uint8_t*>(in[1]), static_cast<const float*>(in[6]),
                           hidden, bk, bn};
  const Fp8BlockOperand w2{static_cast<const uint8_t*>(in[2]), static_cast<const float*>(in[7]),
                           inter, bn, bk};
  fused_moe_sweeps(ex, x, w1, w2, static_cast<const float*>(in[3]),
                   static_cast<const int32_t*>(in[4]), s.int_param("token_count"), hidden, inter,
                   s.int_param("num_experts"), s.int_param("top_k"), nullptr,
                   static_cast<uint8_t*>(out[0]));
}

}  // namespace atrex::problems::ops
