// Reference re-expressed as a cpu candidate: l2_norm.
// out = bf16(x * rsqrt(sum(x^2) + eps)) per row, x: bf16 [N, H] (problems/src/ops/norm_ops.h).
#include <cmath>

#include "atrex/candidate_util.h"

using namespace atrex::cand;

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors t(launch, "l2_norm");
  const DLTensor* x = t.input("x", kBF16, 2);
  const DLTensor* o = t.output("out", kBF16, 2);
  if (!t.ok() || !t.same_dims(x, o)) return t.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = xp + r * hidden;
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) ss += double(bf16_to_float(xr[h])) * bf16_to_float(xr[h]);
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss) + eps);
    for (int64_t h = 0; h < hidden; ++h)
      op[r * hidden + h] = float_to_bf16(bf16_to_float(xr[h]) * inv);
  }
  return 0;
}
