// Output comparisons of the moe_gemm operators where elementwise allclose does not fit
// (docs/operators/moe_gemm.md gives the reasons): data-dependent valid prefixes, order-free
// token lists within an expert, near-ties of routing scores, and fp8 outputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "atrex/problems/compare.h"
#include "atrex/problems/operator.h"
#include "moe_gemm_common.h"
#include "moe_gemm_topk.h"

namespace atrex::problems::ops {

inline void record_failure(CompareResult& r, const std::string& what) {
  if (r.bad_count++ == 0) r.message = what;
  r.pass = false;
}
inline CompareResult finish(CompareResult r, int64_t n) {
  if (!r.pass) r.message += fmt::format(" ({} of {} elements wrong)", r.bad_count, n);
  return r;
}

// Multiset equality of cand[b, e) and ref[b, e): the tokens of one expert, in any order.
inline void compare_segment(CompareResult& r, const char* name, const int32_t* cand,
                            const int32_t* ref, int64_t b, int64_t e, int64_t expert) {
  std::vector<int32_t> c(cand + b, cand + e), x(ref + b, ref + e);
  std::sort(c.begin(), c.end());
  std::sort(x.begin(), x.end());
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i] == x[i]) continue;
    record_failure(
        r,
        fmt::format("{}[{}:{}] (expert {}) holds {} where the reference's sorted segment holds {}; "
                    "entries of one expert may come in any order",
                    name, b, e, expert, c[i], x[i]));
  }
}

// moe_align_block_size outputs 0 (sorted_token_ids) and 1 (expert_ids): only the reference's
// valid prefix (num_tokens_post_pad) is compared. expert_ids must match there exactly; within
// each expert's padded segment, sorted_token_ids must hold the same multiset (tokens and
// padding entries T*k), in any order, as vLLM's atomic-counter kernels produce.
inline CompareResult compare_align_outputs(const ResolvedShape& s, size_t index,
                                           std::span<const void* const> cand,
                                           std::span<const void* const> ref,
                                           std::span<const void* const>, double, double) {
  CompareResult r;
  const int64_t block = s.int_param("block_size");
  const int64_t valid = static_cast<const int32_t*>(ref[2])[0];
  const auto* ce = static_cast<const int32_t*>(cand[1]);
  const auto* re = static_cast<const int32_t*>(ref[1]);
  if (index == 1) {
    for (int64_t b = 0; b < valid / block; ++b) {
      if (ce[b] != re[b])
        record_failure(r, fmt::format("expert_ids[{}]: got {}, expected {}", b, ce[b], re[b]));
    }
    return finish(r, valid / block);
  }
  const auto* cs = static_cast<const int32_t*>(cand[0]);
  const auto* rs = static_cast<const int32_t*>(ref[0]);
  for (int64_t b = 0; b < valid / block;) {  // one segment per run of equal expert ids
    int64_t end = b + 1;
    while (end < valid / block && re[end] == re[b]) ++end;
    compare_segment(r, "sorted_token_ids", cs, rs, b * block, end * block, re[b]);
    b = end;
  }
  return finish(r, valid);
}

// moe_count_and_sort output 0 (sorted_token_ids): per expert segment [cumsum[e], cumsum[e+1])
// of the reference, the same tokens in any order.
inline CompareResult compare_count_sorted(const ResolvedShape& s, size_t,
                                          std::span<const void* const> cand,
                                          std::span<const void* const> ref,
                                          std::span<const void* const>, double, double) {
  CompareResult r;
  const int64_t experts = s.int_param("num_experts");
  const auto* cumsum = static_cast<const int32_t*>(ref[2]);
  for (int64_t e = 0; e < experts; ++e) {
    compare_segment(r, "sorted_token_ids", static_cast<const int32_t*>(cand[0]),
                    static_cast<const int32_t*>(ref[0]), cumsum[e], cumsum[e + 1], e);
  }
  return finish(r, s.outputs[0].numel());
}

// Relative score difference below which two experts count as tied for moe_topk_gating_softmax:
// two fp32 softmax implementations may order experts whose probabilities differ in the last
// bits differently (different exp, sum order, or ranking by logits).
constexpr double kRoutingTieRel = 1e-5;

