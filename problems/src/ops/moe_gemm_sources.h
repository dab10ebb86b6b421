// What the large structured moe_gemm inputs are drawn from, shared by the host generators
// (moe_gemm_hooks.h) and the CUDA ones (cuda/moe_gemm_inputs_cuda.cu); no fmt, so nvcc reads it.
#pragma once

#include <cmath>

#include "atrex/problems/operator.h"
#include "generate.h"
#include "moe_gemm_inputs.h"

namespace atrex::problems::ops {

// The CUDA generator (moe_gemm_inputs_cuda.cu) runs the same functor on the device.
inline GenerateFn fused_moe_weight_fn(const ResolvedShape& s, size_t index, uint64_t seed,
                                      void* data) {
  const double fan_in =
      static_cast<double>(s.int_param(index == 1 ? "hidden_size" : "intermediate_size"));
  return GenerateFn{Distribution::kNormal,
                    static_cast<float>(std::pow(fan_in, -0.5)),
                    0.0f,
                    0,
                    1,
                    kGenBF16,
                    data,
                    seed,
                    input_stream_id(index)};
}
// fp8_blockscale_fused_moe: each fp8 tensor and its scales share a stream: hidden_states (0) /
// a_scale (5), w1 (1) / fc1_scale (6), w2 (2) / fc2_scale (7).
inline BlockQuantSource fp8_moe_source(const ResolvedShape& s, size_t tensor, uint64_t seed) {
  const int64_t t = s.int_param("token_count"), h = s.int_param("hidden_size"),
                n = s.int_param("intermediate_size");
  const int64_t e = s.int_param("num_experts"), bn = s.int_param("scale_block_n"),
                bk = s.int_param("scale_block_k");
  BlockQuantSource src{seed, input_stream_id(tensor), 0, 0, 0, 0};
  src.bf16 = true;
  src.amax_floor = 1e-12f;
  if (tensor == 0) {
    src.rows = t, src.cols = h, src.block_r = 1, src.block_c = bk, src.mul = 0.03f;
  } else if (tensor == 1) {
    src.rows = e * 2 * n, src.cols = h, src.block_r = bn, src.block_c = bk;
  } else {
    src.rows = e * h, src.cols = n, src.block_r = bk, src.block_c = bn;
  }
  return src;
}
// block_scaled_mm: a (0) / a_scales (2) per row and K-group, b (1) / b_scales (3) per
// [group_n, group_k] block with the signed max.
inline BlockQuantSource block_mm_source(const ResolvedShape& s, size_t tensor, uint64_t seed) {
  BlockQuantSource src{seed, input_stream_id(tensor), 0, s.int_param("k"),
                       1,    s.int_param("group_k")};
  src.scale_floor = 1e-10f;
  if (tensor == 0) {
    src.rows = s.int_param("m");
  } else {
    src.rows = s.int_param("n"), src.block_r = s.int_param("group_n"), src.signed_max = true;
  }
  return src;
}
}  // namespace atrex::problems::ops
