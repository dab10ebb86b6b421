// Reference re-expressed as a cpu candidate: moe_sum_reduce.
// expert_outputs: bf16 [T, K, H] -> out: bf16 [T, H] = bf16(float(sum over K) *
// routed_scaling_factor), the sum in fp64 (problems/src/ops/activation_ops.h).
#include "atrex/candidate_util.h"

using namespace atrex::cand;

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors t(launch, "moe_sum_reduce");
  const DLTensor* x = t.input("expert_outputs", kBF16, 3);
  const DLTensor* o = t.output("out", kBF16, 2);
  if (!t.ok() || !t.dim_is(o, 0, x->shape[0]) || !t.dim_is(o, 1, x->shape[2])) return t.failed();
  const int64_t tokens = x->shape[0], top_k = x->shape[1], hidden = x->shape[2];
  const float scale = static_cast<float>(atrex_param_float(launch, "routed_scaling_factor", 1.0));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const uint16_t* xt = xp + tok * top_k * hidden;
    for (int64_t h = 0; h < hidden; ++h) {
      double acc = 0;
      for (int64_t k = 0; k < top_k; ++k) acc += bf16_to_float(xt[k * hidden + h]);
      op[tok * hidden + h] = float_to_bf16(static_cast<float>(acc) * scale);
    }
  }
  return 0;
}
