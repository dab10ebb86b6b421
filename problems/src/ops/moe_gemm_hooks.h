// Resolve hooks (computed dims, cross-parameter checks) and structured input generators of the
// moe_gemm operators, after the Atrex-Bench input.py files (read 2026-12-01). Host only.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "generate.h"
#include "moe_gemm_inputs.h"
#include "moe_gemm_sources.h"

namespace atrex::problems::ops {

inline Result<void> check_that(bool cond, const std::string& what) {
  if (!cond) return invalid_input(what);
  return ok();
}

// ---- resolve hooks: computed dims and cross-parameter constraints

inline Result<void> resolve_align(ResolvedShape& s) {
  const int64_t pairs = s.inputs[0].numel(), e = s.int_param("num_experts"),
                bs = s.int_param("block_size");
  if (auto r = check_that(e >= 1 && bs >= 1, "num_experts and block_size must be at least 1"); !r)
    return r;
  const int64_t max_padded = pairs + e * (bs - 1);  // vLLM's allocation
  if (auto r = check_that(max_padded < (int64_t{1} << 31), "sorted_token_ids would overflow int32");
      !r)
    return r;
  s.outputs[0].dims = {max_padded};
  s.outputs[1].dims = {(max_padded + bs - 1) / bs};
  s.outputs[2].dims = {1};
  return ok();
}

inline Result<void> resolve_count(ResolvedShape& s) {
  if (auto r = check_that(s.int_param("num_experts") >= 1, "num_experts must be at least 1"); !r)
    return r;
  s.outputs[0].dims = {s.inputs[0].numel()};
  s.outputs[2].dims = {s.int_param("num_experts") + 1};
  return ok();
}

inline Result<void> resolve_gating(ResolvedShape& s) {
  const int64_t e = s.int_param("num_experts"), k = s.int_param("top_k");
  const int64_t g = s.int_param("num_expert_groups"), tg = s.int_param("topk_group");
  if (auto r = check_that(k >= 1 && k <= e,
                          fmt::format("top_k {} must be in [1, num_experts = {}]", k, e));
      !r)
    return r;
  if (g > 0 && tg > 0) {
    if (auto r = check_that(
            e % g == 0 && g <= 64 && tg <= g && k <= tg * (e / g),
            "grouped routing needs num_experts % num_expert_groups == 0, at most 64 groups, "
            "topk_group <= num_expert_groups and top_k <= topk_group * group size");
        !r) {
      return r;
    }
  }
  return ok();
}

inline Result<void> resolve_topk_filter(ResolvedShape& s) {
  return check_that(s.int_param("top_k") >= 1, "top_k must be at least 1");
}

inline Result<void> resolve_fused_moe(ResolvedShape& s) {
  return check_that(s.int_param("top_k") <= s.int_param("num_experts"),
                    "top_k must not exceed num_experts");
}

inline Result<void> resolve_fp8_moe(ResolvedShape& s) {
  const int64_t t = s.int_param("token_count"), h = s.int_param("hidden_size"),
                n = s.int_param("intermediate_size");
  const int64_t e = s.int_param("num_experts"), bn = s.int_param("scale_block_n"),
                bk = s.int_param("scale_block_k");
  if (auto r = check_that(
          bn >= 1 && bk >= 1 && h % bk == 0 && n % bn == 0,
          fmt::format(
              "hidden_size {} and intermediate_size {} must be multiples of scale_block_k {} and "
              "scale_block_n {}",
              h, n, bk, bn));
      !r) {
    return r;
  }
  if (auto r = resolve_fused_moe(s); !r) return r;
  s.inputs[5].dims = {t, h / bk};
  s.inputs[6].dims = {e, 2 * n / bn, h / bk};
  s.inputs[7].dims = {e, h / bk, n / bn};
  return ok();
}

inline Result<void> resolve_block_scaled_mm(ResolvedShape& s) {
  const int64_t n = s.int_param("n"), k = s.int_param("k"), gn = s.int_param("group_n"),
                gk = s.int_param("group_k");
  if (auto r = check_that(
          gn >= 1 && gk >= 4 && gk % 4 == 0 && n % gn == 0 && k % gk == 0,
          fmt::format(
              "n {} and k {} must be multiples of group_n {} and group_k {} (a multiple of 4)", n,
              k, gn, gk));
      !r) {
    return r;
  }
  s.inputs[2].dims = {s.int_param("m"), k / gk};
  s.inputs[3].dims = {n / gn, k / gk};
  return ok();
}

// ---- structured generators (moe_gemm_inputs.h); `index` follows the signature order

inline void gen_randint_ids(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  fill_uniform_ids(static_cast<int32_t*>(data), s.inputs[index].numel(), s.int_param("num_experts"),
                   seed, input_stream_id(index));
}

// fused_moe w1 (index 1): randn * hidden_size^-0.5; w2 (index 2): randn * intermediate_size^-0.5
// (bf16, rounded after each step like torch).
inline void gen_fused_moe_weight(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  const GenerateFn f = fused_moe_weight_fn(s, index, seed, data);
  parallel_for_cpu(s.inputs[index].numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// fused_moe topk_weights (3) and topk_ids (4) from one router draw (stream of index 4).
inline void gen_fused_moe_routing(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  fill_softmax_routing(s.int_param("token_count"), s.int_param("num_experts"), s.int_param("top_k"),
                       seed, input_stream_id(4), index == 4 ? static_cast<int32_t*>(data) : nullptr,
                       index == 3 ? static_cast<float*>(data) : nullptr);
}

inline void gen_fp8_moe_quantised(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  fp8_moe_source(s, index, seed).fill_quantised(static_cast<uint8_t*>(data));
}
inline void gen_fp8_moe_scales(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  fp8_moe_source(s, index - 5, seed).fill_scales(static_cast<float*>(data));
}
// topk_weights: softmax(randn(T, k)); topk_ids: topk(rand(T, E), k).indices (distinct experts).
inline void gen_fp8_moe_weights(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  const int64_t k = s.int_param("top_k");
  auto* w = static_cast<float*>(data);
  parallel_for_cpu(s.int_param("token_count"), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float mx = -INFINITY, z = 0;
      for (int64_t j = 0; j < k; ++j)
        mx = std::max(mx, normal_at(seed, input_stream_id(index), t * k + j));
      for (int64_t j = 0; j < k; ++j)
        z += std::exp(normal_at(seed, input_stream_id(index), t * k + j) - mx);
      for (int64_t j = 0; j < k; ++j)
        w[t * k + j] = std::exp(normal_at(seed, input_stream_id(index), t * k + j) - mx) / z;
    }
  });
}
inline void gen_fp8_moe_ids(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  const int64_t e = s.int_param("num_experts"), k = s.int_param("top_k");
  auto* ids = static_cast<int32_t*>(data);
  auto rand = [&](int64_t t, int64_t x) {
    return static_cast<float>(uniform_at(seed, input_stream_id(index), t * e + x));
  };
  for_each_topk_row(s.int_param("token_count"), e, k, rand,
                    [&](int64_t t, const float*, const int32_t* order) {
                      for (int64_t j = 0; j < k; ++j) ids[t * k + j] = order[j];
                    });
}

inline void gen_block_mm_quantised(const ResolvedShape& s, size_t index, uint64_t seed,
                                   void* data) {
  block_mm_source(s, index, seed).fill_quantised(static_cast<uint8_t*>(data));
}
inline void gen_block_mm_scales(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  block_mm_source(s, index - 2, seed).fill_scales(static_cast<float*>(data));
}

}  // namespace atrex::problems::ops
