// Operator group "rope_conv_delta": fused_qkv_rope, mrope, causal_conv1d, chunk_delta_rule_output, chunk_gated_delta_rule_state, gated_delta_rule_update.
// Signatures and distributions of alibaba/atrex-bench data/<op>/{reference.py,input.py}
// (semantics carried over, not code). Not defined yet.
#include "def_helpers.h"

namespace atrex::problems::ops {

void add_rope_conv_delta_operators(std::vector<OperatorDef>& /*ops*/) {}

}  // namespace atrex::problems::ops
