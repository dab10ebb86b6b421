// Analytic roofline counts of the moe_gemm operators: FLOPs by dtype and minimum compulsory
// traffic (each input read once, each output written once; for MoE only the experts a shape's
// routing hits). docs/operators/moe_gemm.md compares them with the released roofline.json.
#pragma once

#include <cmath>

#include "atrex/problems/operator.h"
#include "def_helpers.h"

namespace atrex::problems::ops {

// Expected number of experts hit when each of T tokens picks k distinct experts uniformly
// (the routing of the fused-MoE generators): E * (1 - (1 - k/E)^T).
inline double expected_experts_hit(double tokens, double experts, double k) {
  return experts * (1.0 - std::pow(1.0 - k / experts, tokens));
}

// E[sum_e ceil(c_e / bs)] for c_e ~ Binomial(n, 1/E) (randint routing of moe_align_block_size):
// the expected number of padded blocks, summed over the pmf in log space.
inline double expected_padded_blocks(int64_t n, int64_t experts, int64_t block) {
  const double p = 1.0 / static_cast<double>(experts), lp = std::log(p), lq = std::log1p(-p);
  double blocks = 0;
  for (int64_t c = 1; c <= n; ++c) {
    const double log_pmf = std::lgamma(n + 1.0) - std::lgamma(c + 1.0) - std::lgamma(n - c + 1.0) +
                           c * lp + (n - c) * lq;
    blocks += std::exp(log_pmf) * static_cast<double>((c + block - 1) / block);
  }
  return static_cast<double>(experts) * blocks;
}

// Integer-only: reads topk_ids; writes the expected valid prefix (sorted ids, one expert id
// per block, the count), not the maximal allocation.
inline RooflineCounts moe_align_block_size_roofline(const ResolvedShape& s) {
  const int64_t block = s.int_param("block_size");
  const double blocks =
      expected_padded_blocks(s.inputs[0].numel(), s.int_param("num_experts"), block);
  return RooflineCounts{
      {}, input_bytes(s), 4.0 * (blocks * static_cast<double>(block) + blocks + 1)};
}

inline RooflineCounts moe_count_and_sort_roofline(const ResolvedShape& s) {
  return RooflineCounts{{}, input_bytes(s), output_bytes(s)};
}

// Softmax per row: subtract the max, exp, sum (E - 1 adds), divide: 4E - 1 FLOPs; the top-k
// selection is comparisons.
inline RooflineCounts moe_topk_gating_softmax_roofline(const ResolvedShape& s) {
  const double e = static_cast<double>(s.int_param("num_experts"));
  return RooflineCounts{{{"fp32", static_cast<double>(s.int_param("token_count")) * (4 * e - 1)}},
                        input_bytes(s),
                        output_bytes(s)};
}

// Selection and masking only: no FLOPs.
inline RooflineCounts topk_filter_roofline(const ResolvedShape& s) {
  return RooflineCounts{{{"fp32", 0.0}}, input_bytes(s), output_bytes(s)};
}

// Shared by both fused MoEs: the two GEMMs (2 * T*k * (2N*H + H*N)), silu(gate) * up (5 FLOPs
// per intermediate element) and the weighted sum over k (2 per output element and slot).
inline double fused_moe_flops(double t, double k, double h, double n) {
  return 6 * t * k * h * n + t * k * (5 * n + 2 * h);
}

inline RooflineCounts fused_moe_roofline(const ResolvedShape& s) {
  const double t = static_cast<double>(s.int_param("token_count")),
               h = static_cast<double>(s.int_param("hidden_size"));
  const double n = static_cast<double>(s.int_param("intermediate_size")),
               k = static_cast<double>(s.int_param("top_k"));
  const double hit = expected_experts_hit(t, static_cast<double>(s.int_param("num_experts")), k);
  const double read =
      2 * t * h + hit * 3 * n * h * 2 + 8 * t * k;  // x, hit experts' w1 + w2, routing
  return RooflineCounts{{{"bf16", fused_moe_flops(t, k, h, n)}}, read, output_bytes(s)};
}

// As fused_moe, plus the dequantisation multiplies of the reference (activations T*H, hit
// experts' weights 3*N*H each); fp8 operands are 1 byte, scales 4.
inline RooflineCounts fp8_blockscale_fused_moe_roofline(const ResolvedShape& s) {
  const double t = static_cast<double>(s.int_param("token_count")),
               h = static_cast<double>(s.int_param("hidden_size"));
  const double n = static_cast<double>(s.int_param("intermediate_size")),
               k = static_cast<double>(s.int_param("top_k"));
  const double bn = static_cast<double>(s.int_param("scale_block_n")),
               bk = static_cast<double>(s.int_param("scale_block_k"));
  const double hit = expected_experts_hit(t, static_cast<double>(s.int_param("num_experts")), k);
  const double per_expert = 3 * n * h + 4 * (2 * n / bn * h / bk + h / bk * n / bn);
  const double read = t * h + 4 * t * h / bk + hit * per_expert + 8 * t * k;
  const double flops = fused_moe_flops(t, k, h, n) + t * h + hit * 3 * n * h;
  return RooflineCounts{{{"fp8_e4m3", flops}}, read, output_bytes(s)};
}

// 2*M*N*K for the block dot products, then per output element and K-group two scale
// multiplies and the sum over groups: (3 * K/gk - 1) * M * N.
inline RooflineCounts block_scaled_mm_roofline(const ResolvedShape& s) {
  const double m = static_cast<double>(s.int_param("m")), n = static_cast<double>(s.int_param("n"));
  const double k = static_cast<double>(s.int_param("k")),
               groups = k / static_cast<double>(s.int_param("group_k"));
  return RooflineCounts{
      {{"fp8_e4m3", 2 * m * n * k + (3 * groups - 1) * m * n}}, input_bytes(s), output_bytes(s)};
}

}  // namespace atrex::problems::ops
