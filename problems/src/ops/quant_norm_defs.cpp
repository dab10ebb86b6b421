// Operator group "quant_norm": fp8_dynamic_per_token_quant, per_token_group_quant_fp8, fused_rmsnorm_quant, gated_rms_norm, layer_norm, fused_qk_rmsnorm, linear_sigmoid_mul.
// Signatures and distributions of alibaba/atrex-bench data/<op>/{reference.py,input.py}
// (semantics carried over, not code). Not defined yet.
#include "def_helpers.h"

namespace atrex::problems::ops {

void add_quant_norm_operators(std::vector<OperatorDef>& /*ops*/) {}

}  // namespace atrex::problems::ops
