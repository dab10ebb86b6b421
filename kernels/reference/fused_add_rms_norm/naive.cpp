// Reference re-expressed as a cpu candidate: fused_add_rms_norm.
// residual_out = bf16(x + residual); out = bf16((residual_out * rsqrt(mean(residual_out^2) + eps))
// * w), x/residual: bf16 [T, H], w: bf16 [H] (problems/src/ops/norm_ops.h).
#include <cmath>

#include "atrex/candidate_util.h"

using namespace atrex::cand;

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors t(launch, "fused_add_rms_norm");
  const DLTensor* x = t.input("x", kBF16, 2);
  const DLTensor* res = t.input("residual", kBF16, 2);
  const DLTensor* w = t.input("weight", kBF16, 1);
  const DLTensor* o = t.output("out", kBF16, 2);
  const DLTensor* ro = t.output("residual", kBF16, 2);
  if (!t.ok() || !t.same_dims(x, res) || !t.same_dims(x, o) || !t.same_dims(x, ro) ||
      !t.dim_is(w, 0, x->shape[1]))
    return t.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* rp = static_cast<const uint16_t*>(res->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  auto* op = static_cast<uint16_t*>(o->data);
  auto* rop = static_cast<uint16_t*>(ro->data);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * hidden;
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const uint16_t sum = float_to_bf16(bf16_to_float(xp[base + h]) + bf16_to_float(rp[base + h]));
      rop[base + h] = sum;
      ss += double(bf16_to_float(sum)) * bf16_to_float(sum);
    }
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / double(hidden)) + eps);
    for (int64_t h = 0; h < hidden; ++h)
      op[base + h] = float_to_bf16((bf16_to_float(rop[base + h]) * inv) * bf16_to_float(wp[h]));
  }
  return 0;
}
