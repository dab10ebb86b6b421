// Reference re-expressed as a cpu candidate: silu_and_mul.
// x: bf16 [N, 2d] -> out: bf16 [N, d] = bf16(bf16(silu(x[:, :d])) * x[:, d:]), silu(z) =
// z / (1 + exp(-z)) in fp32 (problems/src/ops/activation_ops.h).
#include <cmath>

#include "atrex/candidate_util.h"

using namespace atrex::cand;

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors t(launch, "silu_and_mul");
  const DLTensor* x = t.input("x", kBF16, 2);
  const DLTensor* o = t.output("out", kBF16, 2);
  if (!t.ok() || !t.dim_is(o, 0, x->shape[0]) || !t.dim_is(o, 1, x->shape[1] / 2))
    return t.failed();
  const int64_t rows = x->shape[0], cols = x->shape[1], d = cols / 2;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = xp + r * cols;
    for (int64_t j = 0; j < d; ++j) {
      const float g = bf16_to_float(xr[j]);
      const float act = bf16_to_float(float_to_bf16(g / (1.0f + std::exp(-g))));
      op[r * d + j] = float_to_bf16(act * bf16_to_float(xr[d + j]));
    }
  }
  return 0;
}
