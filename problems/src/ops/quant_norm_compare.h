// Output comparisons of the fp8 quantisation operators (fp8_dynamic_per_token_quant,
// per_token_group_quant_fp8, fused_rmsnorm_quant). Host only.
//
// Elementwise allclose does not fit an fp8 output: one e4m3 step is 6-12% of the value, so a
// candidate whose scale differs from the reference's by one fp32 ulp (amax / 240 vs amax *
// (1 / 240)), or whose bf16 intermediate rounds once instead of twice, legitimately lands one
// step away near a rounding boundary. The q outputs are therefore compared dequantised, each
// side with its own scale; the scales themselves are compared relative to their magnitude.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include <fmt/format.h>

#include "atrex/problems/compare.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

// Spacing of the e4m3 grid at magnitude |q|: 2^-9 below 2^-6 (subnormals), else 2^(e-3) for
// |q| in [2^e, 2^(e+1)) (the upper spacing at a power of two).
inline double fp8e4m3_step(double q) {
  const double a = std::fabs(q);
  if (a < 0.015625) return 0.001953125;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the binade is [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 4);
}

// q: fp8 [.., H]; scales: fp32, one per q.numel() / scales.numel() consecutive elements (a
// row or a group). Passes when |q_c s_c - q_r s_r| <= step(q_r) s_r + rtol |q_r s_r| for every
// element: one fp8 step at the reference's magnitude, plus the sweep's rtol for the rounding
// of the quantised value itself. A NaN reference must be matched by a NaN.
inline CompareResult compare_dequantised(const TensorDesc& q_desc, const TensorDesc& scale_desc,
                                         const void* q_cand, const void* scale_cand,
                                         const void* q_ref, const void* scale_ref, double rtol) {
  CompareResult res;
  const int64_t n = q_desc.numel();
  const int64_t per_scale = n / scale_desc.numel();
  const int64_t cols = q_desc.dims.back();
  const auto* qc = static_cast<const uint8_t*>(q_cand);
  const auto* qr = static_cast<const uint8_t*>(q_ref);
  const auto* sc = static_cast<const float*>(scale_cand);
  const auto* sr = static_cast<const float*>(scale_ref);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t si = i / per_scale;
    const double vc = num::fp8e4m3_to_float(qc[i]), vr = num::fp8e4m3_to_float(qr[i]);
    const double dc = vc * sc[si], dr = vr * sr[si];
    bool ok = true;
    std::string why;
    if (std::isnan(dr)) {
      ok = std::isnan(dc);
    } else if (!std::isfinite(dc)) {
      ok = false;
      why = "non-finite dequantised value where the reference is finite";
    } else {
      const double diff = std::fabs(dc - dr);
      res.max_abs_error = std::max(res.max_abs_error, diff);
      if (dr != 0) res.max_rel_error = std::max(res.max_rel_error, diff / std::fabs(dr));
      const double tol = fp8e4m3_step(vr) * std::fabs(sr[si]) + rtol * std::fabs(dr);
      ok = diff <= tol;
      if (!ok)
        why = fmt::format(
            "|diff| {:.4g} > {:.4g} (one fp8 step at the reference's magnitude + rtol)", diff, tol);
    }
    if (!ok) {
      if (res.bad_count == 0) {
        res.message = fmt::format(
            "{}[{}, {}]: dequantised {} (q {} x scale {}), expected {} (q {} x scale {}){}{}",
            q_desc.name, i / cols, i % cols, dc, vc, sc[si], dr, vr, sr[si],
            why.empty() ? "" : "; ", why);
      }
      ++res.bad_count;
    }
  }
  if (res.bad_count > 0) {
    res.pass = false;
    res.message += fmt::format(" ({} of {} elements wrong)", res.bad_count, n);
  }
  return res;
}

// OutputCompareFn of an fp8 output whose scales are output kScale.
template <size_t kScale>
CompareResult compare_fp8_dequantised(const ResolvedShape& shape, size_t index,
                                      std::span<const void* const> cand,
                                      std::span<const void* const> ref,
                                      std::span<const void* const> /*inputs*/, double /*atol*/,
                                      double rtol) {
  return compare_dequantised(shape.outputs[index], shape.outputs[kScale], cand[index], cand[kScale],
                             ref[index], ref[kScale], rtol);
}

// OutputCompareFn of quantisation scales: |c - r| <= rtol |r|. Scales are amax / fp8_max, exact
// functions of the input, of magnitude ~1e-2: the sweep's atol (1e-2) would accept a scale off
// by 2x (e.g. amax / 448 where the reference takes amax / 240).
inline CompareResult compare_scale_relative(const ResolvedShape& shape, size_t index,
                                            std::span<const void* const> cand,
                                            std::span<const void* const> ref,
                                            std::span<const void* const> /*inputs*/,
                                            double /*atol*/, double rtol) {
  return compare_output(shape.outputs[index], cand[index], ref[index], 0.0, rtol);
}

}  // namespace atrex::problems::ops