// moe_topk_gating_softmax output 1 (topk_ids): row by row, the candidate's ids must be distinct
// experts whose (masked) softmax score, recomputed from gating_output, equals the reference's
// weight at the same position within kRoutingTieRel. Away from ties that is exact equality of
// ids; among (near-)tied experts any choice and order is accepted.
inline CompareResult compare_gating_ids(const ResolvedShape& s, size_t,
                                        std::span<const void* const> cand,
                                        std::span<const void* const> ref,
                                        std::span<const void* const> in, double, double) {
  CompareResult r;
  const int64_t tokens = s.int_param("token_count"), experts = s.int_param("num_experts"),
                k = s.int_param("top_k");
  const auto* ids = static_cast<const int32_t*>(cand[1]);
  const auto* rw = static_cast<const float*>(ref[0]);
  const auto* ri = static_cast<const int32_t*>(ref[1]);
  for (int64_t t = 0; t < tokens; ++t) {
    GatingScores sc{static_cast<const float*>(in[0]) + t * experts, experts,
                    s.int_param("num_expert_groups"), s.int_param("topk_group")};
    sc.init();
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = ids[t * k + j];
      const auto where =
          fmt::format("topk_ids[{}, {}]: got {}, expected {}", t, j, id, ri[t * k + j]);
      if (id < 0 || id >= experts) {
        record_failure(r, where + "; not an expert index");
        continue;
      }
      if (std::find(ids + t * k, ids + t * k + j, id) != ids + t * k + j) {
        record_failure(r, where + "; expert chosen twice in the row");
        continue;
      }
      const double want = rw[t * k + j], got = sc.score(id);
      if (std::fabs(got - want) > kRoutingTieRel * std::fabs(want)) {
        record_failure(
            r,
            where + fmt::format(
                        "; its score {:.9g} differs from the reference's {:.9g} beyond a near-tie",
                        got, want));
      }
    }
  }
  return finish(r, tokens * k);
}

// fp8 e4m3 outputs (fp8_blockscale_fused_moe): allclose widened by one fp8 rounding step at the
// larger magnitude, since a candidate's fp32 result a hair from the reference's may round to the
// neighbouring fp8 value (one step is 12.5% relative at the bottom of a binade, beyond rtol).
// Overflow: torch's cast gives NaN (0x7f | sign) for |x| > 464 (what rounds past 448); a
// candidate may give that NaN or saturate to ±448 there, and may overflow where the reference
// rounded to ±448.
inline double fp8_step(double mag) {
  if (mag < 0.015625) return 0.001953125;  // subnormal spacing 2^-9
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(mag))) - 3);
}
inline CompareResult compare_fp8_output(const ResolvedShape& s, size_t index,
                                        std::span<const void* const> cand,
                                        std::span<const void* const> ref,
                                        std::span<const void* const>, double atol, double rtol) {
  CompareResult r;
  const TensorDesc& d = s.outputs[index];
  const auto* cb = static_cast<const uint8_t*>(cand[index]);
  const auto* rb = static_cast<const uint8_t*>(ref[index]);
  const int64_t n = d.numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = cb[i], x = rb[i];
    const bool c_nan = (c & 0x7f) == 0x7f, x_nan = (x & 0x7f) == 0x7f;
    const auto where = [&] {
      return fmt::format("{}[{}, {}]: got {}, expected {}", d.name, i / d.dims.back(),
                         i % d.dims.back(), num::fp8e4m3_to_float(c), num::fp8e4m3_to_float(x));
    };
    if (x_nan || c_nan) {
      const bool same_sign = (c & 0x80) == (x & 0x80);
      const bool ok = same_sign && ((c_nan && x_nan) || (x_nan && (c & 0x7f) == 0x7e) ||
                                    (c_nan && (x & 0x7f) == 0x7e));
      if (!ok)
        record_failure(
            r,
            where() + "; NaN is torch's fp8 overflow (|x| > 464) and is only accepted next to it");
      continue;
    }
    const double cv = num::fp8e4m3_to_float(c), xv = num::fp8e4m3_to_float(x),
                 diff = std::fabs(cv - xv);
    r.max_abs_error = std::max(r.max_abs_error, diff);
    if (xv != 0) r.max_rel_error = std::max(r.max_rel_error, diff / std::fabs(xv));
    const double tol =
        atol + rtol * std::fabs(xv) + fp8_step(std::max(std::fabs(cv), std::fabs(xv)));
    if (diff > tol)
      record_failure(r, where() + fmt::format("; |diff| {:.4g} > {:.4g} (allclose + one fp8 step)",
                                              diff, tol));
  }
  return finish(r, n);
}

}  // namespace atrex::problems::ops
